"""The kubelet: its kubeconfig (exec credential plugin), configuration, unit and drop-in.

Nothing secret is written: the kubeconfig names `aks-flex-node token`, which fetches a short
lived Entra token for the Arc identity from HIMDS on each refresh (upstream wrote a script
with the service principal's secret in it, mode 0755: upstream-go-agent.md §8).
"""

import base64
import json
import os

from aks_flex_node.engine.step import ACTIVATE, Plan, Step
from aks_flex_node.steps import tracked
from aks_flex_node.steps.runtime import CONTAINERD_SOCKET

KUBELET_BIN = "/usr/local/bin/kubelet"
KUBELET_DIR = "/var/lib/kubelet"
KUBECONFIG = KUBELET_DIR + "/kubeconfig"
KUBELET_CONFIG = KUBELET_DIR + "/config.yaml"
CA_PATH = "/etc/kubernetes/certs/ca.crt"
UNIT_PATH = "/etc/systemd/system/kubelet.service"
DROPIN_PATH = "/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf"
DEFAULTS_PATH = "/etc/default/kubelet"  # operator's KUBELET_EXTRA_ARGS; never written by us
MANAGED_LABEL = "kubernetes.azure.com/managed=false"
DIRS = ("/etc/kubernetes", "/etc/kubernetes/manifests", "/etc/kubernetes/volumeplugins",
        "/etc/kubernetes/certs", KUBELET_DIR, os.path.dirname(DROPIN_PATH))

# Upstream's list (upstream-go-agent.md §3.8): ECDHE with AES-GCM or ChaCha20 only.
TLS_CIPHER_SUITES = [
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
]
EXEC_API_VERSION = "client.authentication.k8s.io/v1"


def kubeconfig(cfg, server, ca_pem, root):
    """JSON is YAML: the kubelet reads it, and we need no YAML emitter."""
    exec_config = {
        "apiVersion": EXEC_API_VERSION,
        "command": cfg.exec_plugin_command,
        "args": ["token"],
        "env": None,
        "provideClusterInfo": False,
        # Required with v1 (azure-wire.md §4.1); the kubelet has no TTY.
        "interactiveMode": "Never",
    }
    if str(root) != "/":
        exec_config["env"] = [{"name": "AKS_FLEX_NODE_ROOT", "value": str(root)}]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cfg.cluster.name, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "aks-flex-node", "user": {"exec": exec_config}}],
        "contexts": [{"name": cfg.cluster.name,
                      "context": {"cluster": cfg.cluster.name, "user": "aks-flex-node"}}],
        "current-context": cfg.cluster.name,
    }
    return (json.dumps(doc, indent=2) + "\n").encode()


def _pairs(items, sep):
    out = {}
    for item in items:
        key, _, value = item.partition(sep)
        out[key.strip()] = value.strip()
    return out


def kubelet_config(cfg, resolv_conf):
    """A KubeletConfiguration (the flags upstream passes, as config: most are deprecated as flags)."""
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": CA_PATH}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "systemd",
        "containerRuntimeEndpoint": CONTAINERD_SOCKET,
        "clusterDNS": [cfg.cluster_dns],
        "clusterDomain": cfg.cluster_domain,
        "maxPods": cfg.max_pods,
        "readOnlyPort": 0,
        "protectKernelDefaults": True,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "resolvConf": resolv_conf,
        "staticPodPath": "/etc/kubernetes/manifests",
        "volumePluginDir": "/etc/kubernetes/volumeplugins",
        "nodeStatusUpdateFrequency": "10s",
        "streamingConnectionIdleTimeout": "4h",
        "imageGCHighThresholdPercent": 85,
        "imageGCLowThresholdPercent": 80,
        "tlsCipherSuites": TLS_CIPHER_SUITES,
        "kubeReserved": _pairs(cfg.kube_reserved, "="),
        "evictionHard": _pairs(cfg.eviction_hard, "<"),
    }
    return (json.dumps(doc, indent=2) + "\n").encode()


