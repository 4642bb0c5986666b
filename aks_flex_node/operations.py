"""Bootstrap and unbootstrap as operations: lock, ledger, runner, status. The CLI, the
agent and the Debian maintainer scripts all come through here."""

import logging
import time

from aks_flex_node.engine import status as st
from aks_flex_node.engine.context import Context
from aks_flex_node.engine.ledger import STATE_DIR, Ledger
from aks_flex_node.engine.lock import RunLock
from aks_flex_node.engine.runner import PhaseResult, Runner
from aks_flex_node.errors import ExitCode, FlexNodeError

log = logging.getLogger(__name__)
TOKEN_CACHE = STATE_DIR + "/token-cache.json"
RUN_DIR = "/run/aks-flex-node"  # private scratch space (azcmagent's 0600 config files)
# A join is wanted but has not succeeded yet: the Debian postinst sets it when a join fails
# in the background mode, and the agent service keeps trying until a full bootstrap succeeds.
PENDING_MARKER = STATE_DIR + "/join-pending"


def exit_code_of(error):
    if error is None:
        return ExitCode.OK
    return getattr(error, "exit_code", ExitCode.FAILED)


def _error_dict(error):
    if error is None:
        return None
    if isinstance(error, FlexNodeError):
        return error.to_dict()
    return {"error": "internal", "message": f"{type(error).__name__}: {error}"}


def bootstrap(cfg, host, *, dry_run=False, sequential=False, only=(), skip=(),
              ignore_preflight_errors=(), progress=None, lock_wait=0.0, local_only=False):
    """Join this node. Returns (RunResult, status dict).

    `local_only` (the agent's frequent pass) converges the host but asks Azure nothing: the
    cloud steps reuse the facts the last full run recorded. Without them it is a full run.
    """
    from aks_flex_node.steps.workflow import bootstrap_steps

    with RunLock(host, "bootstrap", wait=lock_wait):
        ledger = Ledger(host)
        cached = ledger.joined.get("facts") if local_only else None
        ctx = Context(cfg, host, ledger, options={
            "ignore_preflight_errors": set(ignore_preflight_errors), "local_only": bool(cached),
            "dry_run": dry_run})
        ctx.facts.restore(cached)
        if ctx.local_only:
            skip = tuple(skip) + ("preflight",)  # a gate for joining, not for converging
        status_file = st.StatusFile(host)
        runner = Runner(bootstrap_steps(), ctx, sequential=sequential, dry_run=dry_run,
                        only=only, skip=skip, progress=progress)
        base = {
            "operation": "bootstrap",
            "cluster_resource_id": cfg.cluster.resource_id,
            "machine_name": cfg.machine_name,
            "mode": "sequential" if sequential else "concurrent",
            "pass": "local" if ctx.local_only else "full",
        }
        if not dry_run:
            status_file.begin()
            status_file.write(dict(base, state=st.RUNNING, started=st.now_iso(), phases=[]))
        result = runner.run()
        phases = [p.to_dict() for p in result.phases if p.name in runner.selected]
        code = exit_code_of(result.error)
        if result.ok:
            state = st.SUCCEEDED
        elif not dry_run and host.read_bytes(PENDING_MARKER) is not None:
            state = st.PENDING  # a join the agent retries: this attempt failed, the join goes on
        else:
            state = st.FAILED
        summary = dict(
            base, state=state, started=st.now_iso(result.started),
            finished=st.now_iso(result.finished),
            duration_s=round(result.finished - result.started, 3), exit_code=int(code),
            error=_error_dict(result.error), phases=phases, dry_run=dry_run)
        if not dry_run:
            if result.ok or ledger.entries():
                joined = dict(cluster_resource_id=cfg.cluster.resource_id,
                              machine_name=cfg.machine_name, subscription_id=cfg.subscription_id,
                              arc_resource_group=cfg.arc_resource_group)
                if result.ok and not ctx.local_only and not only and not skip:
                    joined["facts"] = ctx.facts.snapshot()
                ledger.set_joined(**joined)
            if result.ok and not only and not skip:
                host.remove(PENDING_MARKER)
            status_file.write(summary)
            status_file.complete()
        return result, summary


def unbootstrap(cfg, host, *, keep_cloud_resources=False, progress=None, lock_wait=0.0):
    """Reverse what the ledger says we did, best effort. Returns (leftovers, status dict):
    leftovers are what could not be removed (each with why), for the operator to clean."""
    from aks_flex_node.steps.workflow import bootstrap_steps

    started = time.time()
    with RunLock(host, "unbootstrap", wait=lock_wait):
        ledger = Ledger(host)
        ctx = Context(cfg, host, ledger)
        status_file = st.StatusFile(host)
        status_file.begin()
        leftovers, kept, phases = [], [], []
        steps = [s for s in reversed(bootstrap_steps()) if ledger.entries(step=s.name)]
        for index, step in enumerate(steps, 1):
            entries = ledger.entries(step=step.name)
            phase = PhaseResult(step.name, step.branch, "removed", started=time.time())
            if progress:
                progress("start", phase, index, len(steps))
            if step.cloud and keep_cloud_resources:
                kept += [f"{e['kind']} {e['id']}" for e in entries]
                phase.status, phase.message = "kept", f"{len(entries)} cloud resource(s) kept"
            else:
                try:
                    left = step.undo(ctx, entries)
                except Exception as exc:  # report and go on: the rest must still be cleaned
                    log.debug("undo of %s failed", step.name, exc_info=True)
                    left = [f"{step.name}: {getattr(exc, 'message', None) or exc}"]
                if left:
                    phase.status, phase.message = "incomplete", "; ".join(left)
                leftovers += left
            phase.finished = time.time()
            phases.append(phase.to_dict())
            if progress:
                progress("finish", phase, index, len(steps))
        host.remove(TOKEN_CACHE)
        host.remove(cfg.cache_dir)
        host.remove(RUN_DIR)
        if not ledger.entries():
            ledger.clear_joined()
            ledger.remove_file()
        state = st.UNJOINED if not leftovers else st.FAILED
        summary = {
            "operation": "unbootstrap", "state": state, "started": st.now_iso(started),
            "finished": st.now_iso(), "duration_s": round(time.time() - started, 3),
            "exit_code": int(ExitCode.OK if not leftovers else ExitCode.FAILED),
            "phases": phases, "leftovers": leftovers, "kept": kept,
            "cluster_resource_id": cfg.cluster.resource_id, "machine_name": cfg.machine_name,
        }
        status_file.write(summary)
        status_file.complete()
        return leftovers, summary
