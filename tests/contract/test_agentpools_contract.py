"""The emulator's agent-pool answers (FlexNodes pools, listBootstrapData, Machines) against the
preview spec 2026-05-02-preview, strictly (tests/contract/swagger.py: an undeclared property
fails), and the spec's example requests replayed against the emulator's flex pool.

Spec: Azure/azure-rest-api-specs specification/containerservice/resource-manager/
Microsoft.ContainerService/aks/preview/2026-05-02-preview/managedClusters.json (+ examples/).
"""

import base64
import time

import pytest

from tests.contract import swagger
from tests.emulator import constants as C

AKS_PREVIEW = "containerservice/resource-manager/Microsoft.ContainerService/aks/preview/2026-05-02-preview/"
SPEC = AKS_PREVIEW + "managedClusters.json"
API = C.AGENTPOOL_API
POOL = C.FLEX_POOL_ID


def op(operation_id):
    return swagger.Operation(SPEC, operation_id)


def example(name):
    return swagger.example(f"{AKS_PREVIEW}examples/{name}")


@pytest.fixture
def node_token(fresh_emulator):
    return fresh_emulator.arm_token(C.NODE_SP_CLIENT_ID, C.NODE_SP_CLIENT_SECRET)


def wait_for(emu, url, token, timeout=5.0):
    deadline = time.time() + timeout
    while True:
        status, _, body = emu.http("GET", url, headers={"Authorization": f"Bearer {token}"})
        if status != 200 or body["status"] != "InProgress" or time.time() > deadline:
            return status, body
        time.sleep(0.05)


def test_list_bootstrap_data_example_replays_and_matches_the_schema(fresh_emulator, node_token):
    ex = example("AgentPoolsListBootstrapData.json")
    assert ex["parameters"]["api-version"] == API
    status, _, body = fresh_emulator.arm_call("POST", f"{POOL}/listBootstrapData", API,
                                              ex["parameters"]["body"], token=node_token)
    assert status == 200 and op("AgentPools_ListBootstrapData").check(status, body) == []
    wanted = ex["responses"]["200"]["body"]
    for section in wanted:  # every field of the example, section by section (no more, no less)
        assert set(body[section]) == set(wanted[section]), section
    assert set(body["node"]["kubelet"]) == set(wanted["node"]["kubelet"])
    assert body["azure"]["targetAgentPoolName"] == C.FLEX_POOL
    assert body["azure"]["targetCluster"]["resourceId"] == C.CLUSTER_ID
    assert base64.b64decode(body["node"]["kubelet"]["caCertData"]).startswith(b"-----BEGIN CERTIFICATE-----")


@pytest.mark.parametrize("pool,kind", [(C.FLEX_POOL, "FlexNodes"), (C.SYSTEM_POOL, "VirtualMachineScaleSets")])
def test_agent_pool_get_matches_the_schema(fresh_emulator, pool, kind):
    status, _, body = fresh_emulator.arm_call("GET", f"{C.CLUSTER_ID}/agentPools/{pool}", API)
    assert status == 200 and op("AgentPools_Get").check(status, body) == []
    assert body["name"] == pool and body["properties"]["type"] == kind

    status, _, listing = fresh_emulator.arm_call("GET", f"{C.CLUSTER_ID}/agentPools", API)
    assert op("AgentPools_List").check(status, listing) == []
    assert sorted(p["name"] for p in listing["value"]) == sorted([C.FLEX_POOL, C.SYSTEM_POOL])


def test_cluster_lists_the_pools_in_agent_pool_profiles(fresh_emulator):
    status, _, cluster = fresh_emulator.arm_call("GET", C.CLUSTER_ID, API)
    assert op("ManagedClusters_Get").check(status, cluster) == []
    profiles = {p["name"]: p["type"] for p in cluster["properties"]["agentPoolProfiles"]}
    assert profiles == {C.SYSTEM_POOL: "VirtualMachineScaleSets", C.FLEX_POOL: "FlexNodes"}


def test_machine_example_requests_replay(fresh_emulator, node_token):
    ex = example("MachineCreate_Update.json")
    put = op("Machines_CreateOrUpdate")
    name = ex["parameters"]["machineName"]
    status, headers, created = fresh_emulator.arm_call("PUT", f"{POOL}/machines/{name}", API,
                                                       ex["parameters"]["parameters"], token=node_token)
    assert status == 201 and put.check(status, created) == []
    assert put.op["x-ms-long-running-operation"] is True and headers["Azure-AsyncOperation"]
    wanted = ex["responses"]["201"]["body"]
    assert set(wanted) - {"zones"} <= set(created)  # zones: the example's VM; a FlexNodes machine has none
    assert set(wanted["properties"]) - {"nodeImageVersion"} <= set(created["properties"])
    assert set(wanted["properties"]["kubernetes"]) <= set(created["properties"]["kubernetes"])
    assert created["properties"]["kubernetes"]["currentOrchestratorVersion"] == C.K8S_VERSION  # "1.30" resolved

    status, poll = wait_for(fresh_emulator, headers["Azure-AsyncOperation"], node_token)
    assert op("OperationStatusResult_GetByAgentPool").check(status, poll) == []
    assert poll["status"] == "Succeeded"

    status, _, again = fresh_emulator.arm_call("PUT", f"{POOL}/machines/{name}", API,
                                               ex["parameters"]["parameters"], token=node_token)
    assert status == 200 and put.check(status, again) == []
    status, _, got = fresh_emulator.arm_call("GET", f"{POOL}/machines/{name}", API, token=node_token)
    assert op("Machines_Get").check(status, got) == []


