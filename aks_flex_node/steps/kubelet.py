"""The kubelet: its kubeconfig (exec credential plugin), configuration, unit and drop-in.

Arc mode writes nothing secret: the kubeconfig names `aks-flex-node token`, which fetches a
short lived Entra token for the Arc identity from HIMDS on each refresh (the upstream agent,
Azure/AKSFlexNode v0.0.10 pkg/components/kubelet/, wrote a token.sh script with the service
principal's secret in it, mode 0755).

The agent-pool and bootstrap-token modes join by TLS bootstrap
(kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/): we write a
bootstrap kubeconfig (0600: it holds the bootstrap token) only while the kubelet has no
client certificate that will last; the kubelet makes its key, has its CSR signed, writes
its own kubeconfig and certificate under /var/lib/kubelet and renews the certificate itself
(rotateCertificates).

What the kubelet reads (its CA, kubeconfig, configuration, unit and drop-in) owes a kubelet
restart when its content changes; the unit files also owe a systemd reload.
"""

import base64
import json
import os

from aks_flex_node.engine.step import ACTIVATE, Plan, Step, reload_units, restart
from aks_flex_node.errors import FlexNodeError, TemporaryError
from aks_flex_node.steps import tracked
from aks_flex_node.steps.agentpool import tls_bootstrap, token_needed
from aks_flex_node.steps.runtime import CONTAINERD_SOCKET, plan_service_proxy

KUBELET_BIN = "/usr/local/bin/kubelet"
KUBELET_DIR = "/var/lib/kubelet"
KUBECONFIG = KUBELET_DIR + "/kubeconfig"
BOOTSTRAP_KUBECONFIG = KUBELET_DIR + "/bootstrap-kubeconfig"
CERT_DIR = KUBELET_DIR + "/pki"
KUBELET_CONFIG = KUBELET_DIR + "/config.yaml"
CA_PATH = "/etc/kubernetes/certs/ca.crt"
UNIT_PATH = "/etc/systemd/system/kubelet.service"
DROPIN_PATH = "/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf"
DEFAULTS_PATH = "/etc/default/kubelet"  # operator's KUBELET_EXTRA_ARGS; never written by us
MANAGED_LABEL = "kubernetes.azure.com/managed=false"
DIRS = ("/etc/kubernetes", "/etc/kubernetes/manifests", "/etc/kubernetes/volumeplugins",
        "/etc/kubernetes/certs", KUBELET_DIR, os.path.dirname(DROPIN_PATH))

# The upstream agent's list (Azure/AKSFlexNode pkg/components/kubelet/): ECDHE with
# AES-GCM or ChaCha20 only.
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
        # Required with client.authentication.k8s.io/v1 (kubernetes.io/docs/reference/
        # access-authn-authz/authentication/#client-go-credential-plugins); the kubelet has no TTY.
        "interactiveMode": "Never",
    }
    if str(root) != "/":
        exec_config["env"] = [{"name": "AKS_FLEX_NODE_ROOT", "value": str(root)}]
    return _kubeconfig(cfg.cluster.name, server, ca_pem, "aks-flex-node", {"exec": exec_config},
                       context=cfg.cluster.name)


def bootstrap_kubeconfig(cfg, server, ca_pem, token):
    """The kubelet's bootstrap kubeconfig: the bootstrap token as a static bearer token."""
    return _kubeconfig(cfg.cluster.name, server, ca_pem, "kubelet-bootstrap", {"token": token},
                       context="bootstrap")


def _kubeconfig(cluster, server, ca_pem, user_name, user, context):
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user_name}}],
        "current-context": context,
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
        # The kubelet renews its own client certificate in the TLS bootstrap modes.
        "rotateCertificates": tls_bootstrap(cfg),
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
        # (Azure/AKSFlexNode pkg/config/structs.go forces it too, upstream PR #46).
        labels.append(MANAGED_LABEL)
    args = [f"--config={KUBELET_CONFIG}", f"--kubeconfig={KUBECONFIG}"]
    if tls_bootstrap(cfg):
        args += [f"--bootstrap-kubeconfig={BOOTSTRAP_KUBECONFIG}", f"--cert-dir={CERT_DIR}"]
    args += [f"--hostname-override={cfg.machine_name}", f"--node-labels={','.join(labels)}"]
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


def api_server_of(host, tls=False):
    """(server URL, CA PEM) from the kubeconfig we wrote (in the TLS bootstrap modes, the
    bootstrap kubeconfig, else the kubelet's own, which the kubelet writes in YAML);
    TemporaryError when none is there (the API server is then not known on this node)."""
    import yaml

    candidates = (BOOTSTRAP_KUBECONFIG, KUBECONFIG) if tls else (KUBECONFIG,)
    for path in candidates:
        raw = host.read_bytes(path)
        if raw is None:
            continue
        try:
            cluster = yaml.safe_load(raw.decode("utf-8"))["clusters"][0]["cluster"]
            return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])
        except (ValueError, KeyError, IndexError, TypeError, yaml.YAMLError) as err:
            raise FlexNodeError(f"{path} is not a kubeconfig with a server and its CA ({err})",
                                remedy="aks-flex-node bootstrap writes it again")
    raise TemporaryError(f"{' and '.join(candidates)}: gone: the API server is not known")


