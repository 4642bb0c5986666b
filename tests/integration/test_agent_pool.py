"""The agent-pool join mode through the real CLI, against the emulator: the node's identity
holds only the Flex Node Agent Role on its pool; the kubelet joins by TLS bootstrap.

What is asserted is the state left in the root prefix and in the emulator: who created the
Node and how, which roles exist, what the kubelet was given, and what unbootstrap leaves.
"""

import json
import os
import time

import pytest

from tests.emulator import constants as C
from tests.emulator import roles as emulator_roles
from tests.harness import MACHINE_NAME, SECRET_PATH

POOL_SCOPE = f"{C.CLUSTER_ID}/agentPools/{C.FLEX_POOL}"


@pytest.fixture
def pool_node(node):
    """The scratch node, configured for agent-pool mode with the node's own service principal."""
    from tests import harness

    harness.write_config(node.root, node.emu, node.wrapper, extra={
        "join_mode": "agent-pool", "agent_pool": C.FLEX_POOL, "sp_client_id": C.NODE_SP_CLIENT_ID,
        "arc_tags": "", "himds_endpoint": ""})
    with open(node.path(SECRET_PATH), "w") as f:
        f.write(C.NODE_SP_CLIENT_SECRET + "\n")
    return node


def _node_object(emu, name=MACHINE_NAME):
    return {n["metadata"]["name"]: n for n in emu.state()["nodes"].get(C.CLUSTER_NAME, [])}.get(name)


def _pool_machines(emu):
    state = emu.state()
    return {m["name"]: m for pool in state.get("agentpool_machines", {}).values()
            for m in (pool.values() if isinstance(pool, dict) else pool)}


def _tokens(emu):
    return [t for tokens in emu.state().get("bootstrap_tokens", {}).values()
            for t in (tokens.values() if isinstance(tokens, dict) else tokens)]


def _kubelet_status(node):
    with open(os.path.join(node.state_dir, "kubelet-status.json")) as f:
        return json.load(f)


