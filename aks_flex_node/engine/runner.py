"""The runner: computes the run set, then walks the steps.

Independent branches (identity, install, credentials) run at once on a thread pool; a step
starts when every step it needs has finished, never later: the pool has a thread for every
step, since a step mostly waits (on Azure, a download, a unit) and a ready step queued
behind a full pool would stretch the critical path. What must be bounded is bounded where
it is spent (the downloads: host/download.py MAX_PARALLEL). `sequential` runs one step at
a time in the declared order (the upstream agent's behaviour, kept for comparison).
`dry_run` only checks: each selected step reports what it would change and why, nothing
is applied. A step that is filtered out by --phase/--skip-phase but is needed by a
selected one still has its read-only `check` run, so the facts it gathers (the machine's
identity, the cluster's server) are there. A step whose `run_if` says it does not apply (a
cloud read in a local pass) is not checked. A check only reads: what it found in place
that is ours (Context.adopt) is written to the ledger by the runner after it. What an action
owes (a restart) goes into the ledger before the action runs.

`migrations` (engine/migration.py) run first, once, before any step is checked: what an
earlier release left in an older layout is brought to today's, so a check reads only
today's layout. A dry run migrates nothing and reports what is pending; a migration that
fails blocks every phase (they would read a layout half-way between two).

`recent_repairs` are the (phase, action) pairs the previous pass of the agent applied. One
that is needed again right away did not stick (something undoes it, or it has no effect
here): the phase fails with RepairDidNotStick instead of repairing it again in silence.
What a step could not observe is kept on its phase (`unknown`), never counted as a change.

Once the run set is known, every step of it that applies is asked to `prefetch`: to start
the cloud reads its check will ask for, so that the reads that do not depend on one
another's answers go at once, whichever step asks first (steps/cloud_reads.py; issue 30: a
converged run waited on twelve reads one after the other). A `--sequential` run prefetches
nothing: each step reads for itself, as the upstream agent does. The runner counts the
actions it applies (`Context.applied`): a check may trust an answer read at the start of
the run only while nothing has changed since.
"""

import concurrent.futures
import dataclasses
import logging
import time
import traceback
from typing import List, Optional

from aks_flex_node.engine import migration as mg
from aks_flex_node.errors import FlexNodeError, RepairDidNotStick, UsageError

log = logging.getLogger(__name__)

# Phase outcomes.
CHANGED = "changed"
UNCHANGED = "unchanged"
PLANNED = "planned"  # dry-run: changes would be made
FAILED = "failed"
SKIPPED = "skipped"  # filtered out by --phase / --skip-phase
BLOCKED = "blocked"  # not run because a step it needs failed
FACTS = "facts-only"  # filtered out, but its read-only check ran for a step that needs it


@dataclasses.dataclass
class PhaseResult:
    name: str
    branch: str
    status: str
    started: Optional[float] = None
    finished: Optional[float] = None
    changes: List[dict] = dataclasses.field(default_factory=list)
    message: str = ""
    error: Optional[BaseException] = dataclasses.field(default=None, repr=False)
    unknown: List[dict] = dataclasses.field(default_factory=list)  # what it could not observe

    @property
    def duration(self):
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started

    def to_dict(self):
        out = {"name": self.name, "branch": self.branch, "status": self.status,
               "changes": self.changes, "message": self.message}
        if self.unknown:
            out["unknown"] = self.unknown
        if self.duration is not None:
            out["duration_s"] = round(self.duration, 3)
        return out


