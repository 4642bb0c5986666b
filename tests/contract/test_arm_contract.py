"""The emulator's ARM answers against the official Azure REST specs (status codes and bodies).

Each test drives the emulator over raw HTTPS (no SDK, so nothing forgives a wrong shape) and
checks the answer with the spec operation's declared statuses and response schema, strictly:
an undeclared property fails too. Specs: files of the public Azure/azure-rest-api-specs
repository, read from $AZURE_REST_SPECS (tests/contract/swagger.py; MANIFEST.json there lists
the commits).
"""

import base64
import uuid

import pytest

from tests.contract import swagger
from tests.contract.arm_specs import (AKS_2022, AKS_2026, AUTH_RA, AUTH_RD, EXAMPLES_RA, HC_2022, HC_2026, RG_PATH,
                                     ROLE_ID, machine_path)
from tests.emulator import constants as C


# (api-version the SDKs send, the stored spec that describes it). Debian's 8.0.0b1 sends
# 2022-08-11-preview; the closest stored spec is 2022-12-27 (MANIFEST.json note).
HYBRIDCOMPUTE = [("2026-07-15", HC_2026), ("2024-07-10", HC_2022), ("2022-08-11-preview", HC_2022)]
CONTAINERSERVICE = [("2026-08-01", AKS_2026), ("2022-11-01", AKS_2022)]


def put_machine(emu, name, api_version="2024-07-10"):
    status, _, body = emu.arm_call("PUT", machine_path(name), api_version,
                                   {"location": C.LOCATION, "identity": {"type": "SystemAssigned"},
                                    "tags": {"env": "test"}, "properties": {"osName": "linux"}})
    assert status == 200, body
    return body


def assign(emu, principal, role=C.ROLE_READER, scope=C.CLUSTER_ID, name=None):
    name = name or str(uuid.uuid4())
    return name, emu.arm_call("PUT", f"{scope}/providers/Microsoft.Authorization/roleAssignments/{name}", "2022-04-01",
                              {"properties": {"roleDefinitionId": ROLE_ID.format(role), "principalId": principal,
                                              "principalType": "ServicePrincipal"}})


@pytest.mark.parametrize("api_version,spec", HYBRIDCOMPUTE)
def test_machine_put_get_list_match_the_spec(fresh_emulator, api_version, spec):
    created = put_machine(fresh_emulator, "contract-m1", api_version)
    assert swagger.Operation(spec, "Machines_CreateOrUpdate").check(200, created) == []

    status, _, body = fresh_emulator.arm_call("GET", machine_path("contract-m1"), api_version)
    assert swagger.Operation(spec, "Machines_Get").check(status, body) == []
    assert body["identity"]["type"] == "SystemAssigned" and body["identity"]["principalId"]
    assert body["properties"]["status"] == "Connected"

    status, _, listing = fresh_emulator.arm_call("GET", f"{RG_PATH}/providers/Microsoft.HybridCompute/machines",
                                                 api_version)
    assert swagger.Operation(spec, "Machines_ListByResourceGroup").check(status, listing) == []
    assert [m["name"] for m in listing["value"]] == ["contract-m1"]


def test_machine_body_has_the_fields_of_the_spec_example(fresh_emulator):
    example = swagger.example("hybridcompute/resource-manager/Microsoft.HybridCompute/HybridCompute/stable/"
                              "2026-07-15/examples/machine/Machines_Get.json")["responses"]["200"]["body"]
    put_machine(fresh_emulator, "contract-m2")
    _, _, body = fresh_emulator.arm_call("GET", machine_path("contract-m2"), "2026-07-15")
    assert set(example) - {"kind"} <= set(body)  # kind is null in the example: absent here
    assert set(example["identity"]) == set(body["identity"])
    for key in ("provisioningState", "status", "agentVersion", "vmId", "osName", "agentConfiguration",
                "detectedProperties", "lastStatusChange"):
        assert key in body["properties"], key


@pytest.mark.parametrize("api_version,spec,expected", [
    ("2026-07-15", HC_2026, 202),  # hybridcompute 10.x begin_delete accepts only 202/204
    ("2024-07-10", HC_2022, 200),  # 9.x delete accepts only 200/204 (its generated delete)
    ("2022-08-11-preview", HC_2022, 200),
])
def test_machine_delete_status_codes_follow_the_api_version(fresh_emulator, api_version, spec, expected):
    op = swagger.Operation(spec, "Machines_Delete")
    put_machine(fresh_emulator, "contract-del")
    status, headers, body = fresh_emulator.arm_call("DELETE", machine_path("contract-del"), api_version)
    assert status == expected and str(status) in op.statuses
    if status == 202:
        assert op.op.get("x-ms-long-running-operation") is True
        poll = headers["Azure-AsyncOperation"]
        assert headers["Location"]
        st, _, op_status = fresh_emulator.http("GET", poll,
                                               headers={"Authorization": f"Bearer {fresh_emulator.arm_token()}"})
        result = swagger.resolve("#/definitions/OperationStatusResult",
                                 swagger.spec_path("common-types/resource-management/v5/types.json"))
        assert st == 200 and swagger.validate(result, op_status) == []
        assert op_status["status"] == "Succeeded"
    # Absent (now deleted): 204, the one code every SDK version accepts.
    status, _, _ = fresh_emulator.arm_call("DELETE", machine_path("contract-del"), api_version)
    assert status == 204 and "204" in op.statuses


