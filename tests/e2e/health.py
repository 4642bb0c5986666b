"""What the operator of a booted node sees of its health without logging in (issue 27), read
with the real clients: Debian's prometheus-node-exporter serving the agent's textfile over
HTTP (GET /metrics inside the node, as Prometheus scrapes it), and the Node's conditions and
events read with python3-kubernetes on the host and, where the node's release packages it,
`kubectl describe node` inside the node.

The failing repair is made as an operator's mistake would make it: a drop-in that keeps the
kubelet from starting, and whose start attempt also undoes the agent's repair of the
kubelet's configuration (so the next pass needs that repair again: it did not stick).
"""

import base64
import re

from tests.e2e import container as ct
from tests.emulator import constants as C
from tests.waiting import wait_for

# Debian's prometheus-node-exporter listens on :9100 (its /etc/default/prometheus-node-exporter
# sets no other --web.listen-address); its textfile collector reads /var/lib/prometheus/node-exporter.
METRICS_URL = "http://127.0.0.1:9100/metrics"
NODE_EXPORTER = "prometheus-node-exporter"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
BROKEN_KUBELET_DROPIN = "/etc/systemd/system/kubelet.service.d/e2e-fails-to-start.conf"
ADMIN_KUBECONFIG = "/root/.kube/e2e-admin.conf"

# The exposition format's sample line: name, optional {labels}, value (text format 0.0.4).
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

# Fetched inside the node (its own loopback): stdout is the body.
_FETCH = ("import sys, urllib.request\n"
          "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n")


def parse_metrics(text):
    """[(name, {label: value}, float)] of every sample in exposition text."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        found = _SAMPLE.fullmatch(line.strip())
        if found:
            labels = dict(_LABEL.findall(found.group(2) or ""))
            out.append((found.group(1), labels, float(found.group(3))))
    return out


class Scrape:
    """One GET of node_exporter's /metrics, with lookups by name and labels."""

    def __init__(self, text):
        self.text, self.samples = text, parse_metrics(text)

    def values(self, name, **labels):
        return [v for n, have, v in self.samples if n == name and all(have.get(k) == w for k, w in labels.items())]

    def labels(self, name):
        return [have for n, have, _ in self.samples if n == name]

    def one(self, name, **labels):
        found = self.values(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {found}\n" + "\n".join(
            line for line in self.text.splitlines() if line.startswith(("aks_flex_node", "node_textfile")))
        return found[0]


def scrape(node, timeout=120):
    """node_exporter's /metrics as Prometheus would read it, once the service answers with our
    textfile's series in it."""
    seen = {}

    def served():
        proc = node.c.run(["python3", "-c", _FETCH, METRICS_URL], check=False, timeout=60)
        seen["proc"] = proc
        return proc.returncode == 0 and "aks_flex_node_build_info" in proc.stdout

    if not wait_for(served, timeout=timeout, interval=1):
        proc = seen["proc"]
        raise AssertionError(f"{METRICS_URL} inside the node served no aks_flex_node series in {timeout} s "
                             f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}\n"
                             f"{node.journal(NODE_EXPORTER)}")
    return Scrape(seen["proc"].stdout)


# ---- the Node, as the cluster's operator reads it ---------------------------------------------

def admin_kubeconfig(emu, cluster_id=C.CLUSTER_ID):
    """The cluster admin's kubeconfig (`az aks get-credentials --admin`), as bytes."""
    status, _, creds = emu.arm_call("POST", f"{cluster_id}/listClusterAdminCredential", "2026-08-01")
    assert status == 200, creds
    return base64.b64decode(creds["kubeconfigs"][0]["value"])


def flex_conditions(emu, name):
    """{type: condition} of the Node's FlexNode* conditions, as the emulator holds them."""
    nodes = {n["metadata"]["name"]: n for n in emu.state()["nodes"].get(C.CLUSTER_NAME, [])}
    conditions = (nodes.get(name) or {}).get("status", {}).get("conditions") or []
    return {c["type"]: c for c in conditions if c["type"].startswith("FlexNode")}


def wait_for_condition(node, name, type_, status="True", timeout=300):
    """Wait until the Node `name` carries condition `type_` with `status`; its conditions then."""
    seen = {}

    def shown():
        seen["conditions"] = flex_conditions(node.emulator, name)
        return seen["conditions"].get(type_, {}).get("status") == status

    if wait_for(shown, timeout=timeout, interval=1):
        return seen["conditions"]
    raise AssertionError(f"the Node {name} has no {type_}={status} after {timeout} s: {seen.get('conditions')}\n"
                         f"{node.journals(('aks-flex-node-agent', 'kubelet'))}")


def read_with_python_client(kubeconfig_path, name):
    """(conditions {type: (status, reason)}, events [(reason, type, reportingComponent)]) of the
    Node `name`, through python3-kubernetes's typed models (the host's Debian package)."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig_path)))
    found = api.read_node(name)
    conditions = {c.type: (c.status, c.reason) for c in found.status.conditions}
    # As `kubectl describe node` asks for a cluster-scoped object's events: in every namespace,
    # selected by the object they regard (kubectl's describe.go, searchEvents).
    listed = api.list_event_for_all_namespaces(field_selector=f"involvedObject.kind=Node,involvedObject.name={name}")
    return conditions, [(e.reason, e.type, e.reporting_component) for e in listed.items]


def has_kubectl(release):
    return "kubectl" in ct.RELEASE_PACKAGES.get(release, ())


def kubectl_describe_node(node, kubeconfig, name):
    """`kubectl describe node NAME` run inside the node (Debian's kubectl), as the admin."""
    node.c.write(ADMIN_KUBECONFIG, kubeconfig, 0o600)
    proc = node.c.run(["kubectl", "--kubeconfig", ADMIN_KUBECONFIG, "describe", "node", name], check=False,
                      timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


# ---- a repair that does not stick -------------------------------------------------------------

def break_kubelet_start(node):
    """A drop-in whose ExecStartPre edits the kubelet's configuration again and fails: every
    restart the agent asks for fails, and re-makes the drift the agent has just repaired."""
    undo = f'echo "# e2e: edited again by a start attempt" >> {KUBELET_CONFIG}; exit 1'
    # systemd.service(5), "Command lines": single quotes make one argument of it.
    node.c.write(BROKEN_KUBELET_DROPIN, f"[Service]\nExecStartPre=/bin/sh -c '{undo}'\n", 0o644)
    node.c.run(["systemctl", "daemon-reload"])
    node.c.run(["sh", "-c", f"echo '# e2e: an operator edit' >> {KUBELET_CONFIG}"])
