"""Two machines under one name (issue 26: cloned images), through the real CLI against one
emulator: scratch roots with the same machine_name and different /etc/machine-id.

- a second host whose name is Connected in Arc from the first is refused before any change;
- a clone of a joined host (its kubeconfig, its connected agent, a new machine ID) is refused
  while the first host's Node is Ready, and warned about once that Node is NotReady;
- the same machine rejoins.
"""

import base64
import hashlib
import os
import shutil

import pytest

from aks_flex_node import paths
from tests import harness
from tests.apiserver_fixtures import admin_client
from tests.emulator import constants as C
from tests.emulator_fixtures import scratch_node
from tests.harness import MACHINE_NAME
from tests.waiting import wait_for

# What every run writes, a refused one too: the run lock and the run's outcome (paths.py).
# What any run writes about itself, refused or not: its status, and the metrics record that
# counts it (health/metrics.py).
RUN_RECORDS = (paths.STATE_DIR, paths.LOCK, paths.STATUS, paths.COMPLETE_MARKER, paths.METRICS_RECORD)
ID_A = "a" * 32
ID_B = "b" * 32


def set_machine_id(node, value):
    path = node.path("/etc/machine-id")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(value + "\n")


@pytest.fixture
def second(node, tmp_path):
    other = scratch_node(node.emu, tmp_path / "second")
    yield other
    other.fake.stop_units()


def snapshot(node):
    """Every path under the root with what it is: a file's digest and mode, a link's target."""
    out = {}
    for path in sorted(node.files()):
        full = node.path(path)
        if os.path.islink(full):
            out[path] = ("link", os.readlink(full))
        elif os.path.isfile(full):
            with open(full, "rb") as f:
                out[path] = ("file", hashlib.sha256(f.read()).hexdigest(), node.mode(path))
        else:
            out[path] = ("dir", node.mode(path))
    return out


def preflight(node):
    """`aks-flex-node preflight --json`: its exit code and each check's result by name."""
    proc, body = node.cli_json("preflight")
    return proc.returncode, {r["name"]: r for r in body["checks"]}


def refused_by_preflight(node):
    """A bootstrap of `node`, which must stop in preflight (exit 3) and change nothing there."""
    before = snapshot(node)
    proc, body = node.cli_json("bootstrap")
    assert proc.returncode == 3, proc.stderr
    assert body["error"]["error"] == "preflight"
    assert [p["status"] for p in body["phases"] if p["name"] == "preflight"] == ["failed"]
    after = snapshot(node)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert [p for p in changed if p not in RUN_RECORDS] == []  # nothing changed on it


def arc_machine(emu):
    found = [m for m in emu.state()["machines"] if m["name"] == MACHINE_NAME]
    return found[0] if found else None


def kube_node(emu):
    return {n["metadata"]["name"]: n for n in emu.state()["nodes"].get(C.CLUSTER_NAME, [])}.get(MACHINE_NAME)


def test_a_second_host_under_a_connected_arc_name_is_refused_before_any_change(node, second):
    set_machine_id(node, ID_A)
    set_machine_id(second, ID_B)
    node.cli("bootstrap", check=True)
    first_vm_id = arc_machine(node.emu)["vm_id"]
    assert kube_node(node.emu)["status"]["nodeInfo"]["machineID"] == ID_A

    refused_by_preflight(second)
    code, checks = preflight(second)
    assert code == 3 and checks["arc-identity"]["status"] == "error"
    assert first_vm_id in checks["arc-identity"]["message"] and MACHINE_NAME in checks["arc-identity"]["message"]
    machine = arc_machine(node.emu)
    assert machine["vm_id"] == first_vm_id and machine.get("claims", [first_vm_id]) == [first_vm_id]
    assert kube_node(node.emu)["status"]["nodeInfo"]["machineID"] == ID_A

    # The first machine rejoins: its own Node, its own Arc connection.
    node.cli("bootstrap", check=True)
    code, checks = preflight(node)
    assert code == 0
    assert checks["arc-identity"]["status"] == checks["node-identity"]["status"] == "pass"


def clone(node, other, machine_id):
    """`other` becomes a clone of joined `node`: its disk (kubeconfig, certificates, ledger)
    and its Arc agent's local state, with a machine ID of its own."""
    shutil.rmtree(other.root)
    shutil.copytree(node.root, other.root, symlinks=True)
    shutil.copy(os.path.join(node.state_dir, "azcmagent.json"), os.path.join(other.state_dir, "azcmagent.json"))
    set_machine_id(other, machine_id)
    harness.write_config(other.root, other.emu, other.wrapper)


