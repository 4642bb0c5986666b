"""Microsoft.Authorization 2022-04-01: roleAssignments, roleDefinitions, permissions.

Rules and messages from the 2022-04-01 spec (Azure/azure-rest-api-specs, specification/authorization/
resource-manager/Microsoft.Authorization/stable/2022-04-01/authorization-RoleAssignmentsCalls.json)
and Learn "Troubleshoot Azure RBAC"
(https://learn.microsoft.com/azure/role-based-access-control/troubleshooting); the
RoleAssignmentExists wording comes from public CLI transcripts, not from Learn:
201 on create, 200 on an identical re-PUT, 400 RoleAssignmentUpdateNotPermitted when a name
is reused with other properties, 409 RoleAssignmentExists when (scope, role, principal) is
already assigned under another name, PrincipalNotFound for a principal not yet replicated
unless principalType=ServicePrincipal; DELETE 200 with the body, 204 when absent.
"""

import re

from tests.emulator import arm, clock, roles
from tests.emulator.httpbase import Response
from tests.emulator.state import iso

TYPE = "Microsoft.Authorization/roleAssignments"
PRINCIPAL_TYPES = ("User", "Group", "ServicePrincipal", "ForeignGroup", "Device")
_ROLE_ID = re.compile(r"/providers/Microsoft\.Authorization/roleDefinitions/([0-9a-fA-F-]{36})$", re.IGNORECASE)
_GUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")


def _role_definition_id(state, record):
    guid = record["role_guid"]
    if state.settings["role_definition_id_style"] == "provider" or not record["scope"].lower().startswith("/subscriptions/"):
        return f"/providers/Microsoft.Authorization/roleDefinitions/{guid}"
    sub = record["scope"].split("/")[2]
    return f"/subscriptions/{sub}/providers/Microsoft.Authorization/roleDefinitions/{guid}"


def render(state, record):
    scope = record["scope"]
    props = {
        "roleDefinitionId": _role_definition_id(state, record),
        "principalId": record["principal_id"],
        "principalType": record["principal_type"],
        "scope": scope,
        "createdOn": iso(record["created"]),
        "updatedOn": iso(record["updated"]),
    }
    if record.get("created_by"):
        props["createdBy"] = record["created_by"]
        props["updatedBy"] = record["created_by"]
    if record.get("description"):
        props["description"] = record["description"]
    return {
        "id": f"{'' if scope == '/' else scope}/providers/{TYPE}/{record['name']}",
        "name": record["name"],
        "type": TYPE,
        "properties": props,
    }


def handle(app, req, caller, scope, rest):
    kind = rest[0].lower() if rest else ""
    if kind == "roleassignments" and len(rest) <= 2:
        if len(rest) == 1:
            return _list_assignments(app, req, caller, scope)
        return _assignment(app, req, caller, scope, rest[1])
    if kind == "roledefinitions" and len(rest) <= 2:
        return _role_definitions(app, req, caller, scope, rest[1:])
    if kind == "permissions" and len(rest) == 1 and req.method == "GET":
        blocks = roles.permissions_of(app.state.data["role_assignments"].values(), caller.principal_id, scope)
        return Response.json(200, {"value": [dict(b) for b in blocks]})
    arm.fail(404, "NotFound", f"No HTTP resource was found that matches the request URI '{req.path}'.")


# -- list ------------------------------------------------------------------------------------


def _parse_filter(text):
    """`principalId eq '<id>'`, `atScope()`, `assignedTo('<id>')`, joined with `and`."""
    principal, at_scope = None, False
    for clause in re.split(r"\s+and\s+", (text or "").strip(), flags=re.IGNORECASE):
        if not clause:
            continue
        m = re.fullmatch(r"principalId\s+eq\s+'([^']*)'", clause, re.IGNORECASE) or \
            re.fullmatch(r"assignedTo\('([^']*)'\)", clause, re.IGNORECASE)
        if m:
            principal = m.group(1)
        elif re.fullmatch(r"atScope\(\)", clause, re.IGNORECASE):
            at_scope = True
        else:
            arm.fail(400, "UnsupportedQuery",
                     f"$filter = {text!r}: unsupported clause {clause!r}; expected principalId eq '<id>', "
                     "assignedTo('<id>') or atScope()")
    return principal, at_scope


def _list_assignments(app, req, caller, scope):
    state = app.state
    if req.method != "GET":
        arm.fail(405, "MethodNotAllowed", f"The HTTP method '{req.method}' is not supported here.")
    arm.authorize(state, caller, scope or "/", f"{TYPE}/read")
    principal, at_scope = _parse_filter(req.q("$filter"))
    items = []
    for record in state.data["role_assignments"].values():
        if principal is not None and record["principal_id"].lower() != principal.lower():
            continue
        above = roles.scope_covers(record["scope"], scope)
        below = roles.scope_covers(scope, record["scope"])
        if above or (below and not at_scope):
            items.append(record)
    items.sort(key=lambda r: (r["created"], r["name"]))
    return Response.json(200, arm.paged(req, state, [render(state, r) for r in items]))


# -- one assignment ---------------------------------------------------------------------------


def _assignment(app, req, caller, scope, name):
    state = app.state
    record = state.data["role_assignments"].get(name.lower())
    here = record is not None and record["scope"].lower() == (scope or "/").lower()
    if req.method == "GET":
        arm.authorize(state, caller, scope or "/", f"{TYPE}/read")
        if not here:
            # Code seen in third-party clients; not documented on Learn, not verified live.
            arm.fail(404, "RoleAssignmentNotFound", f"The role assignment '{name}' is not found.")
        return Response.json(200, render(state, record))
    if req.method == "DELETE":
        arm.authorize(state, caller, scope or "/", f"{TYPE}/delete")
        if not here:
            return Response.empty(204)
        del state.data["role_assignments"][name.lower()]
        state.mark_dirty()
        return Response.json(200, render(state, record))
    if req.method == "PUT":
        arm.authorize(state, caller, scope or "/", f"{TYPE}/write")
        return _create(app, req, caller, scope, name, record)
    arm.fail(405, "MethodNotAllowed", f"The HTTP method '{req.method}' is not supported here.")


