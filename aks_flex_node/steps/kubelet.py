"""The kubelet: its credentials, configuration, unit and drop-in.

Its credentials are its join mode's (steps/kubelet_auth.py: an exec-plugin kubeconfig in Arc
mode, a bootstrap kubeconfig while it needs one in the TLS bootstrap modes); the rest is
the same in every mode.

What the kubelet reads (its CA, kubeconfig, configuration, unit and drop-in) owes a kubelet
restart when its content changes; the unit files also owe a systemd reload.
"""

import json

from aks_flex_node.engine.step import ACTIVATE, Plan, Step
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.steps import gpu, kubelet_auth, tracked
from aks_flex_node.steps.kubelet_paths import (
    CA_PATH, DEFAULTS_PATH, DIRS, DROPIN_PATH, KUBECONFIG, KUBELET_BIN, KUBELET_CONFIG, KUBELET_DIR, UNIT_PATH,
    reload_and_restart_kubelet, restart_kubelet)
from aks_flex_node.steps.runtime import CONTAINERD_SOCKET, plan_service_proxy

MANAGED_LABEL = "kubernetes.azure.com/managed=false"

# The upstream agent's list (Azure/AKSFlexNode pkg/components/kubelet/): ECDHE with
# AES-GCM or ChaCha20 only.
TLS_CIPHER_SUITES = [
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
]


def _pairs(items, sep):
    out = {}
    for item in items:
        key, _, value = item.partition(sep)
        out[key.strip()] = value.strip()
    return out


def kubelet_config(cfg, resolv_conf, auth):
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
        # The kubelet renews its own client certificate in the TLS bootstrap modes.
        "rotateCertificates": auth.rotates_certificates,
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


def kubelet_args(cfg, auth, gpu_labels=(), gpu_taints=()):
    """`gpu_labels`, `gpu_taints`: a GPU node's (steps/gpu.py), after the operator's."""
    labels = list(cfg.node_labels) + list(gpu_labels)
    if MANAGED_LABEL not in labels:
        # Without it the cloud-controller-manager deletes a node it cannot find in Azure
        # (Azure/AKSFlexNode pkg/config/structs.go forces it too, upstream PR #46).
        labels.append(MANAGED_LABEL)
    args = [f"--config={KUBELET_CONFIG}", f"--kubeconfig={KUBECONFIG}", *auth.kubelet_args]
    args += [f"--hostname-override={cfg.machine_name}", f"--node-labels={','.join(labels)}"]
    taints = list(cfg.node_taints) + list(gpu_taints)
    if taints:
        args.append(f"--register-with-taints={','.join(taints)}")
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


def exec_word(arg):
    """One argument of an ExecStart= line, written so that systemd hands the kubelet exactly
    `arg`: '%' starts a specifier (systemd.unit(5), "Specifiers": %% is a '%'), '$' a
    variable ($$ is a '$'), and a blank, quote, backslash or ';' would split or end the word
    (systemd.service(5), "Command lines"), so such a word is double-quoted with C escapes.
    A control character (a newline would start a new unit line) is refused: no quoting
    carries it through a unit file. Every value we put in a unit is written through here."""
    if any(not c.isprintable() for c in arg):
        raise FlexNodeError(f"kubelet argument {arg!r}: a control character cannot be written into a unit file",
                            remedy="remove it from the configuration value it comes from",
                            code="unit-value")
    text = arg.replace("%", "%%").replace("$", "$$")
    if text == "" or any(c.isspace() or c in "\"'\\;" for c in text):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def dropin(cfg, auth, gpu_labels=(), gpu_taints=()):
    # The kubeadm pattern: the unit stays generic, the drop-in carries this node's command line.
    words = " ".join(exec_word(arg) for arg in [KUBELET_BIN, *kubelet_args(cfg, auth, gpu_labels, gpu_taints)])
    return ("# Written by aks-flex-node; rewritten at every bootstrap.\n"
            "[Service]\n"
            f"EnvironmentFile=-{DEFAULTS_PATH}\n"
            "ExecStart=\n"
            f"ExecStart={words} $KUBELET_EXTRA_ARGS\n").encode()


def resolv_conf(host):
    # systemd-resolved's real upstream list, when it runs; a stub 127.0.0.53 resolv.conf
    # would make pods loop DNS back to themselves.
    resolved = "/run/systemd/resolve/resolv.conf"
    return resolved if host.kind(resolved) == "file" else "/etc/resolv.conf"  # resolved writes a regular file


class KubeletStep(tracked.OwnsPaths, Step):
    name = "kubelet"
    help = "write the kubelet's kubeconfig (exec plugin), configuration, CA, unit and drop-in"
    branch = ACTIVATE
    needs = ("kubernetes", "credentials")
    state_dirs = (KUBELET_DIR,)  # it fills with the kubelet's state (pods, volumes, plugins)

    def check(self, ctx):
        cfg, plan = ctx.config, Plan()
        auth = kubelet_auth.for_mode(ctx.mode)
        for path in DIRS:
            self.plan_dir(ctx, plan, path)
        auth.plan_files(ctx, plan, self.name)
        tracked.plan_file(ctx, plan, self.name, KUBELET_CONFIG,
                          kubelet_config(cfg, resolv_conf(ctx.host), auth), 0o644,
                          why="the kubelet's settings", owes=restart_kubelet(KUBELET_CONFIG))
        tracked.plan_file(ctx, plan, self.name, UNIT_PATH, UNIT_TEXT, 0o644,
                          why="the kubelet's unit", owes=reload_and_restart_kubelet(UNIT_PATH))
        tracked.plan_file(ctx, plan, self.name, DROPIN_PATH,
                          dropin(cfg, auth, gpu.node_labels(ctx), gpu.node_taints(ctx)), 0o644,
                          why="this node's kubelet command line",
                          owes=reload_and_restart_kubelet(DROPIN_PATH))
        # The kubelet reaches the API server through the proxy unless no_proxy covers it.
        plan_service_proxy(ctx, plan, self.name, "kubelet")
        if not plan.actions:
            plan.noop_reason = "kubeconfig, configuration, unit and drop-in as wanted"
        return plan