@dataclasses.dataclass
class RunResult:
    phases: List[PhaseResult]
    started: float
    finished: float
    migrations: List[mg.MigrationResult] = dataclasses.field(default_factory=list)

    @property
    def failed(self):
        return [p for p in self.phases if p.status == FAILED]

    @property
    def failed_migration(self):
        return mg.failed(self.migrations)

    @property
    def ok(self):
        return not self.failed and self.failed_migration is None

    @property
    def error(self):
        if self.failed_migration is not None:
            return self.failed_migration.error
        return self.failed[0].error if self.failed else None

    @property
    def changed(self):
        return any(p.status in (CHANGED, PLANNED) for p in self.phases) or any(
            m.status in (mg.MIGRATED, mg.PENDING) for m in self.migrations)

    @property
    def applied(self):
        """(phase, what) of every action this run applied: the next pass's recent_repairs."""
        return frozenset((p.name, c["what"]) for p in self.phases if p.status == CHANGED
                         for c in p.changes)


def select(steps, only=(), skip=()):
    """The names to run, in declared order; unknown names are a usage error."""
    known = [s.name for s in steps]
    unknown = [n for n in list(only) + list(skip) if n not in known]
    if unknown:
        raise UsageError(
            f"unknown phase(s): {', '.join(unknown)}; expected one of: {', '.join(known)}")
    chosen = [n for n in known if (not only or n in only) and n not in skip]
    return chosen


