"""The emulator's agent pools (tests/emulator/agentpools.py) over plain HTTPS: FlexNodes
bootstrap data and the token it mints, Machines and their operations, deleteMachines, and the
node SP confined by the Flex Node Agent Role to its pool."""

import base64
import json
import re
import time
import urllib.parse
import uuid

import pytest

from tests.emulator import constants as C

API = C.AGENTPOOL_API
POOL = C.FLEX_POOL_ID
SYSTEM_POOL = f"{C.CLUSTER_ID}/agentPools/{C.SYSTEM_POOL}"
TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
SPEC = {"properties": {"kubernetes": {"orchestratorVersion": C.K8S_VERSION, "maxPods": 110,
                                      "nodeLabels": {"team": "edge"}, "nodeTaints": ["edge=true:NoSchedule"]}}}


@pytest.fixture
def node_token(fresh_emulator):
    return fresh_emulator.arm_token(C.NODE_SP_CLIENT_ID, C.NODE_SP_CLIENT_SECRET)


def bootstrap(emu, token=None, pool=POOL, body=None, api=API):
    return emu.arm_call("POST", f"{pool}/listBootstrapData", api, {} if body is None else body, token=token)


def put_machine(emu, name, token=None, spec=SPEC, pool=POOL, headers=None):
    if headers is None:
        return emu.arm_call("PUT", f"{pool}/machines/{name}", API, spec, token=token)
    return emu.http("PUT", f"{emu.arm}{pool}/machines/{name}?api-version={API}", spec,
                    {"Authorization": f"Bearer {token or emu.arm_token()}", **headers})


def operation(emu, url, token):
    """The operation's status body, as one poll of a client sees it."""
    status, _, body = emu.http("GET", url, headers={"Authorization": f"Bearer {token}"})
    assert status == 200, body
    return body


def saved_state(emu):
    return json.loads((emu.state_dir / "state.json").read_text())


def admin_kube(emu):
    """Call aks-one's kube-apiserver stand-in as the cluster admin (listClusterAdminCredential)."""
    _, _, creds = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01")
    kubeconfig = base64.b64decode(creds["kubeconfigs"][0]["value"]).decode()
    token = re.search(r"^\s+token: (\S+)$", kubeconfig, re.M).group(1)
    return lambda method, path, body=None: emu.http(method, f"{emu.apiserver}{path}", body,
                                                    {"Authorization": f"Bearer {token}"})


# -- listBootstrapData --------------------------------------------------------------------


def test_node_sp_gets_bootstrap_data_and_a_fresh_token(fresh_emulator, node_token):
    fresh_emulator.settings(bootstrap_token_ttl=600)
    before = time.time()
    status, _, data = bootstrap(fresh_emulator, node_token)
    assert status == 200, data
    token = data["azure"]["bootstrapToken"]["token"]
    assert TOKEN.match(token)
    assert data["azure"]["resourceManagerEndpoint"] == fresh_emulator.arm + "/"
    assert data["components"]["kubernetes"] == C.K8S_VERSION
    _, _, cluster = fresh_emulator.arm_call("GET", C.CLUSTER_ID, "2026-08-01")
    assert data["networking"]["dnsServiceIP"] == cluster["properties"]["networkProfile"]["dnsServiceIP"]
    assert data["node"]["maxPods"] == 110 and data["node"]["labels"] == {"node-role": "edge"}
    assert data["node"]["taints"] == ["aks.azure.com/flex-node=true:NoSchedule"]
    kubelet = data["node"]["kubelet"]
    assert kubelet["clusterFQDN"] == urllib.parse.urlsplit(fresh_emulator.apiserver).netloc  # 127.0.0.1:<port>
    with open(fresh_emulator.ca_bundle, "rb") as f:
        assert base64.b64decode(kubelet["caCertData"]) == f.read()

    token_id, secret = token.split(".")
    record = saved_state(fresh_emulator)["bootstrap_tokens"][C.CLUSTER_ID.lower()][token_id]
    assert record["token_secret"] == secret and record["pool"] == C.FLEX_POOL
    assert record["minted_by"] == C.NODE_SP_OBJECT_ID
    assert record["auth_extra_groups"] == ["system:bootstrappers:aks-flex-node"]
    assert record["usage_bootstrap_authentication"] is record["usage_bootstrap_signing"] is True
    assert before + 600 <= record["expiration"] <= time.time() + 600

    _, _, again = bootstrap(fresh_emulator, node_token)
    assert again["azure"]["bootstrapToken"]["token"] != token  # one token per call
    assert len(fresh_emulator.state()["bootstrap_tokens"][C.CLUSTER_ID.lower()]) == 2


