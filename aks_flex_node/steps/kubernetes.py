"""The Kubernetes node binaries, side by side per version, and the CNI plugins."""

import json
import os

from aks_flex_node.engine.step import INSTALL, Plan, Step
from aks_flex_node.kubeversion import KubeVersion, VersionError
from aks_flex_node.steps import tracked
from aks_flex_node.steps.artifacts import ARTIFACT_KIND, ArtifactStep
from aks_flex_node.steps.kinds import Kind

KUBE_BINARIES = ("kubelet", "kubectl", "kubeadm")
BIN_DIR = "/usr/local/bin"
# One directory per version, v<version>, and `current`, a link naming the active one.
KUBE_LIB = "/usr/local/lib/aks-flex-node/kubernetes"
CURRENT = KUBE_LIB + "/current"
# The ledger's record of a kubelet upgrade under way (or the last one that failed).
UPGRADE_KIND, UPGRADE_ID = Kind.KUBELET_UPGRADE, "kubelet"


def version_dir(version):
    return f"{KUBE_LIB}/v{version}"


def bin_link(tool):
    """Relative, so the link means the same on the node and under an image build's root."""
    return os.path.relpath(f"{CURRENT}/{tool}", BIN_DIR)


def active_version(host):
    """The version `current` names, or None (no link: nothing installed yet, or an earlier
    release's single-version layout)."""
    target = host.read_link(CURRENT)
    if target and target.startswith("v") and "/" not in target:
        return target[1:]
    return None


def switch(ctx, version):
    """The switch: `current` names `version`'s directory, in one rename(2)."""
    tracked.link_tracked(ctx, KubernetesBinariesStep.name, CURRENT, f"v{version}")


def _newer(one, other):
    """Whether version `one` is newer than `other` (KubeVersion's order: a pre-release before
    its release); False when either is not a version (a link renamed by hand)."""
    try:
        return KubeVersion.parse(one) > KubeVersion.parse(other)
    except VersionError:
        return False


def wanted_version(ctx):
    """The version this node should run: kubernetes_version when the config (or the agent
    pool) sets it; else the cluster's, never older than the active one: following the
    cluster moves forward only, so a node moved to a newer patch by `upgrade --to` stays."""
    if ctx.config.kubernetes_version:
        return ctx.config.kubernetes_version
    cluster, active = ctx.data.kubernetes_version, active_version(ctx.host)
    if cluster and active and _newer(active, cluster):
        return active
    return cluster


def node_registered(ctx):
    """Whether a Node of ours is registered (the node-ready phase recorded it): from then
    on, workloads may run here and a version change goes through the kubelet-upgrade phase."""
    return ctx.ledger.has(Kind.NODE, ctx.config.machine_name)


def upgrade_under_way(ledger):
    """The ledger's record of a kubelet upgrade under way (recorded, not yet done nor failed:
    steps/kubelet_upgrade.py), or None."""
    record = ledger.get(UPGRADE_KIND, UPGRADE_ID)
    return None if record is None or record.get("phase") == "failed" else record


def upgrade_versions(ctx):
    """The versions an upgrade under way switches between (kept until it is done)."""
    record = upgrade_under_way(ctx.ledger)
    if record is None:
        return ()
    return tuple(v for v in (record.get("from"), record.get("to")) if v)
CNI_BIN_DIR = "/opt/cni/bin"
CNI_CONF_DIR = "/etc/cni/net.d"
BRIDGE_CONFLIST = CNI_CONF_DIR + "/99-aks-flex-node-bridge.conflist"
CNI_STATE_DIR = "/var/lib/cni"


