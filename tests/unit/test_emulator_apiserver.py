"""The kube-apiserver stand-in: the Node API, its patch semantics and its authentication."""

import base64
import json
import ssl
import tempfile
import urllib.request
import uuid

import pytest
import yaml

from tests.emulator import constants as C


@pytest.fixture
def kube(fresh_emulator):
    """A caller allowed on aks-one's apiserver (RBAC Cluster Admin, propagation immediate)."""
    fresh_emulator.settings(rbac_propagation_delay=0)
    status, _, body = fresh_emulator.arm_call(
        "PUT", f"{C.CLUSTER_ID}/providers/Microsoft.Authorization/roleAssignments/{uuid.uuid4()}", "2022-04-01",
        {"properties": {"roleDefinitionId": f"/providers/Microsoft.Authorization/roleDefinitions/"
                                            f"{C.ROLE_AKS_RBAC_CLUSTER_ADMIN}",
                        "principalId": C.SP_OBJECT_ID, "principalType": "ServicePrincipal"}})
    assert status == 201, body
    token = fresh_emulator.mint_token(C.SP_OBJECT_ID)

    def call(method, path, body=None, content_type="application/json"):
        return fresh_emulator.http(method, f"{fresh_emulator.apiserver}{path}", body,
                                   {"Authorization": f"Bearer {token}", "Content-Type": content_type})
    return call


def node(name, labels=None, taints=None):
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"},
                                      {"type": "MemoryPressure", "status": "False"}]}}
    if taints:
        body["spec"]["taints"] = taints
    return body


def test_node_create_get_list_delete(fresh_emulator, kube):
    taint = {"key": "flex", "value": "true", "effect": "NoSchedule"}
    status, _, created = kube("POST", "/api/v1/nodes", node("n1", {"team": "edge"}, [taint]))
    assert status == 201 and created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert kube("POST", "/api/v1/nodes", node("n1"))[0] == 409
    status, _, got = kube("GET", "/api/v1/nodes/n1")
    assert got["metadata"]["labels"] == {"team": "edge"} and got["spec"]["taints"] == [taint]
    kube("POST", "/api/v1/nodes", node("n2", {"team": "core"}))
    _, _, listing = kube("GET", "/api/v1/nodes?labelSelector=team%3Dedge")
    assert [n["metadata"]["name"] for n in listing["items"]] == ["n1"]
    assert fresh_emulator.state()["nodes"][C.CLUSTER_NAME][0]["metadata"]["name"] == "n1"

    status, _, gone = kube("DELETE", "/api/v1/nodes/n1")
    assert status == 200 and gone["status"] == "Success"
    status, _, missing = kube("GET", "/api/v1/nodes/n1")
    assert status == 404 and missing["reason"] == "NotFound"
    assert kube("DELETE", "/api/v1/nodes/n1")[0] == 404


def test_status_patch_merges_conditions_by_type(kube):
    kube("POST", "/api/v1/nodes", node("n1"))
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    status, _, patched = kube("PATCH", "/api/v1/nodes/n1/status", {"status": {"conditions": [ready]}},
                              "application/strategic-merge-patch+json")
    assert status == 200
    conditions = {c["type"]: c["status"] for c in patched["status"]["conditions"]}
    assert conditions == {"Ready": "True", "MemoryPressure": "False"}
    # A merge patch replaces the list wholesale (RFC 7386).
    _, _, merged = kube("PATCH", "/api/v1/nodes/n1/status", {"status": {"conditions": [ready]}},
                        "application/merge-patch+json")
    assert [c["type"] for c in merged["status"]["conditions"]] == ["Ready"]
    # A status patch does not touch labels; a node patch does not touch status.
    _, _, relabelled = kube("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"x": "y"}}, "status": {}},
                            "application/merge-patch+json")
    assert relabelled["metadata"]["labels"] == {"x": "y"} and relabelled["status"]["conditions"]
    assert kube("PATCH", "/api/v1/nodes/n1/status", {}, "application/yaml")[0] == 415


def test_json_patch_and_invalid_names(kube):
    kube("POST", "/api/v1/nodes", node("n1"))
    status, _, patched = kube("PATCH", "/api/v1/nodes/n1",
                              [{"op": "add", "path": "/spec/unschedulable", "value": True}],
                              "application/json-patch+json")
    assert status == 200 and patched["spec"]["unschedulable"] is True
    status, _, body = kube("POST", "/api/v1/nodes", node("Not_A_Node"))
    assert status == 422 and "RFC 1123" in body["message"]


def test_unauthenticated_and_unknown_paths(fresh_emulator, kube):
    status, _, body = fresh_emulator.http("GET", f"{fresh_emulator.apiserver}/api/v1/nodes")
    assert status == 401 and body["reason"] == "Unauthorized"
    assert kube("GET", "/api/v1/secrets")[0] == 404  # not served: 404, as for any unknown resource
    assert kube("GET", "/apis/apps/v1/deployments")[0] == 404
    status, _, text = fresh_emulator.http("GET", f"{fresh_emulator.apiserver}/readyz")
    assert status == 200 and text == "ok"


def test_admin_kubeconfig_credentials_work_without_any_role(fresh_emulator):
    status, _, creds = fresh_emulator.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01")
    assert status == 200
    user = yaml.safe_load(base64.b64decode(creds["kubeconfigs"][0]["value"]))["users"][0]["user"]
    # The static token...
    status, _, _ = fresh_emulator.http("GET", f"{fresh_emulator.apiserver}/api/v1/nodes",
                                       headers={"Authorization": f"Bearer {user['token']}"})
    assert status == 200
    # ...and the client certificate (O=system:masters).
    with tempfile.NamedTemporaryFile("wb") as cert, tempfile.NamedTemporaryFile("wb") as key:
        cert.write(base64.b64decode(user["client-certificate-data"]))
        key.write(base64.b64decode(user["client-key-data"]))
        cert.flush()
        key.flush()
        ctx = ssl.create_default_context(cafile=fresh_emulator.ca_bundle)
        ctx.load_cert_chain(cert.name, key.name)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
        with opener.open(f"{fresh_emulator.apiserver}/api/v1/nodes", timeout=10) as resp:
            assert resp.status == 200 and json.loads(resp.read())["kind"] == "NodeList"


def test_clusters_have_separate_node_lists(fresh_emulator, kube):
    kube("POST", "/api/v1/nodes", node("only-on-one"))
    fresh_emulator.arm_call(
        "PUT", f"{C.CLUSTER2_ID}/providers/Microsoft.Authorization/roleAssignments/{uuid.uuid4()}", "2022-04-01",
        {"properties": {"roleDefinitionId": f"/providers/Microsoft.Authorization/roleDefinitions/"
                                            f"{C.ROLE_AKS_RBAC_CLUSTER_ADMIN}",
                        "principalId": C.SP_OBJECT_ID, "principalType": "ServicePrincipal"}})
    token = fresh_emulator.mint_token(C.SP_OBJECT_ID)
    status, _, listing = fresh_emulator.http("GET", f"{fresh_emulator.apiservers[C.CLUSTER2_ID]}/api/v1/nodes",
                                             headers={"Authorization": f"Bearer {token}"})
    assert status == 200 and listing["items"] == []
    nodes = fresh_emulator.state()["nodes"]
    assert [n["metadata"]["name"] for n in nodes[C.CLUSTER_NAME]] == ["only-on-one"]
    assert nodes[C.CLUSTER2_NAME] == []