def test_the_token_stays_out_of_the_log_and_the_admin_view(fresh_emulator, node_token):
    _, _, data = bootstrap(fresh_emulator, node_token)
    token = data["azure"]["bootstrapToken"]["token"]
    secret = token.split(".")[1]
    state = fresh_emulator.state()
    assert secret not in json.dumps(state)  # request log included
    assert [t["token_id"] for t in state["bootstrap_tokens"][C.CLUSTER_ID.lower()]] == [token.split(".")[0]]
    assert secret not in (fresh_emulator.state_dir / "emulator.log").read_text()
    assert (fresh_emulator.state_dir / "state.json").stat().st_mode & 0o077 == 0


def test_fqdn_mode_answers_the_cluster_host_name(fresh_emulator, node_token):
    fresh_emulator.settings(apiserver_fqdn_mode="fqdn")
    _, _, data = bootstrap(fresh_emulator, node_token)
    _, _, cluster = fresh_emulator.arm_call("GET", C.CLUSTER_ID, "2026-08-01")
    assert data["node"]["kubelet"]["clusterFQDN"] == cluster["properties"]["fqdn"]
    assert ":" not in cluster["properties"]["fqdn"]


def test_bootstrap_data_refusals(fresh_emulator, node_token):
    emu = fresh_emulator
    status, headers, body = emu.http("POST", f"{emu.arm}{POOL}/listBootstrapData?api-version={API}", {})
    assert status == 401 and body["error"]["code"] == "AuthenticationFailed" and headers["WWW-Authenticate"]
    status, _, body = emu.http("POST", f"{emu.arm}{POOL}/listBootstrapData?api-version={API}",
                               headers={"Authorization": f"Bearer {node_token}"})
    assert status == 400 and body["error"]["code"] == "InvalidRequestContent"  # the {} body is required
    status, _, body = bootstrap(emu, node_token, body=[])
    assert status == 400 and body["error"]["code"] == "InvalidRequestContent"
    status, _, body = bootstrap(emu, node_token, api="2026-08-01")  # stable: no listBootstrapData
    assert status == 400 and body["error"]["code"] == "InvalidResourceType"
    assert "2026-05-02-preview" in body["error"]["message"]
    status, _, body = bootstrap(emu, pool=f"{C.CLUSTER_ID}/agentPools/nopool")  # Owner: past authorization
    assert status == 404 and body["error"]["code"] == "ResourceNotFound" and "nopool" in body["error"]["message"]
    status, _, body = bootstrap(emu, pool=f"{C.CLUSTER_ID[:-3]}nope/agentPools/{C.FLEX_POOL}")
    assert status == 404 and "managedClusters/aks-nope" in body["error"]["message"]
    status, _, body = bootstrap(emu, pool=SYSTEM_POOL)
    assert status == 400 and body["error"]["code"] == "OperationNotAllowed" and "FlexNodes" in body["error"]["message"]
    assert emu.state()["bootstrap_tokens"] == {}  # no refusal minted anything


def test_bootstrap_data_is_throttled_as_a_write(fresh_emulator, node_token):
    fresh_emulator.settings(arm_writes_bucket=1, arm_writes_refill=0.5)
    assert bootstrap(fresh_emulator, node_token)[0] == 200
    status, headers, body = bootstrap(fresh_emulator, node_token)
    assert status == 429 and int(headers["Retry-After"]) >= 1
    assert body["error"]["code"] == "SubscriptionRequestsThrottled"
    assert fresh_emulator.state()["agent_pools"]  # the world is intact
    assert len(fresh_emulator.state()["bootstrap_tokens"][C.CLUSTER_ID.lower()]) == 1


# -- the node SP's reach ------------------------------------------------------------------


def test_node_sp_is_confined_to_its_pool(fresh_emulator, node_token):
    emu = fresh_emulator
    other = emu.add_agent_pool(cluster_id=C.CLUSTER_ID, name="otherflex")["id"]
    assert bootstrap(emu)[0] == 200 and bootstrap(emu, pool=other)[0] == 200  # Owner may

    assert put_machine(emu, "edge1", node_token)[0] == 201
    assert emu.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)[0] == 200
    assert emu.arm_call("GET", f"{POOL}/machines", API, token=node_token)[0] == 200
    denied = [
        ("POST", f"{other}/listBootstrapData", {}, "agentPools/listBootstrapData/action"),
        ("POST", f"{SYSTEM_POOL}/listBootstrapData", {}, "agentPools/listBootstrapData/action"),
        ("PUT", f"{other}/machines/edge1", SPEC, "agentPools/machines/write"),
        ("GET", f"{other}/machines", None, "agentPools/machines/read"),
        ("GET", POOL, None, "agentPools/read"),
        ("POST", f"{POOL}/deleteMachines", {"machineNames": ["edge1"]}, "agentPools/deleteMachines/action"),
        ("GET", C.CLUSTER_ID, None, "read"),
        ("POST", f"{C.CLUSTER_ID}/listClusterUserCredential", None, "listClusterUserCredential/action"),
    ]
    for method, path, body, action in denied:
        status, _, answer = emu.arm_call(method, path, API, body, token=node_token)
        assert status == 403 and answer["error"]["code"] == "AuthorizationFailed", (method, path, answer)
        assert f"'Microsoft.ContainerService/managedClusters/{action}'" in answer["error"]["message"]


