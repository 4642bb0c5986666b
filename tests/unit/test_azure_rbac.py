"""Role assignments through the real authorization SDK of this stack, against the emulator."""

import uuid

import pytest

from aks_flex_node.azure import rbac, roles, sdk_compat
from aks_flex_node.errors import AuthError, TemporaryError
from tests.emulator import constants as C
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)
from tests.azure_fixtures import put_machine

SCOPE = C.CLUSTER_ID


@pytest.fixture
def principal(fresh_emulator):
    """A brand-new Arc machine identity (as after `azcmagent connect`)."""
    return put_machine(fresh_emulator, "m1")["identity"]["principalId"]


def role_puts(emulator):
    return emulator.requests(server="arm", method="PUT", path_contains="roleAssignments")


def test_assignment_name_is_deterministic_and_case_blind():
    a = rbac.assignment_name(SCOPE, C.ROLE_READER, "8069CC05-D14C-46F4-9A8B-7F41ECE5367E")
    b = rbac.assignment_name(SCOPE.lower() + "/", C.ROLE_READER.upper(), "8069cc05-d14c-46f4-9a8b-7f41ece5367e")
    assert a == b
    assert uuid.UUID(a).version == 5
    assert a != rbac.assignment_name(SCOPE, C.ROLE_AKS_RBAC_CLUSTER_ADMIN, "8069cc05-d14c-46f4-9a8b-7f41ece5367e")


def test_assignment_name_is_pinned():
    # A change of namespace or key format would orphan every assignment made before.
    expected = uuid.uuid5(uuid.UUID("30d76f7c-0f8d-5366-b65b-f2ae55c25b64"), f"{SCOPE}|{C.ROLE_READER}|p".lower())
    assert rbac.assignment_name(SCOPE, C.ROLE_READER, "p") == str(expected)


def test_ensure_twice_is_idempotent(fresh_emulator, azure_clients, principal):
    first = rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal)
    second = rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal)
    assert first.created is True and second.created is False
    assert first.name == second.name == rbac.assignment_name(SCOPE, C.ROLE_READER, principal)
    assert first.id == second.id
    assert first.role_guid == C.ROLE_READER and first.principal_id == principal
    assert [r["status"] for r in role_puts(fresh_emulator)] == [201, 200]
    listed = rbac.assignments_for(azure_clients, SCOPE, principal)
    assert [a.id for a in listed] == [first.id]


def test_role_assignments_use_an_api_version_with_principal_type(fresh_emulator, azure_clients, principal):
    """Whatever azure-mgmt-authorization is installed: 2022-04-01 where it is the default (3.x),
    2020-10-01-preview on 2.0.0 (Ubuntu 22.04's), whose default 2015-07-01 has no
    principalType (sdk_compat.authorization_options)."""
    rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal)
    rbac.assignments_for(azure_clients, SCOPE, principal)
    seen = fresh_emulator.state()["api_versions"]["microsoft.authorization/roleassignments"]
    assert seen and set(seen) <= set(sdk_compat.ROLE_ASSIGNMENT_API_VERSIONS), seen


def test_request_carries_service_principal_type_and_cluster_subscription_role(fresh_emulator, azure_clients, principal):
    # A principal this young fails without principalType (Learn: Troubleshoot Azure RBAC): it must pass first time.
    fresh_emulator.settings(principal_replication_delay=60)
    assignment = rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_AKS_RBAC_CLUSTER_ADMIN, principal)
    assert assignment.created
    assert len(role_puts(fresh_emulator)) == 1
    stored = [a for a in fresh_emulator.state()["role_assignments"] if a["principal_id"] == principal]
    assert stored[0]["principal_type"] == "ServicePrincipal"
    # The role definition is referenced in the cluster's subscription (upstream used its own).
    assert stored[0]["role_definition_id"] == (
        f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/Microsoft.Authorization/roleDefinitions/{C.ROLE_AKS_RBAC_CLUSTER_ADMIN}"
    )


def test_same_triple_under_another_name_is_adopted_not_duplicated(fresh_emulator, azure_clients, principal):
    other_name = str(uuid.uuid4())
    status, _, body = fresh_emulator.arm_call(
        "PUT", f"{SCOPE}/providers/Microsoft.Authorization/roleAssignments/{other_name}", C.AUTHORIZATION_API,
        {"properties": {"roleDefinitionId": f"/providers/Microsoft.Authorization/roleDefinitions/{C.ROLE_READER}",
                        "principalId": principal, "principalType": "ServicePrincipal"}},
    )
    assert status == 201, body
    found = rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal)
    assert found.created is False
    assert found.name == other_name
    assert found.id.lower().endswith(f"/roleassignments/{other_name}")
    assert 409 in [r["status"] for r in role_puts(fresh_emulator)]


def test_existing_id_from_the_409_message_when_it_cannot_be_listed(fresh_emulator, azure_clients, principal):
    name = "0b2a7b6e-5d3e-4a7e-9a11-2f7c3c1d9e01"
    fresh_emulator.faults([{
        "match": {"method": "PUT", "path_regex": "roleAssignments", "times": 1},
        "respond": {"status": 409, "body": {"error": {
            "code": "RoleAssignmentExists",
            "message": "The role assignment already exists. The ID of the existing role assignment is "
                       f"{name.replace('-', '')}."}}},
    }])
    found = rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal)
    assert found.name == name and found.created is False
    assert found.id == f"{SCOPE}/providers/Microsoft.Authorization/roleAssignments/{name}"


