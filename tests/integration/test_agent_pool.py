"""The agent-pool join mode through the real CLI, against the emulator: the node's identity
holds only the Flex Node Agent Role on its pool; the kubelet joins by TLS bootstrap.

What is asserted is the state left in the root prefix and in the emulator: who created the
Node and how, which roles exist, what the kubelet was given, and what unbootstrap leaves.
"""

import json
import os


from tests.apiserver_fixtures import advance_past_renewal
from tests.emulator import constants as C
from tests.emulator import roles as emulator_roles
from tests.agent_fixtures import PENDING, start_agent, status, wait_for_passes
from tests.harness import MACHINE_NAME
from tests.waiting import wait_for
from tests.workload_fixtures import pool_machines, registered_node

POOL_SCOPE = f"{C.CLUSTER_ID}/agentPools/{C.FLEX_POOL}"


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
    registered = registered_node(emu)
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
    [machine] = pool_machines(emu).values()
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
    proc, _summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    # The kubelet notes its certificate in its status file on its own time.
    first = wait_for(lambda: _kubelet_status(node).get("cert_not_after") and _kubelet_status(node))
    assert first and first["rotations"] == 0, first
    # A year's certificate (the cluster's default signing duration): the clock is moved past
    # its renewal point instead of waiting, and the kubelet renews it on the cluster's clock.
    advance_past_renewal(emu, first)
    status = wait_for(lambda: _kubelet_status(node).get("rotations", 0) >= 1 and _kubelet_status(node),
                      timeout=60, interval=0.5)
    assert status and status["cert_serial"] != first["cert_serial"], _kubelet_status(node)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert summary["state"] == "succeeded"


def test_unbootstrap_leaves_the_node_and_machine_and_says_who_may_delete_them(pool_node):
    node, emu = pool_node, pool_node.emu
    assert node.cli_json("bootstrap")[0].returncode == 0
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stderr
    # A kubelet may not delete its own Node (Kubernetes >= 1.13): asked as the kubelet,
    # refused, and left to the cluster, said plainly.
    assert emu.requests(server="apiserver", method="DELETE", path_contains=f"/nodes/{MACHINE_NAME}")
    assert registered_node(emu) is not None
    [left] = [k for k in summary["kept"] if k.startswith(f"Kubernetes node {MACHINE_NAME}")]
    assert "left to the cluster" in left and f"kubectl delete node {MACHINE_NAME}" in left
    # The Flex Node Agent Role may not delete the Machine: kept, and the command is named.
    assert MACHINE_NAME in pool_machines(emu)
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
    assert MACHINE_NAME not in pool_machines(node.emu)
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


def _minted(emu):
    return len(emu.requests(server="arm", method="POST", path_contains="/listBootstrapData"))


def _lose_the_client_certificate(node, bootstrap_kubeconfig_too=False):
    """The kubelet stops and its client certificate is gone (a disk replaced, a cleanup, or
    one that expired while the node was off): it must TLS-bootstrap again."""
    import shutil
    import subprocess

    subprocess.run(["systemctl", "stop", "kubelet"], env=node.env, check=True)
    shutil.rmtree(node.path("/var/lib/kubelet/pki"))
    if bootstrap_kubeconfig_too:
        os.unlink(node.path("/var/lib/kubelet/bootstrap-kubeconfig"))