def test_a_clone_of_a_joined_host_is_refused_while_the_node_is_ready_and_warned_once_stale(node, second):
    set_machine_id(node, ID_A)
    node.cli("bootstrap", check=True)
    clone(node, second, ID_B)

    refused_by_preflight(second)
    code, checks = preflight(second)
    assert code == 3 and checks["node-identity"]["status"] == "error", checks["node-identity"]
    assert ID_A in checks["node-identity"]["message"] and ID_B in checks["node-identity"]["message"]
    assert kube_node(node.emu)["status"]["nodeInfo"]["machineID"] == ID_A
    # Nor does the refused clone report its failure onto the first machine's Node.
    assert not [c for c in kube_node(node.emu)["status"]["conditions"]
                if c["type"] == "FlexNodePassFailed" and c["status"] == "True"]

    # The first machine stops; the node lifecycle controller marks its Node Unknown.
    node.fake.stop_units()
    status, answer = admin_client(node.emu)(
        "PATCH", f"/api/v1/nodes/{MACHINE_NAME}/status",
        {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}},
        content_type="application/strategic-merge-patch+json")
    assert status == 200, answer
    code, checks = preflight(second)
    assert checks["node-identity"]["status"] == "warning", checks["node-identity"]


def test_overridden_the_emulator_shows_two_machines_fighting_over_one_name(node, second):
    """What the refusal prevents, as the emulator models it: the second host's connect takes
    the Arc machine over (its vmId recorded as a second claim; vmId itself is create-only),
    and its kubelet adopts the first's Node (Create answers AlreadyExists, the kubelet patches
    it), so the Node's machineID turns to the second machine's while the first still runs."""
    set_machine_id(node, ID_A)
    set_machine_id(second, ID_B)
    node.cli("bootstrap", check=True)
    first_vm_id = arc_machine(node.emu)["vm_id"]
    second.cli("bootstrap", "--ignore-preflight-errors=arc-identity,node-identity", check=True)
    machine = arc_machine(node.emu)
    assert machine["vm_id"] == first_vm_id and len(machine["claims"]) == 2
    seen = wait_for(lambda: kube_node(node.emu)["status"]["nodeInfo"]["machineID"] == ID_B, timeout=120)
    assert seen, kube_node(node.emu)["status"]["nodeInfo"]


def bootstrap_token_mode(node):
    """`node` in bootstrap-token mode: a token minted by listBootstrapData (the operator's
    call), the API server and its CA in the config, no Azure credential."""
    status, _, data = node.emu.arm_call("POST", f"{C.FLEX_POOL_ID}/listBootstrapData", C.AGENTPOOL_API, body={})
    assert status == 200, data
    token_path, ca_path = "/etc/aks-flex-node/bootstrap-token", "/etc/aks-flex-node/cluster-ca.pem"
    for node_path, text, mode in ((token_path, data["azure"]["bootstrapToken"]["token"] + "\n", 0o600),
                                  (ca_path, base64.b64decode(data["node"]["kubelet"]["caCertData"]).decode(), 0o644)):
        with open(os.open(node.path(node_path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
            f.write(text)
    harness.write_config(node.root, node.emu, node.wrapper, extra={
        "join_mode": "bootstrap-token", "bootstrap_token_file": token_path,
        "api_server": "https://" + data["node"]["kubelet"]["clusterFQDN"], "cluster_ca_file": ca_path,
        "kubernetes_version": data["components"]["kubernetes"],
        "auth_method": "", "sp_client_id": "", "sp_client_secret_file": "", "arc_tags": "", "himds_endpoint": ""})
    os.unlink(node.path(harness.SECRET_PATH))


def test_bootstrap_token_mode_asks_with_the_token_where_the_cluster_lets_it(node, second):
    """A first join in bootstrap-token mode holds no node credential yet; where the cluster
    lets bootstrap tokens get Nodes (kubeadm's kubeadm:get-nodes), the token asks, as kubeadm
    join does, and a Ready Node of another machine ID refuses the join."""
    node.emu.settings(bootstrap_get_nodes="on")
    for each, machine_id in ((node, ID_A), (second, ID_B)):
        bootstrap_token_mode(each)
        set_machine_id(each, machine_id)
    node.cli("bootstrap", check=True)
    refused_by_preflight(second)
    code, checks = preflight(second)
    assert code == 3 and checks["node-identity"]["status"] == "error", checks["node-identity"]
    assert ID_A in checks["node-identity"]["message"]
    code, checks = preflight(node)  # the first machine, again: its own Node
    assert code == 0 and checks["node-identity"]["status"] == "pass"
