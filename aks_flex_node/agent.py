"""`aks-flex-node agent`, the service: finish a pending join, then keep the node converged.

A pass runs the bootstrap workflow; it is idempotent, so on a healthy node it changes
nothing (and restarts nothing). Every `interval` seconds a local pass converges the host
(files, modes, units, the kubelet running, the Arc agent connected) and asks Azure nothing;
every `cloud_interval` seconds, and after any failure, a full pass checks the cloud side too
(the Arc resource, role assignments, the cluster's version and API server). A failed pass
is retried with exponential backoff. The upstream agent re-bootstrapped from scratch and
stopped the kubelet each time (Azure/AKSFlexNode v0.0.10, commands.go runDaemonLoop and
pkg/status/collector.go NeedsBootstrap). SIGTERM ends the loop between
or during waits, and the agent exits 0 (upstream exits 1).

Each pass is handed what the previous one repaired: a repair needed again on the very next
pass did not stick, and that pass fails saying so (engine/runner.py) rather than repairing
it once a minute in silence; after the failure's backoff it is tried once more. What a
step cannot observe on this host is logged when it first shows, or changes, not every pass.

Each pass runs in a forked child (fork(2)) that reports a small JSON outcome over a pipe
and exits: the Azure SDK, the config and the steps are imported there and go with it, so
the resident agent between passes is the CLI and this module (issue 12: at most 35 MB;
about 50 MB when the SDK stayed imported). So this module imports none of them at its top.
A child that dies (killed, crashed) is a failed pass like any other, with its exit status.

The drift probe (issue 30: at most 3.6 s of CPU an hour, 0.1 % of a core). A local pass cost
128 ms of CPU: 67 ms to import the config and steps again in its child, 62 ms of work; at 58
an hour that was 8.4 s, and holding the imports in this process for the children to share
makes it 25.5 MB, past its 20 MB. So a local pass that converged without changing anything
hands back what it observed of the host (host/observed.py: each path's lstat and stat, a
pseudo-file's content, a listing, a read-only command's answer, taken as the pass looked),
and at the next local interval this process looks again, with the standard library alone:
everything the same -> no pass (status.json's `checked` and `probes`, and the metrics
textfile's last line, say so); anything different, unreadable or failing -> the pass is
forked, as before. A probe never stands in for a full pass, a failed pass's retry, a pending
join, a pass that repaired something (whose repair must be seen to stick) or one that could
not be recorded whole (a process that is not a read-only command, a network exchange the
probe does not defer), nor in agent-pool mode (each pass reads its Node for the pool's
signal). What a local pass reads from the network (the Node, as the node, and HIMDS's token
for it) and what changes with the clock alone (the Node conditions' heartbeat, certificate
expiry, the GPU advertisement's grace, an upgrade window) the probe does not see: a real
local pass runs at least every PROBE_MAX_AGE seconds for them. An hour is then 48 probes of
about 15 ms, 10 local and 2 cloud passes: 3.1 s, against 9.2 s without the probe in the same
run (docs/testing.md, the bench's agent rows).
"""

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from typing import Optional, Tuple

from aks_flex_node import paths
from aks_flex_node.errors import ConfigError, ExitCode, FlexNodeError
from aks_flex_node.host import observed
from aks_flex_node.host.run import run_command
from aks_flex_node.words import WordEnum

log = logging.getLogger(__name__)
MAX_BACKOFF = 600.0
# The longest a probe stands in for a local pass (see the module's docstring): the Node
# conditions' heartbeat, node-problem-detector's 5 minutes (health/report_record.py RESYNC),
# which is also the kubelet's endpointStopGracePeriod that the GPU advertisement waits out
# (gpu/advertised.py). What only a real pass sees (the Node's Ready, the clock's verdicts)
# waits at most this much longer to show in status, metrics and conditions.
PROBE_MAX_AGE = 300.0


class PassKind(WordEnum):
    OK = "ok"  # the pass converged the node
    FAILED = "failed"  # a phase failed, or the pass could not run (its message says why)
    CONFIG = "config"  # the configuration cannot be loaded: wait for an operator
    IDLE = "idle"  # no join pending and nothing joined: nothing to watch