def bootstrap_token_of(host):
    """The token in the bootstrap kubeconfig we wrote, or None when there is none we can read
    (the file is ours and rewritten whenever a token is needed, so anything odd is "none")."""
    raw = host.read_bytes(BOOTSTRAP_KUBECONFIG)
    if raw is None:
        return None
    try:
        token = json.loads(raw.decode("utf-8"))["users"][0]["user"]["token"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return token if isinstance(token, str) and token else None


def resolv_conf(host):
    # systemd-resolved's real upstream list, when it runs; a stub 127.0.0.53 resolv.conf
    # would make pods loop DNS back to themselves.
    resolved = "/run/systemd/resolve/resolv.conf"
    return resolved if os.path.exists(host.path(resolved)) else "/etc/resolv.conf"


def _restart(path):
    return (restart("kubelet", f"{path} changed"),)


def _reload_and_restart(path):
    return (reload_units(f"{path} changed"), restart("kubelet", f"{path} changed"))


class KubeletStep(tracked.OwnsPaths, Step):
    name = "kubelet"
    help = "write the kubelet's kubeconfig (exec plugin), configuration, CA, unit and drop-in"
    branch = ACTIVATE
    needs = ("kubernetes", "credentials")
    state_dirs = (KUBELET_DIR,)  # it fills with the kubelet's state (pods, volumes, plugins)

    def check(self, ctx):
        cfg, plan, data = ctx.config, Plan(), ctx.data
        for path in DIRS:
            self.plan_dir(ctx, plan, path)
        if tls_bootstrap(cfg):
            self._plan_tls_bootstrap(ctx, plan)
        elif data.server is None:
            plan.add(f"write {KUBECONFIG} and {CA_PATH}", "the API server is not known yet",
                     owes=_restart(KUBECONFIG))
        else:
            tracked.plan_file(ctx, plan, self.name, CA_PATH, data.ca_pem, 0o644,
                              why="the cluster CA", owes=_restart(CA_PATH))
            tracked.plan_file(ctx, plan, self.name, KUBECONFIG,
                              kubeconfig(cfg, data.server, data.ca_pem, ctx.host.root), 0o600,
                              why="the kubelet's credentials come from `aks-flex-node token`",
                              owes=_restart(KUBECONFIG))
        tracked.plan_file(ctx, plan, self.name, KUBELET_CONFIG,
                          kubelet_config(cfg, resolv_conf(ctx.host)), 0o644,
                          why="the kubelet's settings", owes=_restart(KUBELET_CONFIG))
        tracked.plan_file(ctx, plan, self.name, UNIT_PATH, UNIT_TEXT, 0o644,
                          why="the kubelet's unit", owes=_reload_and_restart(UNIT_PATH))
        tracked.plan_file(ctx, plan, self.name, DROPIN_PATH, dropin(cfg), 0o644,
                          why="this node's kubelet command line",
                          owes=_reload_and_restart(DROPIN_PATH))
        # The kubelet reaches the API server through the proxy unless no_proxy covers it.
        plan_service_proxy(ctx, plan, self.name, "kubelet")
        if not plan.actions:
            plan.noop_reason = "kubeconfig, configuration, unit and drop-in as wanted"
        return plan

    def _plan_tls_bootstrap(self, ctx, plan):
        cfg, data = ctx.config, ctx.data
        if data.server is None:
            plan.add(f"write {BOOTSTRAP_KUBECONFIG} and {CA_PATH}", "the API server is not known yet",
                     owes=_restart(BOOTSTRAP_KUBECONFIG))
            return
        tracked.plan_file(ctx, plan, self.name, CA_PATH, data.ca_pem, 0o644,
                          why="the cluster CA", owes=_restart(CA_PATH))
        if ctx.ledger.has("file", KUBECONFIG):
            # Ours from Arc mode (an exec-plugin kubeconfig): the kubelet would use it
            # instead of bootstrapping.
            plan.add(f"remove {KUBECONFIG}", "the Arc mode's kubeconfig; this mode joins by TLS bootstrap",
                     lambda: tracked.forget_file(ctx, KUBECONFIG), owes=_restart(KUBECONFIG))
        if not token_needed(ctx.host):
            return  # the kubelet has a good certificate and renews it: no token is needed
        if data.bootstrap_token is None:
            plan.add_unknown(f"the kubelet's bootstrap token ({BOOTSTRAP_KUBECONFIG})",
                             "the kubelet has no valid client certificate, and a local pass asks "
                             "the pool for no token: the next full pass does")
            return
        tracked.plan_file(ctx, plan, self.name, BOOTSTRAP_KUBECONFIG,
                          bootstrap_kubeconfig(cfg, data.server, data.ca_pem, data.bootstrap_token), 0o600,
                          why="the kubelet has no client certificate that will last: it joins by TLS bootstrap",
                          owes=_restart(BOOTSTRAP_KUBECONFIG))
