"""`aks-flex-node agent`, the service: finish a pending join, then keep the node converged.

A pass runs the bootstrap workflow; it is idempotent, so on a healthy node it changes
nothing (and restarts nothing). A failed pass is retried with exponential backoff; a
healthy node is re-checked every `interval` seconds (the upstream agent re-bootstrapped from
scratch, stopping the kubelet each time: upstream-go-agent.md §1.3, §8). SIGTERM ends the
loop between or during waits, and the agent exits 0.
"""

import logging
import signal
import threading

from aks_flex_node.errors import ConfigError, ExitCode, FlexNodeError

log = logging.getLogger(__name__)
MAX_BACKOFF = 600.0


def run(load_config, host, interval=60.0, once=False, stop=None):
    from aks_flex_node import operations
    from aks_flex_node.engine.ledger import Ledger

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    backoff = min(10.0, interval)
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
        if not _join_wanted(host, Ledger):
            log.info("no join pending and the node is not joined: nothing to watch")
            if once:
                return int(ExitCode.OK)
            stop.wait(interval)
            continue
        try:
            result, _summary = operations.bootstrap(cfg, host, lock_wait=0.0)
            ok, error = result.ok, result.error
        except FlexNodeError as exc:  # lock held by a manual run, etc.
            ok, error = False, exc
        if ok:
            backoff = min(10.0, interval)
            if once:
                return int(ExitCode.OK)
            stop.wait(interval)
        else:
            log.warning("bootstrap pass failed (%s); retrying in %.0f s",
                        getattr(error, "message", error), backoff)
            if once:
                return int(getattr(error, "exit_code", ExitCode.FAILED))
            stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
    log.info("agent stopped")
    return int(ExitCode.OK)


def _join_wanted(host, ledger_cls):
    """The agent converges a node that is joined, or whose join is pending (postinst marks it)."""
    from aks_flex_node.operations import PENDING_MARKER

    if host.read_bytes(PENDING_MARKER) is not None:
        return True
    ledger = ledger_cls(host)
    return bool(ledger.joined)