def test_principal_not_found_is_retried_until_it_replicates(fresh_emulator, azure_clients, principal):
    fresh_emulator.faults([{
        "match": {"method": "PUT", "path_regex": "roleAssignments", "times": 2},
        "respond": {"status": 400, "body": {"error": {
            "code": "PrincipalNotFound",
            "message": f"Principal {principal.replace('-', '')} does not exist in the directory {C.TENANT_ID}."}}},
    }])
    slept = []
    assignment = rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal, sleep=slept.append)
    assert assignment.created
    assert slept == [1.0, 2.0]  # backoff between the three PUTs
    assert [r["status"] for r in role_puts(fresh_emulator)] == [400, 400, 201]


def test_principal_not_found_gives_up_within_its_bound(fresh_emulator, azure_clients, principal):
    fresh_emulator.faults([{
        "match": {"method": "PUT", "path_regex": "roleAssignments"},
        "respond": {"status": 400, "body": {"error": {"code": "PrincipalNotFound", "message": "Principal x does not exist"}}},
    }])
    with pytest.raises(TemporaryError) as caught:
        rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal, principal_wait=0.3)
    assert caught.value.code == "principal-unknown" and "0.3s" in caught.value.message  # how long it waited


def test_forbidden_names_the_action_and_the_roles_needed(fresh_emulator, reader_clients, principal):
    with pytest.raises(AuthError) as caught:
        rbac.ensure_assignment(reader_clients, SCOPE, C.ROLE_READER, principal)
    err = caught.value
    assert err.code == "forbidden"
    assert "Microsoft.Authorization/roleAssignments/write" in err.message and SCOPE in err.message
    # the Azure roles that may do it, by their names
    assert "Owner" in err.remedy and "User Access Administrator" in err.remedy
    assert [r["status"] for r in role_puts(fresh_emulator)] == [403]


def test_assignments_for_compares_role_guids_by_the_trailing_guid(fresh_emulator, azure_clients, principal):
    fresh_emulator.settings(role_definition_id_style="provider")
    made = rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_AKS_CLUSTER_ADMIN, principal)
    listed = rbac.assignments_for(azure_clients, SCOPE, principal)
    assert [(a.role_guid, a.name) for a in listed] == [(C.ROLE_AKS_CLUSTER_ADMIN, made.name)]
    query = fresh_emulator.requests(server="arm", method="GET", path_contains="roleAssignments")[-1]["query"]
    assert "principalId%20eq%20" in query or "principalId+eq+" in query


def test_assignments_for_only_returns_this_principal(fresh_emulator, azure_clients, principal):
    other = put_machine(fresh_emulator, "m2")["identity"]["principalId"]
    rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal)
    rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, other)
    assert {a.principal_id for a in rbac.assignments_for(azure_clients, SCOPE, principal)} == {principal}


def test_delete_assignment_present_then_absent(fresh_emulator, azure_clients, principal):
    made = rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, principal)
    assert rbac.delete_assignment(azure_clients, made.id) is True
    assert rbac.assignments_for(azure_clients, SCOPE, principal) == []
    assert rbac.delete_assignment(azure_clients, made.id) is False


def test_bad_inputs_name_the_field(azure_clients):
    with pytest.raises(ValueError, match="principal_id = 'bob'"):
        rbac.ensure_assignment(azure_clients, SCOPE, C.ROLE_READER, "bob")
    with pytest.raises(ValueError, match="scope = '/providers/x'.*/subscriptions/"):  # and the form expected
        rbac.ensure_assignment(azure_clients, "/providers/x", C.ROLE_READER, str(uuid.uuid4()))


def test_presets_are_data():
    assert [r.guid for r in roles.preset("legacy")] == [C.ROLE_READER, C.ROLE_AKS_RBAC_CLUSTER_ADMIN, C.ROLE_AKS_CLUSTER_ADMIN]
    assert {r.scope for p in roles.PRESETS.values() for r in p} == {roles.CLUSTER_SCOPE}
    with pytest.raises(ValueError, match=r"^role preset = 'admin'.*\blegacy$"):  # the value, the one known
        roles.preset("admin")


def test_the_minimal_preset_is_gone_and_points_at_agent_pool_mode():
    # The Flex Node Agent Role alone has no DataActions: an Arc-mode kubelet holding only it
    # gets 403 from the API server. Never a silent fallback to another preset.
    assert list(roles.PRESETS) == ["legacy"]
    assert C.ROLE_AKS_FLEX_NODE_AGENT not in {r.guid for p in roles.PRESETS.values() for r in p}
    with pytest.raises(ValueError) as err:
        roles.preset("minimal")
    # the value, the presets there are, and the setting and document to turn to instead
    assert str(err.value).startswith("role preset = 'minimal'") and "legacy" in str(err.value)
    assert "join_mode = agent-pool" in str(err.value) and "docs/roles.md" in str(err.value)
