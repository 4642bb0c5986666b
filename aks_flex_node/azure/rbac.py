"""Role assignments for the Arc machine's identity (Microsoft.Authorization, api 2022-04-01).

Assignment names are derived from (scope, role, principal), so a re-run PUTs the same
name and gets 200 instead of piling up duplicates (upstream used a random name per
attempt: Azure/AKSFlexNode v0.0.10, pkg/components/arc/arc_installer.go assignRole).
"""

import re
import time
import uuid
from dataclasses import dataclass

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError

from aks_flex_node import cloud_values
from aks_flex_node.azure.auth import arm_code, arm_message, azure_errors
from aks_flex_node.azure.sdk_compat import model_property
from aks_flex_node.errors import AuthError, FlexNodeError, TemporaryError

# uuid5(NAMESPACE_URL, "https://github.com/aks-flex-node/aks-flex-node#role-assignment"):
# fixed forever, or re-runs stop finding the assignments earlier versions made.
ASSIGNMENT_NAMESPACE = uuid.UUID("30d76f7c-0f8d-5366-b65b-f2ae55c25b64")
# A brand-new managed identity may not have replicated to ARM's directory view yet
# (PrincipalNotFound: https://learn.microsoft.com/azure/role-based-access-control/troubleshooting):
# retry within this bound.
PRINCIPAL_WAIT = 180

_GUID = r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
_GUID_RE = re.compile(rf"^{_GUID}$")
_TRAILING_GUID = re.compile(rf"({_GUID})/?$")
# 409 RoleAssignmentExists: "The role assignment already exists. The ID of the existing
# role assignment is <32 hex>." (its wording in public transcripts; not on Learn)
_EXISTING_ID = re.compile(r"existing role assignment is ([0-9a-fA-F]{32}|" + _GUID + r")")
_SUBSCRIPTION = re.compile(r"^/subscriptions/([^/]+)", re.IGNORECASE)


@dataclass(frozen=True)
class Assignment:
    id: str
    name: str
    scope: str
    role_guid: str  # lower case
    principal_id: str
    created: bool = False


def _check_guid(value, field):
    if not isinstance(value, str) or not _GUID_RE.match(value):
        raise ValueError(f"{field} = {value!r}: expected a GUID")
    return str(uuid.UUID(value))


def subscription_of(scope):
    match = _SUBSCRIPTION.match(scope or "")
    if not match:
        raise ValueError(f"scope = {scope!r}: expected a resource ID starting with /subscriptions/<id>")
    return match.group(1)


def role_guid_of(role_definition_id):
    """The role GUID at the end of a role definition ID, lower case. ARM answers with
    `/providers/...` or `/subscriptions/...` forms, any case (see the examples of
    azure-rest-api-specs' authorization-RoleAssignmentsCalls.json, 2022-04-01)."""
    match = _TRAILING_GUID.search(role_definition_id or "")
    return str(uuid.UUID(match.group(1))) if match else (role_definition_id or "").lower()


def role_definition_id(scope, role_guid):
    # In the cluster's subscription (upstream used azure.subscriptionId, wrong when the
    # cluster is in another one: Azure/AKSFlexNode v0.0.10 arc_installer.go assignRole).
    return f"/subscriptions/{subscription_of(scope)}/providers/Microsoft.Authorization/roleDefinitions/{role_guid}"


def assignment_name(scope, role_guid, principal_id):
    """The deterministic assignment name (a GUID) for this triple."""
    key = f"{scope.rstrip('/')}|{role_guid}|{principal_id}".lower()
    return str(uuid.uuid5(ASSIGNMENT_NAMESPACE, key))


def _assignment(model, created=False, source="ARM roleAssignments"):
    # The ID is what unbootstrap deletes by: a resource ID, checked (cloud_values).
    return Assignment(
        id=cloud_values.resource_id(model.id, source, "id"),
        name=model.name,
        scope=model_property(model, "scope") or model.id.rsplit("/providers/Microsoft.Authorization/", 1)[0],
        role_guid=role_guid_of(model_property(model, "role_definition_id")),
        principal_id=model_property(model, "principal_id"),
        created=created,
    )


def _forbidden(scope, action):
    return AuthError(
        f"the operator identity may not perform {action} on {scope}",
        remedy="run as an identity with Owner or User Access Administrator (or Role Based Access "
        "Control Administrator) on the cluster, or have one pre-create the role assignments (docs/roles.md)",
        code="forbidden",
    )