def _create(app, req, caller, scope, name, existing):
    state = app.state
    if not _GUID.match(name):
        # The exact ARM code for a non-GUID name is not documented on Learn (unverified).
        arm.fail(400, "InvalidRoleAssignmentId",
                 f"The role assignment ID '{name}' is not valid. The role assignment ID must be a GUID.")
    body = req.json()
    props = body.get("properties") if isinstance(body, dict) else None
    if not isinstance(props, dict):
        arm.fail(400, "InvalidRequestContent", "The request content must be an object with a 'properties' object.")
    problems = []
    role_id = props.get("roleDefinitionId")
    principal_id = props.get("principalId")
    principal_type = props.get("principalType", "User")  # the spec's default
    m = _ROLE_ID.search(role_id) if isinstance(role_id, str) else None
    if not m:
        problems.append(f"properties.roleDefinitionId = {role_id!r}: expected "
                        "'[/subscriptions/<sub>]/providers/Microsoft.Authorization/roleDefinitions/<guid>'")
    if not (isinstance(principal_id, str) and _GUID.match(principal_id)):
        problems.append(f"properties.principalId = {principal_id!r}: expected the principal's object ID (a GUID)")
    if principal_type not in PRINCIPAL_TYPES:
        problems.append(f"properties.principalType = {principal_type!r}: expected one of {', '.join(PRINCIPAL_TYPES)}")
    if problems:
        arm.fail(400, "InvalidRequestContent", "; ".join(problems))
    role_guid = m.group(1).lower()
    if not roles.is_built_in(role_guid):
        arm.fail(400, "RoleDefinitionDoesNotExist", f"The specified role definition with ID '{role_guid}' does not exist.")
    scope = scope or "/"

    if existing is not None:
        same = (existing["scope"].lower() == scope.lower() and existing["role_guid"] == role_guid
                and existing["principal_id"].lower() == principal_id.lower())
        if not same:
            arm.fail(400, "RoleAssignmentUpdateNotPermitted",
                     "Tenant ID, application ID, principal ID, and scope are not allowed to be updated.")
        existing["updated"] = clock.now()
        state.mark_dirty()
        return Response.json(200, render(state, existing))

    for other in state.data["role_assignments"].values():
        if (other["scope"].lower() == scope.lower() and other["role_guid"] == role_guid
                and other["principal_id"].lower() == principal_id.lower()):
            arm.fail(409, "RoleAssignmentExists",
                     "The role assignment already exists. The ID of the existing role assignment is "
                     f"{other['name'].replace('-', '').lower()}.")

    principal = state.principal(principal_id)
    young = principal is not None and clock.now() - principal["created"] < state.settings["principal_replication_delay"]
    if principal is None or (young and principal_type != "ServicePrincipal"):
        arm.fail(400, "PrincipalNotFound",
                 f"Principal {principal_id.replace('-', '')} does not exist in the directory {state.data['tenant_id']}. "
                 "Check that you have the correct principal ID. If you are creating this principal and then "
                 "immediately assigning a role, this error might be related to a replication delay. In this case, "
                 "set the role assignment principalType property to a value, such as ServicePrincipal, User, or "
                 "Group.  See https://aka.ms/docs-principaltype")

    if scope.lower().startswith("/subscriptions/"):
        sub = scope.split("/")[2].lower()
        count = sum(1 for r in state.data["role_assignments"].values()
                    if r["scope"].lower().startswith(f"/subscriptions/{sub}"))
        if count >= state.settings["role_assignment_limit"]:
            # Learn "Troubleshoot Azure RBAC limits"
            # (https://learn.microsoft.com/azure/role-based-access-control/troubleshoot-limits):
            # "No more role assignments can be created (code: RoleAssignmentLimitExceeded)";
            # 4000 per subscription, counting subscription, resource group and resource scopes
            # (not management groups). The HTTP status is not documented: 400 is our choice.
            arm.fail(400, "RoleAssignmentLimitExceeded", "No more role assignments can be created.")

    record = state.add_role_assignment(scope, role_guid, principal_id, principal_type, name=name,
                                       created_by=caller.principal_id, description=props.get("description"),
                                       role_definition_id=role_id)
    return Response.json(201, render(state, record))


# -- role definitions -----------------------------------------------------------------------


def _role_definitions(app, req, caller, scope, rest):
    state = app.state
    if req.method != "GET":
        arm.fail(405, "MethodNotAllowed", "Only GET is supported for role definitions here.")
    arm.authorize(state, caller, scope or "/", "Microsoft.Authorization/roleDefinitions/read")
    prefix = f"/subscriptions/{scope.split('/')[2]}" if scope.lower().startswith("/subscriptions/") else ""
    if rest:
        guid = rest[0]
        if not roles.is_built_in(guid):
            arm.fail(404, "RoleDefinitionDoesNotExist", f"The specified role definition with ID '{guid}' does not exist.")
        return Response.json(200, roles.definition_body(guid, prefix))
    wanted = None
    m = re.fullmatch(r"roleName\s+eq\s+'([^']*)'", (req.q("$filter") or "").strip(), re.IGNORECASE)
    if m:
        wanted = m.group(1).lower()
    items = [roles.definition_body(g, prefix) for g in roles.BUILT_IN
             if wanted is None or roles.BUILT_IN[g][0].lower() == wanted]
    return Response.json(200, {"value": items})
