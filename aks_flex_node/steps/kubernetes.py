"""The Kubernetes node binaries and the CNI plugins."""

import json

from aks_flex_node.engine.step import INSTALL, Plan, Step
from aks_flex_node.steps import tracked
from aks_flex_node.steps.artifacts import ArtifactStep

KUBE_BINARIES = ("kubelet", "kubectl", "kubeadm")
CNI_BIN_DIR = "/opt/cni/bin"
CNI_CONF_DIR = "/etc/cni/net.d"
BRIDGE_CONFLIST = CNI_CONF_DIR + "/99-aks-flex-node-bridge.conflist"
CNI_STATE_DIR = "/var/lib/cni"


class KubernetesBinariesStep(ArtifactStep):
    name = "kubernetes"
    help = "install kubelet, kubectl and kubeadm of the cluster's Kubernetes version"
    artifact = "kubernetes"
    dest_dir = "/usr/local/bin"
    needs = ("cluster",)
    restarts = "kubelet"

    def version(self, ctx):
        return ctx.data.kubernetes_version or ctx.config.kubernetes_version

    def dest_name(self, member):
        # kubernetes-node tarballs hold kubernetes/node/bin/<tool>; we take the three we use.
        prefix = "kubernetes/node/bin/"
        name = member.lstrip("./")
        if name.startswith(prefix) and name[len(prefix):] in KUBE_BINARIES:
            return name[len(prefix):]
        return None


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
