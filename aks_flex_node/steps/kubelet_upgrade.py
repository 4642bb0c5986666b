"""Moving a joined node's kubelet to another version: cordon, drain, switch, restart, Ready, uncordon.

The kubernetes phase has installed the wanted version beside the active one; this phase
switches between them, the way `kubeadm upgrade node` is run by hand
(kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/: drain the node,
upgrade the kubelet, restart it, uncordon) and AKS upgrades a node (cordon, drain with
PodDisruptionBudgets honoured, reimage, uncordon: Learn, "Upgrade an AKS cluster"):

1. check the version-skew policy against the API server (kubeversion.check_target); nothing
   changes when it forbids the move;
2. record the upgrade in the ledger (from, to, whether we cordon), then cordon and drain
   (drain.py); a drain that cannot finish uncordons what we cordoned and stops, nothing switched;
3. record phase "switch" and the kubelet restart it owes, then switch `current`
   (one rename: steps/kubernetes.py), restart the kubelet, and wait until the Node is Ready
   and reports the new kubeletVersion;
4. uncordon (only a cordon of ours) and forget the record.
If the Node is not Ready at the new version in time: record phase "rollback", switch back,
restart, wait for Ready at the old version, uncordon, and fail (exit 1) saying what happened;
the record stays as "failed", so neither the agent nor a bootstrap tries that version again
on their own (`aks-flex-node upgrade` does, or a new version does).

Every phase is recorded before the change it makes, so a run killed at any point (kill -9,
a power cut) is finished by the next run of bootstrap, the agent or `upgrade`: it reads the
record and carries on from that phase.
"""

from aks_flex_node import kube, window
from aks_flex_node.engine.step import ACTIVATE, Plan, Step, restart
from aks_flex_node.errors import FlexNodeError, TemporaryError
from aks_flex_node.kube import drain
from aks_flex_node.kubeversion import check_target, parse_version
from aks_flex_node.steps import kubernetes as kb
from aks_flex_node.steps.node import kube_client

DRAIN, SWITCH, ROLLBACK, FAILED = "drain", "switch", "rollback", "failed"


class UpgradeFailed(FlexNodeError):
    """The new kubelet did not come Ready: the old one is back; the message says how it went."""

    code = "upgrade-failed"


def upgrade_record(ctx):
    return ctx.ledger.get(kb.UPGRADE_KIND, kb.UPGRADE_ID)


def _save(ctx, **fields):
    ctx.ledger.replace(KubeletUpgradeStep.name, kb.UPGRADE_KIND, kb.UPGRADE_ID, **fields)


def _fields(record):
    return {k: v for k, v in record.items() if k not in ("step", "kind", "id")}


class KubeletUpgradeStep(Step):
    name = "kubelet-upgrade"
    help = "move a joined node's kubelet to the wanted version: cordon, drain, switch, restart, Ready, uncordon"
    branch = ACTIVATE
    needs = ("services",)

    def check(self, ctx):
        plan = Plan()
        record = upgrade_record(ctx)
        if record is not None and record.get("phase") != FAILED:
            plan.add(f"finish the kubelet upgrade from {record['from']} to {record['to']} "
                     f"(a run stopped in its {record['phase']} step)",
                     "an upgrade was under way when a run stopped; the ledger says where",
                     lambda: carry_on(ctx, dict(record)))
            return plan
        active, wanted = kb.active_version(ctx.host), kb.wanted_version(ctx)
        if ctx.options.released and active and wanted and active != wanted:
            # The pool's operation released the node: the RP cordoned and drained it and
            # deleted its Node (pool_follow.py); the kubelet registers it again.
            plan.add(f"move the kubelet from {active} to {wanted} as the pool asks (machine eTag "
                     f"{ctx.options.machine_goal.etag}): switch, restart, wait for the Node Ready "
                     f"(up to {ctx.config.node_ready_timeout} s)",
                     "the pool's operation deleted the Node after its cordon and drain",
                     lambda: start_released(ctx, active, wanted))
            return plan
        if active is None or not wanted or active == wanted or not kb.node_registered(ctx):
            plan.noop_reason = f"kubelet {active or wanted or 'version not known yet'} is the active version"
            return plan
        if record is not None and record.get("to") == wanted and not ctx.options.upgrade:
            plan.noop_reason = (f"the upgrade to {wanted} failed ({record.get('why')}); kubelet {active} stays; "
                                "`aks-flex-node upgrade` tries again")
            return plan
        window = ctx.config.upgrade_window
        if ctx.options.agent and window and not _window_open(window):
            plan.noop_reason = f"kubelet {active}; {wanted} waits for the upgrade window ({window})"
            return plan
        timeout = ctx.config.upgrade_drain_timeout
        plan.add(f"upgrade the kubelet from {active} to {wanted}: cordon, drain (up to {timeout} s), switch, "
                 f"restart, wait for Ready (up to {ctx.config.node_ready_timeout} s), uncordon",
                 f"kubernetes_version wants {wanted}" if ctx.config.kubernetes_version
                 else f"the cluster runs {wanted}",
                 lambda: start(ctx, active, wanted))
        return plan

    def plan_undo(self, ctx, entries):
        plan = Plan()
        for entry in entries:
            if entry["kind"] == kb.UPGRADE_KIND:
                plan.add("forget the record of the last kubelet upgrade", "the node is leaving",
                         lambda: ctx.ledger.forget(kb.UPGRADE_KIND, kb.UPGRADE_ID))
        return plan