@dataclasses.dataclass(frozen=True)
class PhaseSeen:
    """One phase of a pass, as the parent needs it: what changed, what could not be seen."""

    name: str
    changed: bool
    # Whether the phase got as far as its check: one blocked by a failure tells nothing new
    # about what it cannot observe.
    checked: bool
    unknown: Tuple[Tuple[str, str], ...] = ()  # (what, reason) it could not observe


@dataclasses.dataclass(frozen=True)
class PassOutcome:
    """What a pass (in its child) tells the agent (the parent), over the pipe as JSON."""

    kind: PassKind
    message: str = ""
    exit_code: int = int(ExitCode.OK)
    applied: Tuple[Tuple[str, str], ...] = ()  # (phase, action) it applied
    phases: Optional[Tuple[PhaseSeen, ...]] = None  # None: no bootstrap ran
    joining: bool = False
    cluster: str = ""
    machine: str = ""
    # agent-pool mode: what the pass decided about its Machine (pool_follow.Decision.to_dict),
    # kept by the parent for the passes that do not read the Machine
    machine_goal: Optional[dict] = None
    # what a recorded pass observed of the host (host/observed.py Recorder.finish), for the
    # drift probe; None when it was not recorded or changed something
    observed: Optional[dict] = None
    metrics_file: str = ""  # the node path of the metrics textfile the pass writes (health/metrics.py)

    def probeable(self):
        """The observations a probe may stand on: a pass that converged, changed nothing,
        was no join and was recorded whole; else None."""
        if (self.kind is not PassKind.OK or self.applied or self.joining or self.phases is None
                or any(phase.changed for phase in self.phases) or not self.observed
                or self.observed.get("unprobeable")):
            return None
        return self.observed

    def to_json(self):
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def from_json(cls, data):
        """The outcome a child wrote; ValueError (or TypeError, KeyError) when it is not one."""
        doc = json.loads(data)
        phases = doc.pop("phases")
        return cls(**dict(doc, kind=PassKind(doc["kind"]),
                          applied=tuple(tuple(pair) for pair in doc["applied"]),
                          phases=None if phases is None else tuple(
                              PhaseSeen(**dict(phase, unknown=tuple(tuple(u) for u in phase["unknown"])))
                              for phase in phases)))


