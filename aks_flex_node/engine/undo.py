"""Unbootstrap's workflow: the undo phases, in reverse order of the join.

kubeadm reset is the model (kubernetes, cmd/kubeadm/app/cmd/phases/reset): best effort, a
failure is reported with what to do by hand and the rest goes on. Each phase's plan comes
from the ledger alone (no Azure read), so --dry-run shows what would be removed and why;
applying it runs each action and collects what could not be removed. A `Leftover` is
either a failure (unbootstrap exits non-zero and lists it) or `kept` on purpose (a
directory we made that now holds what we did not create).
"""

import dataclasses
import logging
import time
from typing import List

from aks_flex_node.engine.runner import FAILED, PLANNED, PhaseResult

log = logging.getLogger(__name__)

REMOVED = "removed"
KEPT = "kept"
INCOMPLETE = "incomplete"


@dataclasses.dataclass
class Leftover:
    what: str
    why: str
    kept: bool = False  # left on purpose, not a failure

    def __str__(self):
        return f"{self.what}: {self.why}"


@dataclasses.dataclass
class UndoResult:
    phases: List[PhaseResult]
    leftovers: List[Leftover]  # what could not be removed
    kept: List[str]  # what was left on purpose

    @property
    def ok(self):
        return not self.leftovers


def run_undo(steps, ctx, *, dry_run=False, keep_cloud=False, progress=None):
    """Undo `steps` (given in undo order) that have ledger records. Returns an UndoResult."""
    progress = progress or (lambda event, result, index, total: None)
    todo = [(step, step.undo_entries(ctx)) for step in steps]
    todo = [(step, entries) for step, entries in todo if entries]
    phases, leftovers, kept = [], [], []
    for index, (step, entries) in enumerate(todo, 1):
        phase = PhaseResult(step.name, step.branch, REMOVED, started=time.time())
        progress("start", phase, index, len(todo))
        if step.cloud and keep_cloud:
            items = [f"{e['kind']} {e['id']}" for e in entries]
            kept += items
            phase.status, phase.message = KEPT, f"{len(items)} cloud resource(s) kept"
        else:
            _undo_phase(step, ctx, step.undo_entries(ctx), phase, dry_run, leftovers, kept)
        phase.finished = time.time()
        phases.append(phase)
        progress("finish", phase, index, len(todo))
    return UndoResult(phases, leftovers, kept)


def _undo_phase(step, ctx, entries, phase, dry_run, leftovers, kept):
    try:
        plan = step.plan_undo(ctx, entries)
    except Exception as exc:  # report and go on: the other phases must still be undone
        log.debug("planning the undo of %s failed", step.name, exc_info=True)
        phase.status, phase.message, phase.error = FAILED, _message(exc), exc
        leftovers.append(Leftover(step.name, _message(exc)))
        return
    if dry_run:
        phase.status = PLANNED
        phase.changes = [a.to_dict() for a in plan.actions]
        phase.message = "would remove" if plan.actions else (plan.noop_reason or "")
        return
    failed, phase_kept = [], []
    for action in plan.actions:
        log.info("undo %s: %s (%s)", step.name, action.what, action.why)
        try:
            results = action.run() or []
        except Exception as exc:  # best effort: the next action may still succeed
            log.debug("undo action %r failed", action.what, exc_info=True)
            results = [Leftover(action.what, _message(exc))]
        for item in results:
            (phase_kept if item.kept else failed).append(item)
        if not any(not r.kept for r in results):
            phase.changes.append(action.to_dict())
    leftovers += failed
    kept += [str(item) for item in phase_kept]
    notes = [str(item) for item in failed + phase_kept]
    if failed:
        phase.status = INCOMPLETE
    phase.message = "; ".join(notes) or f"{len(phase.changes)} removal(s)"


def _message(exc):
    return getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