def _window_open(text):
    return window.is_open(text)


def _client(ctx):
    return kube_client(ctx)


def start(ctx, current, target):
    """Check the skew, record the upgrade, and carry it out."""
    client = _client(ctx)
    apiserver = parse_version(client.server_version(), "the API server's gitVersion")
    check_target(parse_version(current, "the active kubelet version"),
                 parse_version(target, "the wanted kubelet version"), apiserver)
    name = ctx.config.machine_name
    node = client.get_node(name)
    if node is None:
        raise FlexNodeError(f"node {name!r} is not in the cluster: there is no Node to upgrade",
                            remedy="aks-flex-node status; kubectl get nodes")
    # Recorded before the cordon: a run killed right after it still knows the cordon is ours.
    record = {"from": current, "to": target, "phase": DRAIN,
              "cordoned": not (node.get("spec") or {}).get("unschedulable")}
    _save(ctx, **record)
    # Begun: the operator sees it on the Node before the cordon (operations.py sends the
    # event, best effort and bounded, as the node); a run that carries on a recorded
    # upgrade has told it already.
    if ctx.options.upgrade_started is not None:
        ctx.options.upgrade_started(node, current, target)
    return carry_on(ctx, record, client)


def start_released(ctx, current, target):
    """The pool's move (upgrade or rollback) of a node its operation released: no cordon or
    drain of ours (the RP's: Azure/AKSFlexNode docs/design/agent-and-aks.md, "Ownership"), and
    an older minor allowed, since the cluster asked for it; the policy against the API server
    still holds."""
    client = _client(ctx)
    apiserver = parse_version(client.server_version(), "the API server's gitVersion")
    check_target(parse_version(current, "the active kubelet version"),
                 parse_version(target, "the wanted kubelet version"), apiserver, rollback_allowed=True)
    record = {"from": current, "to": target, "phase": SWITCH, "cordoned": False, "released": True}
    _save(ctx, **record)
    return carry_on(ctx, record, client)


def carry_on(ctx, record, client=None):
    """Carry out the upgrade `record` describes from its phase on."""
    client = client or _client(ctx)
    name, target, previous = ctx.config.machine_name, record["to"], record["from"]
    if record["phase"] == DRAIN:
        try:
            drain.cordon(client, name)
            drain.drain(client, name, timeout=ctx.config.upgrade_drain_timeout)
        except FlexNodeError as err:
            # Nothing switched: the node goes back to how it was, and the run fails with why.
            if record["cordoned"]:
                drain.uncordon(client, name)
            ctx.ledger.forget(kb.UPGRADE_KIND, kb.UPGRADE_ID)
            err.message = f"the upgrade of the kubelet to {target} did not start: {err.message}"
            raise
        record["phase"] = SWITCH
        _save(ctx, **_fields(record))
    if record["phase"] == SWITCH:
        try:
            _switch_and_wait(ctx, client, target)
        except FlexNodeError as err:
            # Whatever stopped the new version (not Ready in time, a failed restart), the
            # old one is the state known to work: back to it.
            why = f"kubelet {target} was not Ready: {err.message}" if isinstance(err, TemporaryError) \
                else f"switching to kubelet {target} failed: {err.message}"
            record.update(phase=ROLLBACK, why=why)
            _save(ctx, **_fields(record))
        else:
            _finish(ctx, client, record)
            return f"kubelet {previous} -> {target}"
    # ROLLBACK
    back = "Ready again"
    try:
        _switch_and_wait(ctx, client, previous)
    except FlexNodeError as err:
        back = f"not Ready either ({err.message})"
    _finish(ctx, client, record)
    record["phase"] = FAILED
    _save(ctx, **_fields(record))
    raise UpgradeFailed(
        f"the kubelet upgrade from {previous} to {target} failed: {record.get('why')}; switched back to "
        f"{previous}, restarted the kubelet: node {name} is {back}"
        + ("; uncordoned" if record["cordoned"] else "; left cordoned, as it was before"),
        remedy=f"see `journalctl -u kubelet` for why {target} did not start; `aks-flex-node upgrade` tries again")


def _switch_and_wait(ctx, client, version):
    """Make `version` active, restart the kubelet (owed before the switch), wait for the
    Node to be Ready and report `version`."""
    ctx.ledger.owe([restart("kubelet", f"kubelet {version} is switched to")])
    kb.switch(ctx, version)
    ctx.host.systemd.restart("kubelet")
    ctx.ledger.settle("restart", "kubelet")
    want = f"v{version}"
    kube.wait_node_ready(
        lambda: client, ctx.config.machine_name, ctx.config.node_ready_timeout,
        accept=lambda node: ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") == want,
        remedy="check `journalctl -u kubelet`")


def _finish(ctx, client, record):
    if record["cordoned"]:
        drain.uncordon(client, ctx.config.machine_name)
    ctx.ledger.forget(kb.UPGRADE_KIND, kb.UPGRADE_ID)
