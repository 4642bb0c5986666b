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
"""

import logging
import signal
import threading
import time

from aks_flex_node.errors import ConfigError, ExitCode, FlexNodeError

log = logging.getLogger(__name__)
MAX_BACKOFF = 600.0


def run(load_config, host, interval=60.0, once=False, stop=None, cloud_interval=1800.0,
        clock=time.monotonic):
    from aks_flex_node import lifecycle, operations

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    backoff = min(10.0, interval)
    last_full = None  # when the last full pass succeeded
    idle = False  # said "nothing to watch" already: say it once, not every interval
    repaired = frozenset()  # (phase, action) the previous pass applied
    unknown = UnknownLog()
    while not stop.is_set():
        try:
            cfg = load_config()
        except ConfigError as exc:
            # Nothing to do until an operator fixes the file; say so and wait.
            log.error("%s", exc.message)
            if once:
                return int(exc.exit_code)
            stop.wait(interval)
            continue
        # The agent converges a node whose join is pending (the postinst marks it) or
        # that is joined; the mark is read once a pass.
        joining = lifecycle.is_pending(host)
        if not joining and not lifecycle.joined(host)[0]:
            if not idle:
                log.info("no join pending and the node is not joined: nothing to watch")
            idle = True
            if once:
                return int(ExitCode.OK)
            stop.wait(interval)
            continue
        idle = False
        full = last_full is None or clock() - last_full >= cloud_interval
        try:
            result, _summary = operations.bootstrap(cfg, host, lock_wait=0.0, local_only=not full,
                                                    recent_repairs=repaired, refresh_pool=joining)
            ok, error = result.ok, result.error
            repaired = result.applied
            unknown.update(result)
        except FlexNodeError as exc:  # lock held by a manual run, etc.
            ok, error, repaired = False, exc, frozenset()
        if ok:
            _log_pass(result, cfg, joining, full)
            if full:
                last_full = clock()
            backoff = min(10.0, interval)
            if once:
                return int(ExitCode.OK)
            stop.wait(interval)
        else:
            log.warning("bootstrap pass failed (%s); retrying in %.0f s",
                        getattr(error, "message", error), backoff)
            if once:
                return int(getattr(error, "exit_code", ExitCode.FAILED))
            last_full = None  # whatever broke, the next pass looks at everything
            stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
    log.info("agent stopped")
    return int(ExitCode.OK)


def _log_pass(result, cfg, joining, full):
    """A journal line for a pass that changed something (the runner logged each action);
    a converged node's passes stay quiet."""
    from aks_flex_node.engine.runner import CHANGED

    changed = [phase.name for phase in result.phases if phase.status == CHANGED]
    if joining:
        log.info("joined %s as %s; keeping the node converged", cfg.cluster.name, cfg.machine_name)
    elif changed:
        log.info("%s pass: repaired %s", "full" if full else "local", ", ".join(changed))


class UnknownLog:
    """What the steps could not observe, logged once per agent process and again only when
    it changes (a container without /proc/modules would otherwise say so every pass)."""

    def __init__(self):
        self.told = set()

    def update(self, result):
        from aks_flex_node.engine.runner import CHANGED, UNCHANGED

        # A phase that did not get as far as its check this pass (blocked by a failure)
        # tells nothing new: what it said before still holds.
        checked = {phase.name for phase in result.phases
                   if phase.status in (CHANGED, UNCHANGED) or phase.unknown}
        now = {(phase.name, item["what"], item["reason"]) for phase in result.phases
               if phase.name in checked for item in phase.unknown}
        now |= {told for told in self.told if told[0] not in checked}
        for name, what, reason in sorted(now - self.told):
            log.warning("%s: cannot tell %s: %s; leaving it alone", name, what, reason)
        for name, what, _reason in sorted(self.told - now):
            if not any(n == name and w == what for n, w, _ in now):
                log.info("%s: %s can be seen again", name, what)
        self.told = now