def test_machine_list_is_paged_per_the_schema(fresh_emulator, node_token):
    fresh_emulator.settings(page_size=1)
    for name in ("m1", "m2"):
        status, _, _ = fresh_emulator.arm_call("PUT", f"{POOL}/machines/{name}", API,
                                               {"properties": {"kubernetes": {"orchestratorVersion": C.K8S_VERSION}}},
                                               token=node_token)
        assert status == 201
    listing_op = op("Machines_List")
    status, _, page = fresh_emulator.arm_call("GET", f"{POOL}/machines", API, token=node_token)
    assert listing_op.check(status, page) == [] and [m["name"] for m in page["value"]] == ["m1"]
    assert set(example("MachineList.json")["responses"]["200"]["body"]) == set(page)  # value + nextLink
    status, _, last = fresh_emulator.http("GET", page["nextLink"], headers={"Authorization": f"Bearer {node_token}"})
    assert listing_op.check(status, last) == [] and [m["name"] for m in last["value"]] == ["m2"]
    assert "nextLink" not in last


def test_delete_machines_is_a_202_long_running_operation(fresh_emulator, node_token):
    fresh_emulator.arm_call("PUT", f"{POOL}/machines/gone", API, {"properties": {}}, token=node_token)
    delete = op("AgentPools_DeleteMachines")
    status, headers, body = fresh_emulator.arm_call("POST", f"{POOL}/deleteMachines", API, {"machineNames": ["gone"]})
    assert status == 202 and delete.check(status, body) == [] and body == b""
    assert set(delete.op["responses"]["202"]["headers"]) >= {"Azure-AsyncOperation", "Location"}
    assert headers["Azure-AsyncOperation"] and headers["Location"]
    status, poll = wait_for(fresh_emulator, headers["Azure-AsyncOperation"], fresh_emulator.arm_token())
    assert op("OperationStatusResult_GetByAgentPool").check(status, poll) == [] and poll["status"] == "Succeeded"


def test_a_drifted_machine_and_a_failed_operation_match_the_schema(fresh_emulator, node_token):
    """currentOrchestratorVersion from the Node, driftAction Recreate with a driftReason, and a
    Failed OperationStatusResult with its error (a deleteMachines whose drain a budget blocks)."""
    emu = fresh_emulator
    emu.settings(machine_operation_delay=0, pool_drain_timeout=10)
    emu.arm_call("PUT", f"{POOL}/machines/edge1", API,
                 {"properties": {"kubernetes": {"orchestratorVersion": C.K8S_VERSION}}}, token=node_token)
    _, _, creds = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01")
    kubeconfig = base64.b64decode(creds["kubeconfigs"][0]["value"]).decode()
    token = next(line.split()[1] for line in kubeconfig.splitlines() if line.strip().startswith("token:"))
    status, _, _ = emu.http("POST", f"{emu.apiserver}/api/v1/nodes", {
        "metadata": {"name": "edge1"}, "status": {"nodeInfo": {"kubeletVersion": "v1.29.9"}}},
        {"Authorization": f"Bearer {token}"})
    assert status == 201
    status, _, got = emu.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)
    assert op("Machines_Get").check(status, got) == []
    assert got["properties"]["kubernetes"]["currentOrchestratorVersion"] == "1.29.9"
    assert got["properties"]["status"]["driftAction"] == "Recreate" and got["properties"]["status"]["driftReason"]

    for kind, obj in (("Pod", {"metadata": {"name": "db", "labels": {"app": "db"}}, "spec": {"nodeName": "edge1"}}),
                      ("PodDisruptionBudget", {"metadata": {"name": "db"},
                                               "spec": {"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1}})):
        emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": {"kind": kind, **obj}})
    _, headers, _ = emu.arm_call("POST", f"{POOL}/deleteMachines", API, {"machineNames": ["edge1"]})
    emu.advance_clock(11)
    status, poll = wait_for(emu, headers["Azure-AsyncOperation"], emu.arm_token())
    assert op("OperationStatusResult_GetByAgentPool").check(status, poll) == []
    assert poll["status"] == "Failed" and poll["error"]["code"] == "DrainTimeout"


def test_errors_are_arm_error_responses(fresh_emulator, node_token):
    cases = [
        ("AgentPools_Get", "GET", f"{C.CLUSTER_ID}/agentPools/nopool", None, None, 404),
        ("AgentPools_Get", "GET", POOL, None, node_token, 403),
        ("AgentPools_ListBootstrapData", "POST", f"{C.CLUSTER_ID}/agentPools/{C.SYSTEM_POOL}/listBootstrapData",
         {}, None, 400),
        ("AgentPools_ListBootstrapData", "POST", f"{POOL}/listBootstrapData", None, node_token, 400),
        ("Machines_Get", "GET", f"{POOL}/machines/nope", None, node_token, 404),
        ("Machines_CreateOrUpdate", "PUT", f"{POOL}/machines/bad.name", {"properties": {}}, node_token, 400),
        ("AgentPools_DeleteMachines", "POST", f"{POOL}/deleteMachines", {"machineNames": ["nope"]}, None, 400),
    ]
    for operation_id, method, path, body, token, expected in cases:
        status, _, answer = fresh_emulator.arm_call(method, path, API, body, token=token)
        assert status == expected, (operation_id, answer)
        assert op(operation_id).check(status, answer) == [], operation_id


def test_validator_catches_a_misspelt_bootstrap_field():
    good = example("AgentPoolsListBootstrapData.json")["responses"]["200"]["body"]
    check = op("AgentPools_ListBootstrapData").check
    assert check(200, good) == []
    bad = {**good, "node": {**good["node"], "kubelet": {"clusterFqdn": "x", "caCertData": "y"}}}
    assert any("clusterFqdn" in p for p in check(200, bad))
