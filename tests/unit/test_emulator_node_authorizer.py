"""Who may do what on the kube-apiserver stand-in (tests/emulator/kubeauth.py): bootstrap-token
authentication, the bootstrappers' CSR-only rights, the Node authorizer and NodeRestriction."""

import base64

import pytest

from tests.apiserver_fixtures import (CSRS, KubeClient, admin_client, bootstrap_token, csr_object, make_csr,
                                      node_client)
from tests.emulator import constants as C


def node(name, labels=None, taints=None):
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}, "spec": {}}
    if taints:
        body["spec"]["taints"] = taints
    return body


def _other_secret(token):
    token_id, secret = token.split(".")
    return f"{token_id}.{'a' * 16 if secret != 'a' * 16 else 'b' * 16}"


@pytest.mark.parametrize("case", ["valid", "expired", "wrong-secret", "unknown-id", "other-cluster"])
def test_bootstrap_token_authentication(fresh_emulator, case):
    if case == "expired":
        fresh_emulator.settings(bootstrap_token_ttl=0.0)
    token = bootstrap_token(fresh_emulator)
    server = None
    if case == "wrong-secret":
        token = _other_secret(token)
    elif case == "unknown-id":
        token = "zzzzzz." + token.split(".")[1]
    elif case == "other-cluster":
        server = fresh_emulator.apiservers[C.CLUSTER2_ID]  # the token is aks-one's
    status, body = KubeClient(fresh_emulator, token=token, server=server)("GET", CSRS)
    if case == "valid":
        assert status == 200 and body["kind"] == "CertificateSigningRequestList"
    else:
        assert status == 401 and body["reason"] == "Unauthorized", body
    entry = [r for r in fresh_emulator.requests(server="apiserver") if r["path"] == CSRS][-1]
    if case == "valid":
        assert entry["detail"] == {"principal": f"system:bootstrap:{token.split('.')[0]}", "auth": "bootstrap-token"}


def test_a_bootstrapper_may_only_use_csrs(fresh_emulator):
    token = bootstrap_token(fresh_emulator)
    client = KubeClient(fresh_emulator, token=token)
    for method, path, body in (("GET", "/api/v1/nodes", None), ("POST", "/api/v1/nodes", node("n1")),
                               ("GET", "/api/v1/nodes/n1", None), ("DELETE", "/api/v1/nodes/n1", None)):
        status, answer = client(method, path, body)
        assert status == 403, (method, path, answer)
        assert f'User "system:bootstrap:{token.split(".")[0]}" cannot' in answer["message"]
    assert client("GET", CSRS)[0] == 200


def test_a_node_may_create_and_change_only_its_own_node_and_delete_none(fresh_emulator):
    admin = admin_client(fresh_emulator)
    assert admin("POST", "/api/v1/nodes", node("n2"))[0] == 201
    n1, _ = node_client(fresh_emulator, "n1")

    status, answer = n1("POST", "/api/v1/nodes", node("n2-fake"))
    assert status == 403 and answer["message"] == \
        'nodes "n2-fake" is forbidden: node "n1" is not allowed to modify node "n2-fake"'
    status, created = n1("POST", "/api/v1/nodes", node("n1"))
    assert status == 201, created
    recorded = fresh_emulator.state()["nodes"][C.CLUSTER_NAME]
    mine = next(n for n in recorded if n["metadata"]["name"] == "n1")
    assert mine["_registeredBy"] == "system:node:n1" and mine["_authenticatedBy"] == "x509"

    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    strategic = "application/strategic-merge-patch+json"
    assert n1("PATCH", "/api/v1/nodes/n1/status", ready, strategic)[0] == 200
    assert n1("PATCH", "/api/v1/nodes/n2/status", ready, strategic)[0] == 403
    assert n1("PATCH", "/api/v1/nodes/n2", {"metadata": {"labels": {"a": "b"}}}, strategic)[0] == 403
    # aks-one is 1.30: without AuthorizeNodeWithSelectors (beta from 1.32) a node reads every Node.
    status, listing = n1("GET", "/api/v1/nodes")
    assert status == 200 and {n["metadata"]["name"] for n in listing["items"]} == {"n1", "n2"}
    assert n1("GET", "/api/v1/nodes/n2")[0] == 200

    # No node may delete a Node, its own included, since 1.13 (kubernetes/kubernetes#71021).
    for name in ("n2", "n1"):
        status, answer = n1("DELETE", f"/api/v1/nodes/{name}")
        assert status == 403 and answer["message"] == (
            f'nodes "{name}" is forbidden: User "system:node:n1" cannot delete resource "nodes" in API group "" '
            "at the cluster scope"), answer
    assert admin("DELETE", "/api/v1/nodes/n1")[0] == 200
    assert admin("GET", "/api/v1/nodes/n2")[0] == 200


