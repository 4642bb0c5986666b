"""Where the kubelet's files are, and what a change to one of them owes: the kubelet reads
its CA, kubeconfigs, configuration, unit and drop-in at start, so a changed one owes a
restart; a changed unit file also owes systemd a reload."""

import os

from aks_flex_node.engine.step import reload_units, restart

KUBELET_BIN = "/usr/local/bin/kubelet"
KUBELET_DIR = "/var/lib/kubelet"
KUBECONFIG = KUBELET_DIR + "/kubeconfig"
BOOTSTRAP_KUBECONFIG = KUBELET_DIR + "/bootstrap-kubeconfig"
CERT_DIR = KUBELET_DIR + "/pki"
KUBELET_CLIENT_CERT = CERT_DIR + "/kubelet-client-current.pem"  # the kubelet's own, after TLS bootstrap
KUBELET_CONFIG = KUBELET_DIR + "/config.yaml"
CA_PATH = "/etc/kubernetes/certs/ca.crt"
UNIT_PATH = "/etc/systemd/system/kubelet.service"
DROPIN_PATH = "/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf"
DEFAULTS_PATH = "/etc/default/kubelet"  # operator's KUBELET_EXTRA_ARGS; never written by us
DIRS = ("/etc/kubernetes", "/etc/kubernetes/manifests", "/etc/kubernetes/volumeplugins",
        "/etc/kubernetes/certs", KUBELET_DIR, os.path.dirname(DROPIN_PATH))


def restart_kubelet(path):
    return (restart("kubelet", f"{path} changed"),)


def reload_and_restart_kubelet(path):
    return (reload_units(f"{path} changed"), restart("kubelet", f"{path} changed"))