@pytest.mark.parametrize("api_version,spec", HYBRIDCOMPUTE)
def test_machine_errors_are_arm_error_responses(fresh_emulator, api_version, spec):
    op = swagger.Operation(spec, "Machines_Get")
    status, _, body = fresh_emulator.arm_call("GET", machine_path("nope"), api_version)
    assert status == 404 and body["error"]["code"] == "ResourceNotFound"
    assert op.check(status, body) == []
    status, _, body = fresh_emulator.arm_call(
        "GET", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/rg-missing/providers/Microsoft.HybridCompute/"
               "machines/x", api_version)
    assert status == 404 and body["error"]["code"] == "ResourceGroupNotFound"
    assert "rg-missing" in body["error"]["message"]
    assert op.check(status, body) == []


def test_role_assignment_lifecycle_matches_the_spec(fresh_emulator):
    principal = put_machine(fresh_emulator, "contract-ra")["identity"]["principalId"]
    create = swagger.Operation(AUTH_RA, "RoleAssignments_Create")
    name, (status, _, body) = assign(fresh_emulator, principal)
    assert status == 201 and create.check(status, body) == []
    example = swagger.example(f"{EXAMPLES_RA}/RoleAssignments_CreateForResource.json")["responses"]["201"]["body"]
    assert set(example) <= set(body) and set(example["properties"]) <= set(body["properties"])
    assert body["properties"]["scope"] == C.CLUSTER_ID

    # The same name and properties again: 200, as the spec allows for an update.
    _, (status, _, again) = assign(fresh_emulator, principal, name=name)
    assert status == 200 and create.check(status, again) == []

    path = f"{C.CLUSTER_ID}/providers/Microsoft.Authorization/roleAssignments/{name}"
    status, _, got = fresh_emulator.arm_call("GET", path, "2022-04-01")
    assert swagger.Operation(AUTH_RA, "RoleAssignments_Get").check(status, got) == []

    status, _, listing = fresh_emulator.arm_call(
        "GET", f"{C.CLUSTER_ID}/providers/Microsoft.Authorization/roleAssignments?$filter=principalId%20eq%20'{principal}'",
        "2022-04-01")
    assert swagger.Operation(AUTH_RA, "RoleAssignments_ListForScope").check(status, listing) == []
    assert [a["name"] for a in listing["value"]] == [name]

    status, _, listing = fresh_emulator.arm_call(
        "GET", f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/Microsoft.Authorization/roleAssignments", "2022-04-01")
    assert swagger.Operation(AUTH_RA, "RoleAssignments_ListForSubscription").check(status, listing) == []
    assert name in [a["name"] for a in listing["value"]]

    delete = swagger.Operation(AUTH_RA, "RoleAssignments_Delete")
    status, _, deleted = fresh_emulator.arm_call("DELETE", path, "2022-04-01")
    assert status == 200 and delete.check(status, deleted) == [] and deleted["name"] == name
    status, _, empty = fresh_emulator.arm_call("DELETE", path, "2022-04-01")
    assert status == 204 and delete.check(status, None) == []


def test_role_assignment_conflicts_are_arm_error_responses(fresh_emulator):
    principal = put_machine(fresh_emulator, "contract-409")["identity"]["principalId"]
    create = swagger.Operation(AUTH_RA, "RoleAssignments_Create")
    name, _ = assign(fresh_emulator, principal)
    _, (status, _, body) = assign(fresh_emulator, principal)
    assert status == 409 and create.check(status, body) == []
    assert body["error"]["message"] == ("The role assignment already exists. The ID of the existing role "
                                        f"assignment is {name.replace('-', '')}.")
    _, (status, _, body) = assign(fresh_emulator, principal, role=C.ROLE_AKS_RBAC_CLUSTER_ADMIN, name=name)
    assert status == 400 and body["error"]["code"] == "RoleAssignmentUpdateNotPermitted"
    assert create.check(status, body) == []


def test_role_definition_and_permissions_match_the_spec(fresh_emulator):
    status, _, body = fresh_emulator.arm_call(
        "GET", f"{C.CLUSTER_ID}/providers/Microsoft.Authorization/roleDefinitions/{C.ROLE_AKS_FLEX_NODE_AGENT}",
        "2022-04-01")
    assert swagger.Operation(AUTH_RD, "RoleDefinitions_Get").check(status, body) == []
    assert body["name"] == C.ROLE_AKS_FLEX_NODE_AGENT and body["properties"]["type"] == "BuiltInRole"

    status, _, perms = fresh_emulator.arm_call(
        "GET", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourcegroups/{C.CLUSTER_RG}/providers/"
               "Microsoft.Authorization/permissions", "2022-04-01")
    assert swagger.Operation(AUTH_RD, "Permissions_ListForResourceGroup").check(status, perms) == []
    assert perms["value"][0]["actions"] == ["*"]  # the operator SP is Owner

    # The double slash the SDK produces for an empty parentResourcePath (azure-mgmt-authorization's
    # Permissions list_for_resource URL template: .../{parentResourcePath}/{resourceType}/...).
    status, _, perms = fresh_emulator.arm_call(
        "GET", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourcegroups/{C.CLUSTER_RG}/providers/"
               f"Microsoft.ContainerService//managedClusters/{C.CLUSTER_NAME}/providers/Microsoft.Authorization/"
               "permissions", "2022-04-01")
    assert swagger.Operation(AUTH_RD, "Permissions_ListForResource").check(status, perms) == []


@pytest.mark.parametrize("api_version,spec", CONTAINERSERVICE)
def test_managed_cluster_and_credentials_match_the_spec(fresh_emulator, api_version, spec):
    path = f"{RG_PATH}/providers/Microsoft.ContainerService/managedClusters/{C.CLUSTER_NAME}"
    status, _, cluster = fresh_emulator.arm_call("GET", path, api_version)
    assert swagger.Operation(spec, "ManagedClusters_Get").check(status, cluster) == []
    props = cluster["properties"]
    assert props["kubernetesVersion"] == C.K8S_VERSION and props["aadProfile"]["enableAzureRBAC"] is True

    for op_id, segment in (("ManagedClusters_ListClusterUserCredentials", "listClusterUserCredential"),
                           ("ManagedClusters_ListClusterAdminCredentials", "listClusterAdminCredential")):
        status, _, creds = fresh_emulator.arm_call("POST", f"{path}/{segment}", api_version)
        assert swagger.Operation(spec, op_id).check(status, creds) == []
        kubeconfig = base64.b64decode(creds["kubeconfigs"][0]["value"]).decode()
        assert f"server: {fresh_emulator.apiserver}" in kubeconfig


@pytest.mark.parametrize("api_version,spec", CONTAINERSERVICE)
def test_rotate_cluster_certificates_matches_the_spec(fresh_emulator, api_version, spec):
    """ManagedClusters_RotateClusterCertificates: 202 with the Location header the spec
    declares, no body; the monitor at Location answers 204 once it is done."""
    op = swagger.Operation(spec, "ManagedClusters_RotateClusterCertificates")
    path = f"{RG_PATH}/providers/Microsoft.ContainerService/managedClusters/{C.CLUSTER_NAME}/rotateClusterCertificates"
    status, headers, body = fresh_emulator.arm_call("POST", path, api_version)
    assert op.check(status, body) == [] and status == 202
    assert "Location" in op.op["responses"]["202"]["headers"] and headers["Location"]
    status, _, _ = fresh_emulator.http("GET", headers["Location"],
                                       headers={"Authorization": f"Bearer {fresh_emulator.arm_token()}"})
    assert status == 204


def test_managed_cluster_404_is_an_arm_error_response(fresh_emulator):
    op = swagger.Operation(AKS_2026, "ManagedClusters_Get")
    status, _, body = fresh_emulator.arm_call(
        "GET", f"{RG_PATH}/providers/Microsoft.ContainerService/managedClusters/nope", "2026-08-01")
    assert status == 404 and op.check(status, body) == []


def test_validator_catches_an_invented_or_mistyped_field():
    """The checks above mean something: a wrong body fails."""
    op = swagger.Operation(AUTH_RA, "RoleAssignments_Get")
    good = swagger.example(f"{EXAMPLES_RA}/RoleAssignments_Delete.json")["responses"]["200"]["body"]
    assert op.check(200, good) == []
    bad = {**good, "properties": {**good["properties"], "principalID": "x"}}
    assert any("principalID" in p for p in op.check(200, bad))
    missing = {**good, "properties": {k: v for k, v in good["properties"].items() if k != "principalId"}}
    assert any("principalId" in p for p in op.check(200, missing))
    assert any("status 202" in p for p in op.check(202, good))