class Runner:
    def __init__(self, steps, ctx, *, sequential=False, dry_run=False, only=(), skip=(),
                 progress=None, max_workers=None, recent_repairs=frozenset(), migrations=()):
        self.steps = list(steps)
        self.migrations = tuple(migrations)
        self.by_name = {s.name: s for s in self.steps}
        for step in self.steps:
            for dep in step.needs:
                if dep not in self.by_name:
                    raise ValueError(f"step {step.name} needs unknown step {dep}")
        self.ctx = ctx
        self.sequential = sequential
        self.dry_run = dry_run
        self.selected = select(self.steps, only, skip)
        self.progress = progress or (lambda event, result, index, total: None)
        self.max_workers = 1 if sequential else (max_workers or max(1, len(self.steps)))
        self.recent_repairs = frozenset(recent_repairs)

    def _schedule(self):
        """Selected steps plus the unselected ones they need (for facts), in declared order."""
        wanted = set(self.selected)
        stack = list(self.selected)
        while stack:
            for dep in self.by_name[stack.pop()].needs:
                if not self.by_name[dep].gathers_facts and dep not in self.selected:
                    continue  # a gate such as preflight: filtered out means passed
                if dep not in wanted:
                    wanted.add(dep)
                    stack.append(dep)
        return [s for s in self.steps if s.name in wanted]

    def run(self) -> RunResult:
        started = time.time()
        schedule = self._schedule()
        results = {s.name: PhaseResult(s.name, s.branch, SKIPPED,
                                       message="skipped (not selected)") for s in self.steps}
        migrated = mg.run_migrations(self.migrations, self.ctx,
                                     dry_run=self.dry_run or self.ctx.dry_run)
        failed_migration = mg.failed(migrated)
        if failed_migration is not None:
            for step in schedule:
                results[step.name].status = BLOCKED
                results[step.name].message = f"not run: migration {failed_migration.name} failed"
            return RunResult([results[s.name] for s in self.steps], started, time.time(), migrated)
        if not self.sequential:
            self._prefetch(schedule)
        total = len(self.selected)
        counter = {"n": 0}
        pending = [s for s in schedule]
        running = {}
        failed = False

        scheduled = {s.name for s in schedule}

        def finished_ok(name):
            return name not in scheduled or results[name].status in (
                CHANGED, UNCHANGED, PLANNED, FACTS)

        with concurrent.futures.ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            while pending or running:
                if not failed:
                    for step in list(pending):
                        if self.sequential and running:
                            break
                        if all(finished_ok(d) for d in step.needs):
                            pending.remove(step)
                            facts_only = step.name not in self.selected
                            if not facts_only:
                                counter["n"] += 1
                            index = counter["n"]
                            results[step.name].started = time.time()
                            if not facts_only:
                                self.progress("start", results[step.name], index, total)
                            fut = pool.submit(self._run_step, step, facts_only)
                            running[fut] = (step, facts_only, index)
                        elif self.sequential:
                            break
                if not running:
                    break
                done, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in done:
                    step, facts_only, index = running.pop(fut)
                    result = results[step.name]
                    status, changes, message, error, unknown = fut.result()
                    result.status, result.changes, result.message, result.error = (
                        status, changes, message, error)
                    result.unknown = unknown
                    result.finished = time.time()
                    if status == FAILED:
                        failed = True
                    if not facts_only:
                        self.progress("finish", result, index, total)
        for step in pending:
            results[step.name].status = BLOCKED
            blockers = [d for d in step.needs if results[d].status in (FAILED, BLOCKED)]
            results[step.name].message = (
                f"not run: {', '.join(blockers)} failed" if blockers else "not run: the run failed")
        return RunResult([results[s.name] for s in self.steps], started, time.time(), migrated)

    def _prefetch(self, schedule):
        """Let each scheduled step that applies start its cloud reads. A read only reads, and
        a prefetch that fails starts nothing: the check reads for itself and reports it."""
        for step in schedule:
            try:
                if step.run_if(self.ctx) is None:
                    step.prefetch(self.ctx)
            except Exception:  # never the run's failure: the check that asks says what is wrong
                log.debug("prefetch of %s failed", step.name, exc_info=True)

    def _record_adopted(self, step):
        """What `step`'s check found in place that is ours, into the ledger (a check only
        reads; a dry run writes nothing)."""
        for kind, id, extra in self.ctx.take_adopted(step.name):
            if not (self.dry_run or self.ctx.dry_run):
                self.ctx.ledger.record(step.name, kind, id, **extra)

    def _run_step(self, step, facts_only):
        """(status, changes, message, error, unknown) of one step."""
        unknown = []
        try:
            not_applicable = step.run_if(self.ctx)
            if not_applicable:
                return (FACTS if facts_only else UNCHANGED), [], not_applicable, None, []
            plan = step.check(self.ctx)
            self._record_adopted(step)
            if facts_only:
                return FACTS, [], "skipped (not selected); its facts were read", None, []
            unknown = [u.to_dict() for u in plan.unknown]
            cannot_tell = "; cannot tell: " + "; ".join(map(str, plan.unknown)) if plan.unknown else ""
            if not plan.actions:
                return UNCHANGED, [], (plan.noop_reason or "nothing to do") + cannot_tell, None, unknown
            if self.dry_run:
                for action in plan.actions:
                    self.ctx.planned_obligations.extend(action.owes)
                planned = [a.to_dict() for a in plan.actions]
                return PLANNED, planned, "would change" + cannot_tell, None, unknown
            again = [a for a in plan.actions if (step.name, a.what) in self.recent_repairs]
            if again:
                raise RepairDidNotStick(
                    "repair did not stick: " + "; ".join(f"{a.what} ({a.why})" for a in again)
                    + ": applied on the previous pass and needed again now",
                    remedy="find what undoes it, or why it has no effect on this host "
                    "(journalctl -u aks-flex-node-agent shows each pass); the agent tries it "
                    "once more after its backoff")
            done = []
            for action in plan.actions:
                log.info("%s: %s (%s)", step.name, action.what, action.why)
                if action.owes:  # written down before the change that calls for it
                    self.ctx.ledger.owe(action.owes)
                self.ctx.note_applied()
                if action.run is not None:
                    action.run()
                done.append(action.to_dict())
            return CHANGED, done, f"{len(done)} change(s)" + cannot_tell, None, unknown
        except FlexNodeError as exc:
            log.debug("step %s failed", step.name, exc_info=True)
            return FAILED, [], exc.message, exc, unknown
        except Exception as exc:  # a bug or an unexpected library error: keep the trace in the log
            log.error("step %s failed unexpectedly:\n%s", step.name, traceback.format_exc())
            return FAILED, [], f"{type(exc).__name__}: {exc}", exc, unknown