class KubernetesBinariesStep(ArtifactStep):
    """Each Kubernetes version in a directory of its own, the active one named by a link.

    /usr/local/bin/{kubelet,kubectl,kubeadm} are links into `current`, and `current` names
    one version's directory: switching versions is the one rename(2) of `current`
    (host.write_symlink), so the kubelet's unit always finds a whole kubelet, old or new, and
    the previous version is still there to switch back to. On a node with a registered Node,
    a new version is installed beside the active one and the kubelet-upgrade phase switches
    (cordon, drain, switch, restart, Ready, uncordon: steps/kubelet_upgrade.py); before
    that (a first join) this phase switches itself, owing the kubelet's restart.
    """

    name = "kubernetes"
    help = "install kubelet, kubectl and kubeadm of the wanted Kubernetes version, side by side with the active one"
    artifact = "kubernetes"
    dest_dir = BIN_DIR
    needs = ("cluster",)
    restarts = "kubelet"

    def version(self, ctx):
        return wanted_version(ctx)

    def target_dir(self, version):
        return version_dir(version)

    def record_id(self, version):
        return f"{self.artifact}/v{version}"

    def dest_name(self, member):
        # kubernetes-node tarballs hold kubernetes/node/bin/<tool>; we take the three we use.
        prefix = "kubernetes/node/bin/"
        name = member.lstrip("./")
        if name.startswith(prefix) and name[len(prefix):] in KUBE_BINARIES:
            return name[len(prefix):]
        return None

    def check(self, ctx):
        plan = Plan()
        self.plan_staging_left(ctx, plan)
        wanted = self.wanted(ctx, plan)
        if wanted is None:
            return plan
        version, url, checksum_url = wanted
        # An earlier release's single-version layout was moved into the versioned
        # directories before this check (steps/migrations.py).
        active = active_version(ctx.host)
        if not self.installed(ctx, url, version):
            # Rewriting the active version's files changes what the kubelet runs.
            plan.add(f"install kubernetes {version} into {version_dir(version)}",
                     "not installed, a file was changed, or an install was cut short",
                     lambda: self.install(ctx, url, checksum_url, version),
                     owes=self.owes(version) if version == active else ())
        if active != version and (active is None or not node_registered(ctx)):
            # No Node yet, so no workload to move off first.
            plan.add(f"make kubernetes {version} the active version ({CURRENT} -> v{version})",
                     "no version is active yet" if active is None else
                     f"{active} is active and this node has no Node registered yet",
                     lambda: switch(ctx, version), owes=self.owes(version))
        for tool in KUBE_BINARIES:
            path, target = f"{BIN_DIR}/{tool}", bin_link(tool)
            if ctx.host.read_link(path) != target:
                plan.add(f"link {path} to the active version ({target})",
                         "the kubelet's unit and operators run it from there",
                         lambda p=path, t=target: tracked.link_tracked(ctx, self.name, p, t))
        self._plan_prune(ctx, plan, keep={version, active, *upgrade_versions(ctx)})
        if not plan.actions:
            plan.noop_reason = f"kubernetes {version} installed, intact and active"
        return plan

    def _plan_prune(self, ctx, plan, keep):
        """Remove the versions neither wanted, nor active, nor part of an upgrade under way:
        their files and directory as the ledger records them, then their record."""
        prefix = f"{self.artifact}/v"
        for record in ctx.ledger.entries(step=self.name, kind=ARTIFACT_KIND):
            old = record["id"][len(prefix):] if record["id"].startswith(prefix) else None
            if old is None or old in keep:
                continue
            directory = version_dir(old)
            entries = [e for e in ctx.ledger.entries(step=self.name)
                       if e["kind"] in (Kind.FILE, *tracked.DIR_KINDS)
                       and (e["id"] == directory or e["id"].startswith(directory + "/"))]
            why = f"kubernetes {old} is neither wanted nor active any more"
            for action in tracked.plan_undo_paths(ctx, entries).actions:
                plan.add(action.what, why, action.run)
            plan.add(f"forget the record of kubernetes {old}", why,
                     lambda i=record["id"]: ctx.ledger.forget(ARTIFACT_KIND, i))


class CniPluginsStep(ArtifactStep):
    name = "cni"
    help = "install the CNI plugins"
    needs = ("cluster",)
    artifact = "cni"
    version_key = "cni_version"
    dest_dir = CNI_BIN_DIR

    def dest_name(self, member):
        name = member.lstrip("./")
        return name if name and "/" not in name else None


def bridge_conflist(cfg):
    """A host-local bridge network, as the upstream agent's 99-bridge.conf (Azure/AKSFlexNode
    pkg/components/cni/), but with a per-node subnet setting: the 99- prefix lets a real
    CNI's conf win."""
    subnet = cfg.bridge_subnet
    conf = {
        "cniVersion": "0.4.0",
        "name": "aks-flex-node-bridge",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                         "routes": [{"dst": "0.0.0.0/0"}]},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return (json.dumps(conf, indent=2) + "\n").encode()


class CniConfigStep(tracked.OwnsPaths, Step):
    name = "cni-config"
    help = "write the bridge network configuration"
    branch = INSTALL
    needs = ("cni",)
    state_dirs = (CNI_STATE_DIR,)  # the host-local IPAM plugin's allocations

    def check(self, ctx):
        plan = Plan()
        self.plan_dir(ctx, plan, CNI_CONF_DIR)
        self.plan_dir(ctx, plan, CNI_STATE_DIR)
        tracked.plan_file(ctx, plan, self.name, BRIDGE_CONFLIST, bridge_conflist(ctx.config), 0o644,
                          why="pod networking until a cluster CNI takes over")
        if not plan.actions:
            plan.noop_reason = "bridge network configured"
        return plan