@pytest.mark.parametrize("label, allowed", [
    ("node-restriction.kubernetes.io/pool", False),
    ("example.node-restriction.kubernetes.io/x", False),
    ("node-role.kubernetes.io/worker", False),
    ("kubernetes.io/role", False),
    ("custom.k8s.io/x", False),
    ("kubernetes.io/hostname", True),
    ("kubernetes.io/os", True),
    ("topology.kubernetes.io/zone", True),
    ("node.kubernetes.io/instance-type", True),
    ("kubelet.kubernetes.io/anything", True),
    ("team.node.kubernetes.io/x", True),
    ("kubernetes.azure.com/agentpool", True),
    ("team", True),
])
def test_node_restriction_labels_at_registration(fresh_emulator, label, allowed):
    n1, _ = node_client(fresh_emulator, "n1")
    status, answer = n1("POST", "/api/v1/nodes", node("n1", {label: "x"}))
    if allowed:
        assert status == 201, answer
    else:
        assert status == 403 and answer["message"] == \
            f'nodes "n1" is forbidden: node "n1" is not allowed to set the following labels: {label}'


def test_node_restriction_on_update_labels_and_taints(fresh_emulator):
    n1, _ = node_client(fresh_emulator, "n1")
    taint = {"key": "flex", "value": "true", "effect": "NoSchedule"}
    assert n1("POST", "/api/v1/nodes", node("n1", {"team": "a"}, [taint]))[0] == 201
    merge = "application/merge-patch+json"
    assert n1("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"team": "b"}}}, merge)[0] == 200
    status, answer = n1("PATCH", "/api/v1/nodes/n1",
                        {"metadata": {"labels": {"node-restriction.kubernetes.io/a": "b"}}}, merge)
    assert status == 403 and "is not allowed to modify labels: node-restriction.kubernetes.io/a" in answer["message"]
    status, answer = n1("PATCH", "/api/v1/nodes/n1", {"spec": {"taints": []}}, merge)
    assert status == 403 and 'node "n1" is not allowed to modify taints' in answer["message"]
    # The cluster admin may.
    admin = admin_client(fresh_emulator)
    assert admin("PATCH", "/api/v1/nodes/n1", {"spec": {"taints": []}}, merge)[0] == 200


def test_a_certificate_without_system_nodes_is_not_a_node(fresh_emulator):
    """CN system:node:n1 alone is not enough for the Node authorizer: the group must be there too;
    such a certificate is an ordinary user with no rights."""
    admin = admin_client(fresh_emulator)
    csr_pem, key_pem = make_csr("system:node:n1", orgs=("other",))
    body = csr_object(csr_pem, name="odd", signer="kubernetes.io/kube-apiserver-client")
    _, created = admin("POST", CSRS, body)
    created["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Test"}]}
    status, approved = admin("PUT", f"{CSRS}/odd/approval", created)
    client = KubeClient(fresh_emulator, cert=(base64.b64decode(approved["status"]["certificate"]), key_pem))
    status, answer = client("POST", "/api/v1/nodes", node("n1"))
    assert status == 403 and 'User "system:node:n1" cannot create resource "nodes"' in answer["message"]


def test_azure_principals_keep_azure_rbac(fresh_emulator):
    token = fresh_emulator.mint_token(C.SP_OBJECT_ID)
    client = KubeClient(fresh_emulator, token=token)
    status, answer = client("GET", "/api/v1/nodes")
    assert status == 403 and "User does not have access to the resource in Azure" in answer["message"]
    assert client("GET", CSRS)[0] == 403
