"""The emulator's throttling and role-assignment-limit answers against the official specs:
a 429 and a RoleAssignmentLimitExceeded are error answers of the operation that was called,
so their bodies must match that operation's `default` (ErrorResponse) schema strictly."""

import uuid

from tests.contract import swagger
from tests.contract.arm_specs import AUTH_RA, HC_2022, ROLE_ID, machine_path
from tests.emulator import constants as C


def test_a_throttled_get_answers_the_specs_error_shape(fresh_emulator):
    fresh_emulator.settings(arm_reads_bucket=1, arm_reads_refill=1.0)
    token = fresh_emulator.arm_token()
    fresh_emulator.arm_call("GET", machine_path("absent"), "2024-07-10", token=token)
    status, headers, body = fresh_emulator.arm_call("GET", machine_path("absent"), "2024-07-10", token=token)
    assert status == 429 and int(headers["Retry-After"]) >= 1
    assert swagger.Operation(HC_2022, "Machines_Get").check(status, body) == []


def test_the_role_assignment_limit_answers_the_specs_error_shape(fresh_emulator):
    fresh_emulator.settings(role_assignment_limit=len(fresh_emulator.state()["role_assignments"]))
    body = {"properties": {"roleDefinitionId": ROLE_ID.format(C.ROLE_READER), "principalId": C.READER_SP_OBJECT_ID,
                           "principalType": "ServicePrincipal"}}
    status, _, answer = fresh_emulator.arm_call(
        "PUT", f"{C.CLUSTER_ID}/providers/Microsoft.Authorization/roleAssignments/{uuid.uuid4()}", "2022-04-01", body)
    assert status == 400 and answer["error"]["code"] == "RoleAssignmentLimitExceeded"
    assert swagger.Operation(AUTH_RA, "RoleAssignments_Create").check(status, answer) == []