def run(load_config, host, interval=60.0, once=False, stop=None, cloud_interval=1800.0,
        clock=time.monotonic, probe_max_age=PROBE_MAX_AGE):
    """The agent's loop (see the module). `probe_max_age`: the longest the drift probe stands
    in for local passes, 0 for never."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    backoff = min(10.0, interval)
    last_full = None  # when the last full pass succeeded
    idle = False  # said "nothing to watch" already: say it once, not every interval
    repaired = frozenset()  # (phase, action) the previous pass applied
    unknown = UnknownLog()
    goal_seen = None  # the last pass's decision about its Machine (agent-pool mode)
    probe = Probe(host, probe_max_age)
    while not stop.is_set():
        full = last_full is None or clock() - last_full >= cloud_interval
        if not full and not once and probe.same(clock()):
            stop.wait(interval)
            continue
        outcome = run_in_child(lambda: one_pass(load_config, host, full, repaired, goal_seen),
                               record=None if full or once or not probe_max_age else host.root)
        probe.after(outcome, clock())
        if outcome.machine_goal != goal_seen and outcome.machine_goal is not None:
            log.info("machine goal: %s", outcome.machine_goal.get("reason"))
        goal_seen = outcome.machine_goal
        if outcome.kind is PassKind.CONFIG:
            # Nothing to do until an operator fixes the file; say so and wait.
            log.error("%s", outcome.message)
            if once:
                return outcome.exit_code
            stop.wait(interval)
            continue
        if outcome.kind is PassKind.IDLE:
            if not idle:
                log.info("no join pending and the node is not joined: nothing to watch")
            idle = True
            if once:
                return int(ExitCode.OK)
            stop.wait(interval)
            continue
        idle = False
        repaired = frozenset(outcome.applied)
        if outcome.phases is not None:
            unknown.update(outcome.phases)
        if outcome.kind is PassKind.OK:
            _log_pass(outcome, full)
            if full:
                last_full = clock()
            backoff = min(10.0, interval)
            if once:
                return int(ExitCode.OK)
            stop.wait(interval)
        else:
            log.warning("bootstrap pass failed (%s); retrying in %.0f s", outcome.message, backoff)
            if once:
                return outcome.exit_code
            last_full = None  # whatever broke, the next pass looks at everything
            stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
    log.info("agent stopped")
    return int(ExitCode.OK)


def one_pass(load_config, host, full, repaired, goal_seen=None):
    """One pass, in the child: its PassOutcome for the parent (see run). `goal_seen`: the
    previous pass's decision about the Machine, which a pass that does not read it keeps."""
    from aks_flex_node import lifecycle, operations, pool_follow
    from aks_flex_node.config.joinmode import JoinMode
    from aks_flex_node.engine.runner import CHANGED, UNCHANGED
    from aks_flex_node.health import metrics
    from aks_flex_node.steps.kinds import open_ledger

    try:
        cfg = load_config()
    except ConfigError as exc:
        return PassOutcome(PassKind.CONFIG, exc.message, int(exc.exit_code))
    try:
        # A leave the pool asked for and a pass did not finish (killed half-way: the kubelet's
        # credential may be gone already) is finished first, never converged back.
        unfinished = lifecycle.leaving(host)
        if unfinished is not None:
            return _leave_for_pool(cfg, host, unfinished)
        # The agent converges a node whose join is pending (the postinst marks it) or that
        # is joined; the mark is read once a pass.
        joining = lifecycle.is_pending(host)
        former = lifecycle.joined(host)[0]
        if not joining and not former:
            return PassOutcome(PassKind.IDLE)
        # Moving the node to another cluster (name, mode) leaves the old one first: that is
        # the operator's reconfigure (lifecycle.leave_then_join), never a pass that finds the
        # file edited before it ran (it would join the new cluster over the old join).
        elsewhere = lifecycle.joined_elsewhere(former, cfg)
        if elsewhere:
            return PassOutcome(PassKind.CONFIG, (
                f"the configuration names another join than the one this node holds ({elsewhere} as "
                f"{former.get('machine_name', cfg.machine_name)}): run `dpkg-reconfigure aks-flex-node` "
                "(or `aks-flex-node unbootstrap`, then `bootstrap`) to move it"), int(ExitCode.USAGE))
        goal, decision, released = None, None, False
        if cfg.mode is JoinMode.AGENT_POOL and former and not joining:
            # The pool's Machine is the goal; the RP's Node signal the go-ahead (pool_follow.py).
            # That signal is read from the API server each pass: no probe stands in for one.
            observed.refuse("agent-pool mode: each pass reads its Node for the pool's signal")
            decision = pool_follow.observe(cfg, host, open_ledger(host), full)
            if decision is not None and decision.verdict is pool_follow.Verdict.RESET:
                return _leave_for_pool(cfg, host, decision.reason, decision.to_dict())
            if decision is not None and decision.verdict in (pool_follow.Verdict.APPLY,
                                                             pool_follow.Verdict.ACKNOWLEDGE):
                goal, released = decision.goal, decision.released
        seen = decision.to_dict() if decision is not None else goal_seen
        result, _summary = operations.bootstrap(cfg, host, lock_wait=0.0, local_only=not full and goal is None,
                                                recent_repairs=repaired, refresh_pool=joining, agent=True,
                                                machine_goal=goal, released=released, goal_seen=seen,
                                                machine_seen=decision.machine_seen if decision is not None else None)
    except FlexNodeError as exc:  # a ledger it cannot read, the lock held by a manual run, etc.
        return PassOutcome(PassKind.FAILED, exc.message, int(exc.exit_code), machine_goal=goal_seen)
    if goal is not None and result.ok:
        # The goal is the node's now (steps/machine_goal.finish): the local passes that follow
        # read no Machine and carry this on; "apply" would stay in status until a full pass.
        seen = pool_follow.in_step(goal).to_dict()
    phases = tuple(PhaseSeen(p.name, p.status == CHANGED, p.status in (CHANGED, UNCHANGED) or bool(p.unknown),
                             tuple((u["what"], u["reason"]) for u in p.unknown)) for p in result.phases)
    kind, message, exit_code = PassKind.OK, "", int(ExitCode.OK)
    if not result.ok:
        kind, message = PassKind.FAILED, str(getattr(result.error, "message", result.error))
        exit_code = int(getattr(result.error, "exit_code", ExitCode.FAILED))
    return PassOutcome(kind, message, exit_code, applied=tuple(sorted(result.applied)), phases=phases,
                       joining=joining, cluster=cfg.cluster.name, machine=cfg.machine_name, machine_goal=seen,
                       metrics_file=metrics.textfile_dir(cfg).rstrip("/") + "/" + metrics.FILE_NAME)


