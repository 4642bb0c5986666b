"""`aks-flex-node upgrade`: check a kubelet version change against the cluster and plan it.

The switch itself is the kubelet-upgrade phase's (steps/kubelet_upgrade.py); `upgrade`
without --dry-run runs it through a bootstrap run (docs/upgrade.md). The check is the
kubelet's version-skew policy (kubeversion.check_target).
"""

from dataclasses import dataclass
from typing import Tuple

from aks_flex_node import kube
from aks_flex_node.errors import FlexNodeError, UsageError
from aks_flex_node.kubeversion import KubeVersion, check_target, parse_version
from aks_flex_node.steps import kubelet_auth
from aks_flex_node.steps.context import JoinContext
from aks_flex_node.steps.kinds import open_ledger
from aks_flex_node.steps.kubernetes import upgrade_under_way


def plan_steps(node, current, target, drain_timeout, ready_timeout):
    """What an upgrade does, in order (steps/kubelet_upgrade.py; printed by --dry-run)."""
    return [
        f"install kubelet {target} side by side with {current} (a directory per version), converging "
        "the rest of the node as bootstrap does",
        f"cordon node {node} (spec.unschedulable=true; left as found if it was already cordoned)",
        f"drain node {node} through the Eviction API, honouring PodDisruptionBudgets, for up to "
        f"{drain_timeout:g}s; DaemonSet and mirror pods stay; pods without a controller stop the upgrade",
        f"switch to {target} in one atomic step (a rename of the link naming the active version)",
        "restart the kubelet",
        f"wait up to {ready_timeout:g}s until node {node} is Ready and reports kubelet v{target}",
        f"uncordon node {node}",
        f"on failure: switch back to {current}, restart the kubelet, uncordon, exit 1",
    ]


@dataclass
class Versions:
    apiserver: KubeVersion
    current: KubeVersion  # the node's kubelet
    current_from: str  # where `current` was read
    target: KubeVersion


def versions(client, node_name, configured, to=None):
    """Read the API server's version and the node's kubelet version (the Node's
    status.nodeInfo.kubeletVersion, else the configured kubernetes_version); the target is
    `to` or the API server's version (follow the cluster)."""
    apiserver = parse_version(client.server_version(), "the API server's gitVersion")
    node = client.get_node(node_name)
    reported = kube.kubelet_version(node, f"API server {client.server} GET node {node_name}")
    if reported:
        current, current_from = parse_version(reported, f"node {node_name} status.nodeInfo.kubeletVersion"), \
            f"node {node_name} status.nodeInfo.kubeletVersion"
    elif configured:
        current = parse_version(configured, "kubernetes_version")
        current_from = "kubernetes_version in the configuration"
    else:
        raise FlexNodeError(f"the kubelet version of node {node_name} is not known: the Node reports none and "
                            "kubernetes_version is empty", remedy="aks-flex-node status; kubectl get node")
    target = wanted_target(to) if to is not None else apiserver.without_suffix
    return Versions(apiserver, current, current_from, target)


def wanted_target(to):
    """`--to` as a KubeVersion with its patch (a minor line names no release); UsageError
    naming --to otherwise."""
    target = parse_version(to, "--to")
    if target.patch is None:
        raise UsageError(f"--to = {to!r}: expected a Kubernetes version MAJOR.MINOR.PATCH such as 1.31.2")
    return target


def node_client(cfg, host):
    """A KubeClient as the node (the kubelet's credential path), to the API server the
    kubeconfig bootstrap wrote names."""
    ctx = JoinContext(cfg, host, open_ledger(host))
    auth = kubelet_auth.for_mode(ctx.mode)
    ctx.data.server, ctx.data.ca_pem = kubelet_auth.api_server_of(host, auth)
    return auth.client(ctx)


@dataclass(frozen=True)
class UpgradePlan:
    """What `aks-flex-node upgrade` would do (its --dry-run, its --json) and runs."""

    node: str
    apiserver: KubeVersion
    kubelet: KubeVersion  # the node's kubelet now
    kubelet_from: str  # where `kubelet` was read
    target: KubeVersion
    needed: bool  # the kubelet is not at `target` yet
    steps: Tuple[str, ...]  # what the upgrade does, in order (empty when not needed)
    under_way: bool = False  # an upgrade the ledger records is not finished: a run finishes it

    @property
    def runs(self):
        """Whether `upgrade` (without --dry-run) has a run to make."""
        return self.needed or self.under_way

    def to_dict(self):
        return {"node": self.node, "apiserver": str(self.apiserver), "kubelet": str(self.kubelet),
                "kubelet_from": self.kubelet_from, "target": str(self.target), "needed": self.needed,
                "steps": list(self.steps), "under_way": self.under_way}


def run(client, node_name, configured, to=None, drain_timeout=1800, ready_timeout=300, under_way=False):
    """Check the versions and return the UpgradePlan; change nothing. SkewError when the
    policy forbids the target."""
    v = versions(client, node_name, configured, to)
    needed = check_target(v.current, v.target, v.apiserver)
    steps = plan_steps(node_name, v.current, v.target, drain_timeout, ready_timeout) if needed else []
    return UpgradePlan(node_name, v.apiserver, v.current, v.current_from, v.target, needed, tuple(steps),
                       under_way=under_way)


def plan(cfg, host, to=None):
    """The UpgradePlan of this node as configured: asked of its API server as the node, the
    target `--to` (or the configuration's, or the API server's), and whether the ledger
    records an upgrade under way (steps/kubernetes.py owns that record)."""
    target = target_of(cfg, to)  # a bad --to is refused before anything is asked of the cluster
    return run(node_client(cfg, host), cfg.machine_name, cfg.kubernetes_version, to=target,
               drain_timeout=cfg.upgrade_drain_timeout, ready_timeout=cfg.node_ready_timeout,
               under_way=upgrade_under_way(open_ledger(host)) is not None)


def target_of(cfg, to):
    """The version `upgrade` moves to: --to, which must agree with a kubernetes_version the
    configuration pins (else the next bootstrap would move the node back); the pinned one;
    or None: the API server's (follow the cluster)."""
    pinned = cfg.kubernetes_version
    if to is not None:
        wanted = wanted_target(to)
        if pinned and parse_version(pinned, "kubernetes_version") != wanted:
            raise UsageError(
                f"--to = {to!r}: kubernetes_version = {pinned} in {cfg.source} pins this node's kubelet, and "
                "the next bootstrap or agent pass would move it back",
                remedy=f"set kubernetes_version = {wanted} (dpkg-reconfigure aks-flex-node, or edit the file) "
                "and run `aks-flex-node upgrade`, or empty it to follow the cluster")
        return str(wanted)
    return pinned or None