def test_flex_node_agent_role_is_the_documented_one(fresh_emulator):
    status, _, role = fresh_emulator.arm_call(
        "GET", f"{POOL}/providers/Microsoft.Authorization/roleDefinitions/{C.ROLE_AKS_FLEX_NODE_AGENT}", "2022-04-01")
    assert status == 200
    assert role["properties"]["permissions"] == [{
        "actions": ["Microsoft.ContainerService/managedClusters/agentPools/listBootstrapData/action",
                    "Microsoft.ContainerService/managedClusters/agentPools/machines/read",
                    "Microsoft.ContainerService/managedClusters/agentPools/machines/write"],
        "notActions": [], "dataActions": [], "notDataActions": []}]
    assigned = [a for a in fresh_emulator.state()["role_assignments"] if a["principal_id"] == C.NODE_SP_OBJECT_ID]
    assert [(a["scope"], a["role_guid"]) for a in assigned] == [(POOL, C.ROLE_AKS_FLEX_NODE_AGENT)]


def test_node_sp_has_no_kubernetes_access(fresh_emulator):
    fresh_emulator.settings(rbac_propagation_delay=0)
    token = fresh_emulator.mint_token(C.NODE_SP_OBJECT_ID)
    status, _, _ = fresh_emulator.http("GET", f"{fresh_emulator.apiserver}/api/v1/nodes",
                                       headers={"Authorization": f"Bearer {token}"})
    assert status == 403


# -- agent pools --------------------------------------------------------------------------


def test_agent_pools_get_and_404(fresh_emulator):
    status, _, flex = fresh_emulator.arm_call("GET", POOL, API)
    assert status == 200 and flex["properties"]["type"] == "FlexNodes" and flex["properties"]["mode"] == "User"
    assert "count" not in flex["properties"] and flex["properties"]["eTag"]
    status, _, vmss = fresh_emulator.arm_call("GET", SYSTEM_POOL, "2026-08-01")  # any api-version reads
    assert status == 200 and vmss["properties"]["type"] == "VirtualMachineScaleSets"
    status, _, body = fresh_emulator.arm_call("GET", f"{C.CLUSTER_ID}/agentPools/nopool", API)
    assert status == 404 and body["error"]["code"] == "ResourceNotFound"
    status, _, body = fresh_emulator.arm_call("DELETE", POOL, API)
    assert status == 405


# -- Machines -----------------------------------------------------------------------------


# Ten minutes of the emulator's clock: an operation stays in progress, however slow this
# machine is, until the test moves the clock past it (tests/emulator/clock.py).
OPERATION_DELAY = 600


def finish_operations(emu):
    emu.advance_clock(OPERATION_DELAY)


def test_machine_put_is_a_long_running_operation(fresh_emulator, node_token):
    fresh_emulator.settings(machine_operation_delay=OPERATION_DELAY)
    status, headers, created = put_machine(fresh_emulator, "edge1", node_token)
    assert status == 201 and created["properties"]["provisioningState"] == "Creating"
    assert created["properties"]["kubernetes"]["nodeName"] == "edge1"
    assert "Location" not in headers
    url = headers["Azure-AsyncOperation"]
    _, _, first = fresh_emulator.http("GET", url, headers={"Authorization": f"Bearer {node_token}"})
    assert first["status"] == "InProgress"
    finish_operations(fresh_emulator)
    assert operation(fresh_emulator, url, node_token)["status"] == "Succeeded"
    _, _, got = fresh_emulator.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)
    assert got["properties"]["provisioningState"] == "Succeeded"
    assert got["properties"]["kubernetes"]["nodeLabels"] == {"team": "edge"}

    status, headers, updated = put_machine(fresh_emulator, "edge1", node_token)
    assert status == 200 and updated["properties"]["provisioningState"] == "Updating"
    assert operation(fresh_emulator, headers["Azure-AsyncOperation"], node_token)["status"] == "InProgress"
    finish_operations(fresh_emulator)
    assert operation(fresh_emulator, headers["Azure-AsyncOperation"], node_token)["status"] == "Succeeded"
    # Besides its starter, only a caller with agentPools/read may poll it (Reader has */read).
    reader = fresh_emulator.arm_token(C.READER_SP_CLIENT_ID, C.READER_SP_CLIENT_SECRET)
    stranger = fresh_emulator.mint_token(str(uuid.uuid4()), audience=C.ARM_AUDIENCE)
    for token, expected in ((reader, 200), (stranger, 403)):
        status, _, _ = fresh_emulator.http("GET", headers["Azure-AsyncOperation"],
                                           headers={"Authorization": f"Bearer {token}"})
        assert status == expected


