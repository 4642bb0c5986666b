"""Bootstrap and unbootstrap as runs: lock, ledger, workflow, status.json.

The join lifecycle (join, leave, leave-then-join, the pending mark) is lifecycle.py's and
calls these; so do the CLI and the agent.
"""

import logging
import os
import time

from aks_flex_node import health, paths
from aks_flex_node.engine import status as st
from aks_flex_node.engine.lock import RunLock
from aks_flex_node.engine.runner import Runner
from aks_flex_node.health import node_report
from aks_flex_node.engine.undo import run_undo
from aks_flex_node.errors import ExitCode, FlexNodeError
from aks_flex_node.kube import drain as node_drain
from aks_flex_node.steps import gpu as gpu_phase
from aks_flex_node.steps import machine_goal as goals
from aks_flex_node.steps.context import JoinContext, JoinOptions
from aks_flex_node.steps.join_data import JoinData
from aks_flex_node.steps.kinds import open_ledger
from aks_flex_node.steps.kubelet_upgrade import UpgradeFailed
from aks_flex_node.steps.kubernetes import UPGRADE_ID, UPGRADE_KIND, active_version
from aks_flex_node.steps.migrations import bootstrap_migrations
from aks_flex_node.steps.workflow import bootstrap_steps, unbootstrap_steps

log = logging.getLogger(__name__)


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


def _identity(cfg):
    return {"cluster_resource_id": cfg.cluster.resource_id, "machine_name": cfg.machine_name}


def bootstrap(cfg, host, *, dry_run=False, sequential=False, only=(), skip=(),
              ignore_preflight_errors=(), progress=None, lock_wait=0.0, local_only=False,
              recent_repairs=frozenset(), refresh_pool=True, agent=False, upgrade=False,
              machine_goal=None, released=False, goal_seen=None, machine_seen=None):
    """Join this node. Returns (RunResult, status dict).

    `local_only` (the agent's frequent pass) converges the host but asks Azure nothing: the
    cloud steps reuse the facts the last full run recorded. Without them it is a full run.
    `recent_repairs` (the agent's previous pass's `RunResult.applied`): an action among
    them needed again fails its phase as a repair that did not stick (engine/runner.py).
    `refresh_pool` False (the agent's full passes on a joined node): in agent-pool mode, the
    pool's bootstrap data recorded by the last full run stands unless the kubelet needs a
    new token (each listBootstrapData call mints one: steps/agentpool.py).
    `agent`: the run is the agent's (a kubelet upgrade waits for upgrade_window); `upgrade`:
    `aks-flex-node upgrade` asked for it (a version whose upgrade failed is tried again).
    `machine_goal` (agent-pool mode; pool_follow.py): the Machine goal this run applies;
    recorded as being applied before the run changes anything, as applied when it succeeds, as
    failed when its kubelet did not come Ready; `released`: the pool's operation deleted the
    Node after its own cordon and drain (no drain of ours). `goal_seen`:
    what the agent last decided about its Machine (pool_follow.Decision.to_dict), for status.
    `machine_seen`: (the Machine or None,) as the agent read it for that decision in this pass
    (pool_follow.Decision.machine_seen): the machine phase takes it instead of reading again.
    """
    with RunLock(host, "bootstrap", wait=lock_wait):
        ledger = open_ledger(host)
        cached = ledger.joined.get("facts") if local_only or not refresh_pool else None
        ctx = JoinContext(cfg, host, ledger, data=JoinData.restore(cached), options=JoinOptions(
            ignore_preflight_errors=frozenset(ignore_preflight_errors),
            local_only=bool(cached) and local_only, dry_run=dry_run,
            refresh_pool=refresh_pool, agent=agent, upgrade=upgrade, machine_goal=machine_goal,
            released=released, machine_seen=machine_seen,
            upgrade_started=lambda node, previous, target: node_report.report_upgrade_started(
                lambda: node_report.node_client(cfg, host), node, cfg.machine_name, previous, target)))
        if ctx.local_only:
            skip = tuple(skip) + ("preflight",)  # a gate for joining, not for converging
        status_file = st.StatusFile(host)
        steps = bootstrap_steps(ctx.mode)
        runner = Runner(steps, ctx, sequential=sequential, dry_run=dry_run, only=only, skip=skip,
                        progress=progress, recent_repairs=recent_repairs,
                        migrations=bootstrap_migrations(steps))
        base = dict(_identity(cfg), operation="bootstrap",
                    mode="sequential" if sequential else "concurrent",
                    **{"pass": "local" if ctx.local_only else "full"})
        if not dry_run:
            _mark_running(status_file, base)
            if not agent:  # an operator's join: a leave the pool asked for is over (lifecycle.leaving)
                host.remove(paths.LEAVING)
        if machine_goal is not None and not dry_run:
            goals.begin(ledger, machine_goal, released)  # what the run owes, before the change
        result = runner.run()
        if machine_goal is not None and not dry_run:
            if result.ok:
                goals.finish(ledger)
            elif isinstance(result.error, UpgradeFailed):
                goals.fail(ledger, result.error.message)
        phases = [p.to_dict() for p in result.phases if p.name in runner.selected]
        code = exit_code_of(result.error)
        if result.ok:
            state = st.SUCCEEDED
        elif not dry_run and host.read_bytes(paths.PENDING) is not None:
            state = st.PENDING  # a join the agent retries: this attempt failed, the join goes on
        else:
            state = st.FAILED
        summary = dict(
            base, state=state, started=st.now_iso(result.started),
            finished=st.now_iso(result.finished),
            duration_s=round(result.finished - result.started, 3), exit_code=int(code),
            error=_error_dict(result.error), phases=phases, dry_run=dry_run,
            owed=[o.to_dict() for o in ctx.obligations()], kubelet=_kubelet_summary(host, ledger))
        if result.migrations:
            summary["migrations"] = [m.to_dict() for m in result.migrations]
        if goal_seen is not None:
            summary["machine_goal"] = goal_seen
        gpus = None if dry_run else gpu_phase.advertising(ctx, result.finished)
        if gpus is not None:  # a GPU node: did the device plugin advertise its GPUs? (gpu/advertised.py)
            summary["gpu"] = gpus
        if not dry_run:
            if result.ok or ledger.entries():
                joined = dict(_identity(cfg), subscription_id=cfg.subscription_id,
                              arc_resource_group=cfg.arc_resource_group,
                              join_mode=cfg.join_mode)
                if result.ok and not ctx.local_only and not only and not skip:
                    joined["facts"] = ctx.data.snapshot()
                ledger.set_joined(**joined)
            if result.ok and not only and not skip:
                host.remove(paths.PENDING)
            status_file.write(summary)
            status_file.complete()
            health.after_run(host, cfg, summary)  # metrics and the like: best effort, never fails the run
        return result, summary