def test_join_reaches_ready_by_tls_bootstrap_with_only_the_pool_role(pool_node):
    node, emu = pool_node, pool_node.emu
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    phases = {p["name"]: p for p in summary["phases"]}
    assert phases["machine"]["status"] == "changed"
    for arc_only in ("arc", "roles", "rbac-propagation"):
        assert "agent-pool mode" in phases[arc_only]["message"]

    # The Node: created by the kubelet as system:node:NAME, authenticated by a certificate.
    registered = _node_object(emu)
    assert registered["_registeredBy"] == f"system:node:{MACHINE_NAME}"
    assert registered["_authenticatedBy"] == "x509"
    ready = [c for c in registered["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    labels = registered["metadata"]["labels"]
    assert labels["node-role"] == "edge" and labels["team"] == "edge"  # the pool's and the operator's
    assert {"key": "aks.azure.com/flex-node", "value": "true", "effect": "NoSchedule"} in registered["spec"]["taints"]

    # Azure: no Arc machine, no role assignment made; the node's identity holds one role, on
    # the pool, with no DataActions.
    state = emu.state()
    assert state["machines"] == []
    held = [a for a in state["role_assignments"] if a["principal_id"] == C.NODE_SP_OBJECT_ID]
    assert [(a["scope"].lower(), a["role_guid"]) for a in held] == [(POOL_SCOPE.lower(), C.ROLE_AKS_FLEX_NODE_AGENT)]
    for assignment in held:
        assert emulator_roles.BUILT_IN[assignment["role_guid"]][2]["dataActions"] == []
    [machine] = _pool_machines(emu).values()
    assert machine["name"] == MACHINE_NAME
    assert machine["spec"]["kubernetes"]["orchestratorVersion"] == C.K8S_VERSION

    # Host: the bootstrap kubeconfig is private and holds a token the pool minted; the
    # kubelet got its certificate and renews it itself.
    assert node.mode("/var/lib/kubelet/bootstrap-kubeconfig") == 0o600
    bootstrap = json.loads(node.read("/var/lib/kubelet/bootstrap-kubeconfig"))
    token = bootstrap["users"][0]["user"]["token"]
    assert token.split(".")[0] in {t["token_id"] for t in _tokens(emu)}  # (the admin view hides secrets)
    config = json.loads(node.read("/var/lib/kubelet/config.yaml"))
    assert config["rotateCertificates"] is True
    dropin = node.read("/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf").decode()
    assert "--bootstrap-kubeconfig=/var/lib/kubelet/bootstrap-kubeconfig" in dropin
    assert _kubelet_status(node)["auth"] == "x509"
    # The token is in no file but the bootstrap kubeconfig (and never in status or logs).
    for path in node.files():
        if path != "/var/lib/kubelet/bootstrap-kubeconfig" and os.path.isfile(node.path(path)):
            assert token.encode() not in node.read(path), path
    assert token not in proc.stdout + proc.stderr

    # config show says which values came from the pool.
    shown = node.cli("config", "show")
    assert "# from listBootstrapData" in shown.stdout and "max_pods = 110" in shown.stdout

    # Again: nothing changes, and the kubelet's certificate makes a new token unneeded.
    proc, again = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert [p["name"] for p in again["phases"] if p["status"] == "changed"] == []
    assert json.loads(node.read("/var/lib/kubelet/bootstrap-kubeconfig"))["users"][0]["user"]["token"] == token


def test_the_kubelet_rotates_its_certificate_and_the_node_stays_joined(pool_node):
    node, emu = pool_node, pool_node.emu
    emu.settings(csr_signing_duration=8.0)
    proc, _summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    first = _kubelet_status(node)["cert_serial"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _kubelet_status(node).get("rotations", 0) < 1:
        time.sleep(0.5)
    status = _kubelet_status(node)
    assert status["rotations"] >= 1 and status["cert_serial"] != first
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert summary["state"] == "succeeded"


def test_unbootstrap_deletes_the_node_and_says_who_may_delete_the_machine(pool_node):
    node, emu = pool_node, pool_node.emu
    assert node.cli_json("bootstrap")[0].returncode == 0
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stderr
    assert _node_object(emu) is None  # deleted with the node's own certificate
    # The Flex Node Agent Role may not delete the Machine: kept, and the command is named.
    assert MACHINE_NAME in _pool_machines(emu)
    [kept] = [k for k in summary["kept"] if "machine" in k]
    assert "az aks nodepool delete-machines" in kept and f"--machine-names {MACHINE_NAME}" in kept
    assert not os.path.exists(node.path("/var/lib/kubelet"))
    assert not os.path.exists(node.path("/var/lib/aks-flex-node/ledger.json"))


def test_unbootstrap_with_a_credential_that_may_deletes_the_machine(node):
    """An operator's Owner credential in agent-pool mode: unbootstrap calls deleteMachines."""
    from tests import harness

    harness.write_config(node.root, node.emu, node.wrapper, extra={
        "join_mode": "agent-pool", "agent_pool": C.FLEX_POOL, "arc_tags": "", "himds_endpoint": ""})
    assert node.cli_json("bootstrap")[0].returncode == 0
    proc, _summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stderr
    assert MACHINE_NAME not in _pool_machines(node.emu)
    assert node.emu.requests(server="arm", method="POST", path_contains="deleteMachines")


def test_without_the_pool_role_preflight_names_it_and_changes_nothing(pool_node):
    node, emu = pool_node, pool_node.emu
    state = emu.state()
    [assignment] = [a for a in state["role_assignments"] if a["principal_id"] == C.NODE_SP_OBJECT_ID]
    status, _, _ = emu.arm_call("DELETE", f"{assignment['scope']}/providers/Microsoft.Authorization/"
                                          f"roleAssignments/{assignment['name']}", "2022-04-01")
    assert status in (200, 204)
    before = node.files()
    proc = node.cli("bootstrap")
    assert proc.returncode == 3, proc.stderr
    assert "agent-pool" in proc.stderr and C.ROLE_AKS_FLEX_NODE_AGENT in proc.stderr
    assert "listBootstrapData/action" in proc.stderr
    # Only the run's own record (status.json, the lock) is new: the host is untouched.
    assert {f for f in node.files() - before if not f.startswith("/var/lib/aks-flex-node")} == set()