def ensure_assignment(clients, scope, role_guid, principal_id, *, principal_wait=PRINCIPAL_WAIT,
                      clock=time.monotonic, sleep=time.sleep):
    """Make sure `principal_id` holds `role_guid` at `scope`; return the assignment."""
    role_guid = _check_guid(role_guid, "role definition")
    principal_id = _check_guid(principal_id, "principal_id")
    client = clients.authorization(subscription_of(scope))
    name = assignment_name(scope, role_guid, principal_id)
    # The models of the api-version role assignments use (sdk_compat.authorization_options).
    parameters = client.role_assignments.models.RoleAssignmentCreateParameters(
        role_definition_id=role_definition_id(scope, role_guid),
        principal_id=principal_id,
        # Skips the directory lookup that fails for a brand-new identity (Troubleshoot Azure
        # RBAC: "Assigning a role to a new principal sometimes fails").
        principal_type="ServicePrincipal",
    )
    action = f"assigning role {role_guid} to {principal_id} on {scope}"
    deadline = clock() + principal_wait
    delay = 1.0
    while True:
        try:
            with azure_errors(action):
                try:
                    status, model = client.role_assignments.create(
                        scope, name, parameters, cls=lambda response, model, _headers: (response.http_response.status_code, model)
                    )
                    return _assignment(model, created=status == 201)
                except ResourceExistsError as err:
                    if arm_code(err) != "RoleAssignmentExists":
                        raise
                    return _existing(clients, scope, role_guid, principal_id, arm_message(err))
                except HttpResponseError as err:
                    code = arm_code(err)
                    if err.status_code == 403:
                        raise _forbidden(scope, "Microsoft.Authorization/roleAssignments/write") from err
                    if code == "PrincipalNotFound":
                        raise _PrincipalNotYet(arm_message(err)) from err
                    if code == "RoleAssignmentLimitExceeded":
                        raise FlexNodeError(
                            f"{action}: the subscription has reached its role assignment limit: {arm_message(err)}",
                            remedy="remove unused role assignments (the limit is 4000 per subscription)",
                        ) from err
                    raise
        except _PrincipalNotYet as err:
            remaining = deadline - clock()
            if remaining <= 0:
                raise TemporaryError(
                    f"{action}: the principal is still unknown to Entra ID after {principal_wait:g}s: {err}",
                    remedy="a new managed identity can take minutes to replicate; run bootstrap again later",
                    code="principal-unknown",
                ) from None
            sleep(min(delay, remaining))
            delay = min(delay * 2, 15.0)


class _PrincipalNotYet(Exception):
    pass


def _existing(clients, scope, role_guid, principal_id, message):
    """The assignment ARM says already exists under another name (409 RoleAssignmentExists)."""
    for found in assignments_for(clients, scope, principal_id):
        if found.role_guid == role_guid and found.scope.lower().rstrip("/") == scope.lower().rstrip("/"):
            return found
    match = _EXISTING_ID.search(message or "")
    if not match:
        raise FlexNodeError(
            f"role {role_guid} for {principal_id} on {scope} already exists, but it is neither listed "
            f"nor named in the error: {message}"
        )
    name = str(uuid.UUID(match.group(1)))
    return Assignment(
        id=f"{scope.rstrip('/')}/providers/Microsoft.Authorization/roleAssignments/{name}",
        name=name,
        scope=scope,
        role_guid=role_guid,
        principal_id=principal_id,
        created=False,
    )


def assignments_for(clients, scope, principal_id):
    """Every assignment of `principal_id` at, above or below `scope` (the filter's meaning,
    authorization-RoleAssignmentsCalls.json, RoleAssignments_ListForScope $filter)."""
    principal_id = _check_guid(principal_id, "principal_id")
    client = clients.authorization(subscription_of(scope))
    with azure_errors(f"listing role assignments of {principal_id} on {scope}"):
        try:
            models = list(client.role_assignments.list_for_scope(scope, filter=f"principalId eq '{principal_id}'"))
        except HttpResponseError as err:
            if err.status_code == 403:
                raise _forbidden(scope, "Microsoft.Authorization/roleAssignments/read") from err
            raise
    # The filter is the service's: keep only this principal whatever it sends back.
    return [_assignment(m) for m in models
            if (model_property(m, "principal_id") or "").lower() == principal_id.lower()]


def delete_assignment(clients, assignment_id):
    """Delete by ID; True if it existed, False if it was already gone."""
    client = clients.authorization(subscription_of(assignment_id))
    with azure_errors(f"deleting role assignment {assignment_id}"):
        try:
            deleted = client.role_assignments.delete_by_id(assignment_id)
        except ResourceNotFoundError:
            return False
        except HttpResponseError as err:
            if err.status_code == 403:
                raise _forbidden(assignment_id, "Microsoft.Authorization/roleAssignments/delete") from err
            raise
    # 200 with the deleted assignment, 204 (None) when there was none (RoleAssignments_Delete
    # in authorization-RoleAssignmentsCalls.json)
    return deleted is not None