def _leave_for_pool(cfg, host, reason, seen=None):
    """The pool deleted this node's Machine and marked its Node (`reason`): clean the host as
    unbootstrap does (no drain: the RP drained it), leave the package installed and the join
    off (a new join is an operator's: `dpkg-reconfigure aks-flex-node` or `aks-flex-node
    bootstrap`). The leave is marked before it begins and unmarked once it is done: a pass
    killed half-way leaves the mark, and the next pass finishes the leave."""
    from aks_flex_node import lifecycle, operations

    log.warning("leaving the cluster: %s", reason)
    seen = seen or {"verdict": "reset", "reason": reason}
    lifecycle.mark_leaving(host, reason)
    lifecycle.clear_pending(host)
    result, _summary = operations.unbootstrap(cfg, host, lock_wait=0.0, drain=False, reason=reason)
    for item in result.leftovers:
        log.warning("left behind: %s", item)
    if not result.ok:  # the mark stays: the next pass tries the rest again
        return PassOutcome(PassKind.FAILED, "leaving the cluster as the pool asked left behind: "
                           + "; ".join(str(item) for item in result.leftovers), int(ExitCode.FAILED),
                           machine_goal=seen)
    lifecycle.clear_leaving(host)
    return PassOutcome(PassKind.OK, f"left the cluster: {reason}", machine_goal=seen)


class Probe:
    """The drift probe of the agent's parent (see the module): the observations of the last
    local pass that converged without a change, looked at again at each local interval."""

    def __init__(self, host, max_age):
        self.host, self.max_age = host, max_age
        self.observations, self.since, self.count = None, None, 0
        self.metrics_file = ""
        self.told = None  # why passes cannot be probed, as last logged

    def after(self, outcome, now):
        """A pass ran: its observations, when a probe may stand on them, replace the last."""
        self.observations, self.since, self.count = outcome.probeable(), now, 0
        self.metrics_file = outcome.metrics_file
        why = (outcome.observed or {}).get("unprobeable") if outcome.kind is PassKind.OK else None
        if why != self.told and why:
            log.info("the drift probe cannot stand in for the next local pass: %s", why)
        self.told = why

    def same(self, now):
        """True when the probe found everything the last pass observed as it was (and noted
        it in status.json); False when a real pass is due (its reason is logged)."""
        if self.observations is None or now - self.since >= self.max_age:
            return False
        differs = observed.same(self.observations, self._ask)
        if differs is None:
            self.count += 1
            differs = self._note()
        if differs is not None:
            log.info("drift probe: %s; running a local pass", differs)
            self.observations = None
            return False
        log.debug("drift probe: nothing changed since the last pass (%d probes)", self.count)
        return True

    @staticmethod
    def _ask(argv, env, timeout):
        result = run_command(argv, env=env, timeout=timeout, ok_codes=range(256))
        return result.returncode, result.stdout

    def _note(self):
        """status.json and the metrics textfile say when the node was last found as its last
        pass left it; None, or why they could not (a run holds the lock, the record is not a
        succeeded pass's): then a real pass runs."""
        from aks_flex_node.engine import status

        now = time.time()
        try:
            written = status.StatusFile(self.host).note_checked(now, self.count)
            if written is None and self.metrics_file:
                written = _note_metrics(self.host, self.metrics_file, now)
        except FlexNodeError as err:
            return f"the probe's record not written: {err.message}"
        if written is None:  # our own writes are not drift: they, and their directories, are signed again
            observed.sign_again(self.observations, self.host,
                                [paths.STATUS] + ([self.metrics_file] if self.metrics_file else []))
        return written