def test_machine_etag_changes_only_with_the_spec(fresh_emulator, node_token):
    fresh_emulator.settings(machine_operation_delay=0)
    etag = put_machine(fresh_emulator, "edge1", node_token)[2]["properties"]["eTag"]
    readonly = {"properties": {**SPEC["properties"], "provisioningState": "Succeeded", "eTag": "x",
                               "status": {"driftAction": "Synced"}}}
    assert put_machine(fresh_emulator, "edge1", node_token, spec=readonly)[2]["properties"]["eTag"] == etag
    changed = {"properties": {"kubernetes": {**SPEC["properties"]["kubernetes"], "maxPods": 50}}}
    new_etag = put_machine(fresh_emulator, "edge1", node_token, spec=changed)[2]["properties"]["eTag"]
    assert new_etag != etag
    _, _, got = fresh_emulator.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)
    assert got["properties"]["eTag"] == new_etag and got["properties"]["kubernetes"]["maxPods"] == 50

    status, _, body = put_machine(fresh_emulator, "edge1", node_token, headers={"If-Match": f'"{etag}"'})
    assert status == 412 and body["error"]["code"] == "PreconditionFailed"
    assert put_machine(fresh_emulator, "edge1", node_token, headers={"If-None-Match": "*"})[0] == 412
    assert put_machine(fresh_emulator, "edge1", node_token, headers={"If-Match": new_etag})[0] == 200
    assert put_machine(fresh_emulator, "edge2", node_token, headers={"If-None-Match": "*"})[0] == 201


def test_machine_put_refusals(fresh_emulator, node_token):
    emu = fresh_emulator
    for name in ("-lead", "a" * 41, "dot.ted"):
        status, _, body = put_machine(emu, name, node_token)
        assert status == 400 and body["error"]["code"] == "InvalidParameter"
        assert "machineName" in body["error"]["message"]
    assert put_machine(emu, "Upper_Case-1", node_token)[0] == 201  # the spec's second pattern
    bad = {"properties": {"kubernetes": {"orchestratorVersion": "v1.30", "maxPods": "110",
                                         "nodeLabels": {"a": 1}, "nodeTaints": ["novalue"]}}}
    status, _, body = put_machine(emu, "edge1", node_token, spec=bad)
    message = body["error"]["message"]
    assert status == 400 and all(k in message for k in ("orchestratorVersion", "maxPods", "nodeLabels", "nodeTaints"))
    status, _, body = emu.arm_call("PUT", f"{POOL}/machines/edge1", "2026-08-01", SPEC, token=node_token)
    assert status == 400 and body["error"]["code"] == "InvalidResourceType"
    status, _, body = put_machine(emu, "edge1", pool=SYSTEM_POOL)
    assert status == 400 and body["error"]["code"] == "OperationNotAllowed"
    assert emu.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)[0] == 404  # nothing created


def test_machine_list_pages(fresh_emulator, node_token):
    fresh_emulator.settings(page_size=2, machine_operation_delay=0)
    for name in ("m3", "m1", "m2"):
        put_machine(fresh_emulator, name, node_token)
    _, _, page = fresh_emulator.arm_call("GET", f"{POOL}/machines", API, token=node_token)
    assert [m["name"] for m in page["value"]] == ["m1", "m2"]
    _, _, rest = fresh_emulator.http("GET", page["nextLink"], headers={"Authorization": f"Bearer {node_token}"})
    assert [m["name"] for m in rest["value"]] == ["m3"] and "nextLink" not in rest
    _, _, empty = fresh_emulator.arm_call("GET", f"{SYSTEM_POOL}/machines", API)
    assert empty == {"value": []}


# -- deleteMachines -----------------------------------------------------------------------