def test_the_agent_asks_the_pool_for_a_token_only_when_the_kubelet_needs_one(pool_node):
    node, emu = pool_node, pool_node.emu
    assert node.cli_json("bootstrap")[0].returncode == 0
    minted, serial = _minted(emu), _kubelet_status(node)["cert_serial"]
    token = json.loads(node.read("/var/lib/kubelet/bootstrap-kubeconfig"))["users"][0]["user"]["token"]

    # The kubelet's certificate is good: a full pass mints nothing.
    proc = node.cli("agent", "--once")
    assert proc.returncode == 0, proc.stderr
    assert _minted(emu) == minted

    # The certificate is gone but the token it was given still works: the kubelet
    # bootstraps again with it; still nothing minted.
    _lose_the_client_certificate(node)
    proc = node.cli("agent", "--once")
    assert proc.returncode == 0, proc.stderr
    assert _minted(emu) == minted
    # The node-ready phase saw the new certificate on disk; the stand-in kubelet notes its
    # serial in its status file on its own time, a moment later.
    assert wait_for(lambda: _kubelet_status(node)["cert_serial"] != serial, 15), _kubelet_status(node)
    assert json.loads(node.read("/var/lib/kubelet/bootstrap-kubeconfig"))["users"][0]["user"]["token"] == token

    # Certificate and token both gone: the agent's local pass cannot fetch one (it asks
    # Azure nothing) and fails; the full pass after it asks the pool, writes a new 0600
    # bootstrap kubeconfig, and the node comes back.
    agent = start_agent(node, "--interval", "1")
    try:
        assert wait_for(lambda: status(node).get("pass") == "local" and status(node).get("state") == "succeeded",
                        60), status(node)
        serial = _kubelet_status(node)["cert_serial"]
        _lose_the_client_certificate(node, bootstrap_kubeconfig_too=True)
        assert wait_for(lambda: _minted(emu) == minted + 1, 60), status(node)
        assert wait_for(lambda: status(node).get("state") == "succeeded"
                        and _kubelet_status(node).get("cert_serial") not in (None, serial), 60), status(node)
        assert wait_for_passes(node, 2)  # more passes: the new certificate is good, nothing more is minted
        assert _minted(emu) == minted + 1
    finally:
        agent.terminate()
        _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    assert "its bootstrap token is gone or no longer accepted" in err  # the local pass said why
    assert node.mode("/var/lib/kubelet/bootstrap-kubeconfig") == 0o600
    new = json.loads(node.read("/var/lib/kubelet/bootstrap-kubeconfig"))["users"][0]["user"]["token"]
    assert new != token and new.split(".")[0] in {t["token_id"] for t in _tokens(emu)}
    node_object = registered_node(emu)
    assert [c["status"] for c in node_object["status"]["conditions"] if c["type"] == "Ready"] == ["True"]


def test_a_pending_join_is_retried_until_the_pool_role_is_in_place(pool_node):
    """The postinst marks the join pending; the node's role is not assigned yet (and the
    pool throttles at first): the agent retries, and joins once an operator assigns it."""
    node, emu = pool_node, pool_node.emu
    [assignment] = [a for a in emu.state()["role_assignments"] if a["principal_id"] == C.NODE_SP_OBJECT_ID]
    path = f"{assignment['scope']}/providers/Microsoft.Authorization/roleAssignments/{assignment['name']}"
    assert emu.arm_call("DELETE", path, "2022-04-01")[0] in (200, 204)
    emu.faults([{"match": {"method": "POST", "path_regex": "listBootstrapData", "times": 2},
                 "respond": {"status": 429, "headers": {"Retry-After": "1"},
                             "body": {"error": {"code": "TooManyRequests", "message": "throttled"}}}}])
    os.makedirs(node.path("/var/lib/aks-flex-node"), exist_ok=True)
    open(node.path(PENDING), "w").close()
    agent = start_agent(node, "--interval", "1")
    try:
        assert wait_for(lambda: status(node).get("state") == "pending", 60), status(node)
        assert "agent-pool" in json.dumps(status(node).get("error"))
        assert pool_machines(emu) == {} and _minted(emu) == 0
        role_id = (f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/Microsoft.Authorization/roleDefinitions/"
                   f"{C.ROLE_AKS_FLEX_NODE_AGENT}")
        put = emu.arm_call("PUT", path, "2022-04-01", body={"properties": {
            "roleDefinitionId": role_id, "principalId": C.NODE_SP_OBJECT_ID, "principalType": "ServicePrincipal"}})
        assert put[0] in (200, 201), put
        assert wait_for(lambda: status(node).get("state") == "succeeded", 120), status(node)
    finally:
        agent.terminate()
        _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    assert "retrying" in err
    assert not os.path.exists(node.path(PENDING))
    # The two 429s were waited out (Retry-After), then one token minted.
    throttled = emu.requests(server="arm", method="POST", path_contains="/listBootstrapData")
    assert [r["status"] for r in throttled] == [429, 429, 200]
    assert MACHINE_NAME in pool_machines(emu)