# health/metrics.py CONVERGED_CHECK, its last line; not imported: the parent holds no health/.
CONVERGED_CHECK = b"aks_flex_node_last_converged_check_timestamp_seconds "
MAX_TEXTFILE = 1 << 20


def _note_metrics(host, path, now):
    """The metrics textfile at node path `path` (when the pass wrote one) says when the probe
    found the node converged; None, or why not."""
    text = host.read_state(path, MAX_TEXTFILE)
    if text is None:
        return None  # no textfile directory: the pass wrote none
    lines = text.split(b"\n")
    found = [i for i, line in enumerate(lines) if line.startswith(CONVERGED_CHECK)]
    if not found:
        return f"{path} has no {CONVERGED_CHECK.decode().strip()} line"
    lines[found[-1]] = CONVERGED_CHECK + str(int(now)).encode()
    host.write_file(path, b"\n".join(lines), mode=0o644)
    return None


def run_in_child(work, record=None):
    """Run `work()` in a forked child and return the PassOutcome it returned. Called only between
    passes, when this process runs no other thread (fork copies just the caller's). With
    `record` (the host's root), what the pass observes of the host is recorded and returned in
    the outcome's `observed` (host/observed.py).

    The child finishes its pass when the agent is told to stop, as a pass in this process
    did before: its SIGTERM/SIGINT handler does nothing (systemd signals the whole unit's
    cgroup, a terminal the whole process group, so the child gets them itself; a Python
    handler, unlike SIG_IGN, is not inherited by the commands it runs, execve(2)). The
    parent's handler sets `stop`, and the parent waits for the child's outcome."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70  # EX_SOFTWARE (sysexits.h): a bug, its trace on stderr
        try:
            os.close(read_end)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: None)
            if record is None:
                outcome = work()
            else:
                with observed.recording(record) as recorder:
                    outcome = work()
                outcome = dataclasses.replace(outcome, observed=recorder.finish())
            data = outcome.to_json()
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(data)
            code = 0
        except BaseException:  # noqa: B036 - reported to the parent by the exit status
            log.exception("the agent's pass crashed")
        finally:
            logging.shutdown()  # flush the journal lines before _exit skips atexit
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()  # EOF when the child exits, whatever way it does
    _pid, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        try:
            return PassOutcome.from_json(data)
        except (ValueError, TypeError, KeyError):
            pass
    return PassOutcome(PassKind.FAILED, f"the pass's process {pid} {_died(status)}", int(ExitCode.FAILED))


def _died(status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"was killed by signal {sig} ({name})"
    return f"exited with status {os.WEXITSTATUS(status)} without reporting"


def _log_pass(outcome, full):
    """A journal line for a pass that changed something (the runner logged each action);
    a converged node's passes stay quiet."""
    if outcome.phases is None:  # no bootstrap ran: the node left as its pool asked
        log.info("%s", outcome.message)
        return
    changed = [phase.name for phase in outcome.phases if phase.changed]
    if outcome.joining:
        log.info("joined %s as %s; keeping the node converged", outcome.cluster, outcome.machine)
    elif changed:
        log.info("%s pass: repaired %s", "full" if full else "local", ", ".join(changed))


class UnknownLog:
    """What the steps could not observe, logged once per agent process and again only when
    it changes (a container without /proc/modules would otherwise say so every pass)."""

    def __init__(self):
        self.told = set()

    def update(self, phases):
        """`phases`: the pass's PhaseSeen."""
        checked = {phase.name for phase in phases if phase.checked}
        now = {(phase.name, what, reason) for phase in phases
               if phase.name in checked for what, reason in phase.unknown}
        # What an unchecked phase said before still holds.
        now |= {told for told in self.told if told[0] not in checked}
        for name, what, reason in sorted(now - self.told):
            log.warning("%s: cannot tell %s: %s; leaving it alone", name, what, reason)
        for name, what, _reason in sorted(self.told - now):
            if not any(n == name and w == what for n, w, _ in now):
                log.info("%s: %s can be seen again", name, what)
        self.told = now