def unbootstrap(cfg, host, *, keep_cloud_resources=False, dry_run=False, progress=None,
                lock_wait=0.0, drain=True, drain_timeout=None, reason=None):
    """Undo what the ledger says we did, phase by phase in reverse order, best effort.
    Returns (UndoResult, status dict); the result's leftovers are what could not be
    removed (each with why), for the operator to clean; a dry run changes nothing.
    `drain`: cordon and drain the Node before it is deleted, within `drain_timeout` seconds
    (default drain.UNBOOTSTRAP_TIMEOUT); False: the Node is deleted with its pods. `reason`:
    why the node leaves when an operator did not ask (the pool deleted its Machine), for status."""
    started = time.time()
    with RunLock(host, "unbootstrap", wait=lock_wait):
        ledger = open_ledger(host)
        ctx = JoinContext(cfg, host, ledger, options=JoinOptions(
            dry_run=dry_run, drain_timeout=(drain_timeout or node_drain.UNBOOTSTRAP_TIMEOUT) if drain else None))
        status_file = st.StatusFile(host)
        if not dry_run:
            _mark_running(status_file, dict(_identity(cfg), operation="unbootstrap"))
        if not dry_run:  # while the node still has its credential: best effort, bounded
            node_report.report_leave(lambda: node_report.node_client(cfg, host), cfg.machine_name)
        result = run_undo(unbootstrap_steps(ctx.mode), ctx, dry_run=dry_run,
                          keep_cloud=keep_cloud_resources, progress=progress)
        if not dry_run:
            _remove_run_state(host, ledger)
        leftovers = [str(item) for item in result.leftovers]
        summary = dict(
            _identity(cfg), operation="unbootstrap", dry_run=dry_run,
            state=st.UNJOINED if result.ok else st.FAILED, started=st.now_iso(started),
            finished=st.now_iso(), duration_s=round(time.time() - started, 3),
            exit_code=int(ExitCode.OK if result.ok else ExitCode.FAILED),
            phases=[p.to_dict() for p in result.phases], leftovers=leftovers, kept=result.kept)
        if reason:
            summary["reason"] = reason
        if not dry_run:
            status_file.write(summary)
            status_file.complete()
            health.after_run(host, cfg, summary)  # metrics and the like: best effort, never fails the run
        return result, summary


def _kubelet_summary(host, ledger):
    """The active kubelet version, and the upgrade under way or the last one that failed."""
    out = {"active": active_version(host)}
    record = ledger.get(UPGRADE_KIND, UPGRADE_ID)
    if record is not None:
        out["upgrade"] = {k: record[k] for k in ("from", "to", "phase", "why") if k in record}
    return out


def _mark_running(status_file, base):
    """Say a run is going, then drop the last run's completion marker: a run killed at any
    point after this leaves "running", which readers show as interrupted once the lock is
    free (engine/status.py), so `status --wait` is never left waiting for a marker."""
    status_file.write(dict(base, state=st.RUNNING, started=st.now_iso(), pid=os.getpid(),
                           phases=[]))
    status_file.begin()


def _remove_run_state(host, ledger):
    """What a run keeps for itself (fixed paths of ours, never a configured one); the
    ledger goes once nothing is left in it to undo."""
    host.remove(paths.TOKEN_CACHE)
    host.remove(paths.TOKEN_LOCK)
    host.remove(paths.NODE_REPORT_RECORD)  # health/report_record.py: a new join reports to a new Node
    for obligation in ledger.obligations():  # the units they were for are gone
        ledger.settle(obligation.kind, obligation.unit)
    for leftover in host.remove_tree(paths.RUN_DIR):
        log.warning("%s", leftover)
    if not ledger.entries():
        ledger.clear_joined()
        ledger.remove_file()
        for leftover in host.remove_tree(paths.BACKUP_DIR):
            log.warning("%s", leftover)