def test_delete_machines_taints_the_node_then_deletes_the_machine_only(fresh_emulator, node_token):
    """The Node stays for the agent (upstream docs/design/agent-and-aks.md, "Reset And Delete
    Flow"); the RP's fallback for stale Nodes is tests/unit/test_emulator_pool_operations.py's."""
    emu = fresh_emulator
    emu.settings(stale_node_grace=10 * OPERATION_DELAY)  # no fallback within this test
    kube = admin_kube(emu)
    for name in ("edge1", "edge2"):
        assert kube("POST", "/api/v1/nodes", {"metadata": {"name": name}, "spec": {}})[0] == 201
        assert put_machine(emu, name, node_token)[0] == 201
    emu.settings(machine_operation_delay=OPERATION_DELAY)
    status, headers, _ = emu.arm_call("POST", f"{POOL}/deleteMachines", API, {"machineNames": ["edge1"]})
    assert status == 202 and headers["Location"] and headers["Azure-AsyncOperation"]

    taint = {"key": "kubernetes.azure.com/flex-node-deleting", "value": "true", "effect": "NoSchedule"}
    _, _, node = kube("GET", "/api/v1/nodes/edge1")
    assert taint in node["spec"]["taints"] and node["spec"]["unschedulable"] is True
    _, _, machine = emu.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)
    assert machine["properties"]["provisioningState"] == "Deleting"  # tainted, Machine still there
    owner = emu.arm_token()
    assert emu.http("GET", headers["Location"], headers={"Authorization": f"Bearer {owner}"})[0] == 202

    finish_operations(emu)
    assert operation(emu, headers["Azure-AsyncOperation"], owner)["status"] == "Succeeded"
    assert emu.http("GET", headers["Location"], headers={"Authorization": f"Bearer {owner}"})[0] == 204
    assert emu.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)[0] == 404
    _, _, node = kube("GET", "/api/v1/nodes/edge1")  # the agent's to delete, still marked
    assert taint in node["spec"]["taints"] and node["spec"]["unschedulable"] is True
    assert kube("GET", "/api/v1/nodes/edge2")[2].get("spec", {}).get("taints") is None  # the other one untouched
    assert [m["name"] for m in emu.arm_call("GET", f"{POOL}/machines", API, token=node_token)[2]["value"]] == ["edge2"]


def test_delete_machines_refusals(fresh_emulator, node_token):
    emu = fresh_emulator
    put_machine(emu, "edge1", node_token)
    for body in ({}, {"machineNames": []}, {"machineNames": "edge1"}, {"machineNames": [""]}):
        status, _, answer = emu.arm_call("POST", f"{POOL}/deleteMachines", API, body)
        assert status == 400 and answer["error"]["code"] == "InvalidParameter", body
    status, _, answer = emu.arm_call("POST", f"{POOL}/deleteMachines", API, {"machineNames": ["edge1", "ghost"]})
    assert status == 400 and "'ghost'" in answer["error"]["message"]
    _, _, machine = emu.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)
    assert machine["properties"]["provisioningState"] != "Deleting"  # all or nothing
    status, _, answer = emu.arm_call("POST", f"{POOL}/deleteMachines", "2026-08-01", {"machineNames": ["edge1"]})
    assert status == 400 and answer["error"]["code"] == "InvalidResourceType"
    status, _, answer = emu.http("GET", f"{emu.arm}{POOL}/operations/{uuid.uuid4()}?api-version={API}",
                                 headers={"Authorization": f"Bearer {node_token}"})
    assert status == 404 and answer["error"]["code"] == "OperationNotFound"


# -- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize("changes,expected", [
    ({"bootstrap_token_ttl": -1}, "bootstrap_token_ttl = -1: expected a non-negative number"),
    ({"csr_auto_approve": "yes"}, "csr_auto_approve = 'yes': expected true or false"),
    ({"machine_operation_delay": "0.5"}, "machine_operation_delay = '0.5': expected a non-negative number"),
    ({"apiserver_fqdn_mode": "ip"}, "apiserver_fqdn_mode = 'ip': expected one of 'host-port', 'fqdn'"),
])
def test_agent_pool_settings_are_validated(fresh_emulator, changes, expected):
    status, _, body = fresh_emulator.http("POST", f"{fresh_emulator.admin_url}/settings", changes)
    assert status == 400 and expected in body["error"]


def test_agent_pool_settings_defaults(fresh_emulator):
    settings = fresh_emulator.state()["settings"]
    assert settings["bootstrap_token_ttl"] == 86400.0 and settings["csr_signing_duration"] == 31536000.0
    assert settings["csr_auto_approve"] is True and settings["machine_operation_delay"] == 0.5
    assert settings["apiserver_fqdn_mode"] == "host-port"
    assert fresh_emulator.settings(csr_auto_approve=False)["csr_auto_approve"] is False