def kubelet_args(cfg):
    labels = list(cfg.node_labels)
    if MANAGED_LABEL not in labels:
        # Without it the cloud-controller-manager deletes a node it cannot find in Azure
        # (upstream-go-agent.md §2, node.labels).
        labels.append(MANAGED_LABEL)
    args = [f"--config={KUBELET_CONFIG}", f"--kubeconfig={KUBECONFIG}",
            f"--hostname-override={cfg.machine_name}", f"--node-labels={','.join(labels)}"]
    if cfg.node_taints:
        args.append(f"--register-with-taints={','.join(cfg.node_taints)}")
    if cfg.node_ip:
        args.append(f"--node-ip={cfg.node_ip}")
    return args


UNIT_TEXT = f"""# Written by aks-flex-node. Local changes: a drop-in in kubelet.service.d, or
# KUBELET_EXTRA_ARGS in {DEFAULTS_PATH}.
[Unit]
Description=Kubernetes node agent (managed by aks-flex-node)
Documentation=https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/
After=containerd.service network-online.target
Wants=network-online.target
Requires=containerd.service
ConditionPathExists={KUBELET_BIN}

[Service]
ExecStart={KUBELET_BIN}
Restart=always
RestartSec=5
StartLimitInterval=0

[Install]
WantedBy=multi-user.target
""".encode()


def dropin(cfg):
    # The kubeadm pattern: the unit stays generic, the drop-in carries this node's command line.
    return ("# Written by aks-flex-node; rewritten at every bootstrap.\n"
            "[Service]\n"
            f"EnvironmentFile=-{DEFAULTS_PATH}\n"
            "ExecStart=\n"
            f"ExecStart={KUBELET_BIN} {' '.join(kubelet_args(cfg))} $KUBELET_EXTRA_ARGS\n").encode()


def resolv_conf(host):
    # systemd-resolved's real upstream list, when it runs; a stub 127.0.0.53 resolv.conf
    # would make pods loop DNS back to themselves.
    resolved = "/run/systemd/resolve/resolv.conf"
    return resolved if os.path.exists(host.path(resolved)) else "/etc/resolv.conf"


class KubeletStep(Step):
    name = "kubelet"
    help = "write the kubelet's kubeconfig (exec plugin), configuration, CA, unit and drop-in"
    branch = ACTIVATE
    needs = ("kubernetes", "credentials")

    def check(self, ctx):
        cfg, plan = ctx.config, Plan()
        server, ca_pem = ctx.facts.get("server"), ctx.facts.get("ca_pem")
        for path in DIRS:
            tracked.plan_dir(ctx, plan, self.name, path, 0o755)

        def config_changed():
            ctx.facts.set("kubelet_config_changed", True)

        def unit_changed():
            ctx.facts.set("units_changed", True)
            ctx.facts.set("kubelet_config_changed", True)

        if server is None:
            plan.add(f"write {KUBECONFIG} and {CA_PATH}", "the API server is not known yet")
        else:
            tracked.plan_file(ctx, plan, self.name, CA_PATH, ca_pem, 0o644,
                              why="the cluster CA", on_change=config_changed)
            tracked.plan_file(ctx, plan, self.name, KUBECONFIG,
                              kubeconfig(cfg, server, ca_pem, ctx.host.root), 0o600,
                              why="the kubelet's credentials come from `aks-flex-node token`",
                              on_change=config_changed)
        tracked.plan_file(ctx, plan, self.name, KUBELET_CONFIG,
                          kubelet_config(cfg, resolv_conf(ctx.host)), 0o644,
                          why="the kubelet's settings", on_change=config_changed)
        tracked.plan_file(ctx, plan, self.name, UNIT_PATH, UNIT_TEXT, 0o644,
                          why="the kubelet's unit", on_change=unit_changed)
        tracked.plan_file(ctx, plan, self.name, DROPIN_PATH, dropin(cfg), 0o644,
                          why="this node's kubelet command line", on_change=unit_changed)
        if not plan.actions:
            plan.noop_reason = "kubeconfig, configuration, unit and drop-in as wanted"
        return plan

    def undo(self, ctx, entries):
        return tracked.undo_paths(ctx, entries)
