"""Microsoft.HybridCompute/machines: what `azcmagent connect` creates and the SDK reads/deletes.

Bodies follow the spec example Machines_Get.json (2026-07-15). DELETE answers per
api-version (azure-mgmt-hybridcompute's generated operations in Azure/azure-sdk-for-python,
and the spec examples Machines_Delete.json): hybridcompute 10.x (api >= 2025) uses
begin_delete and accepts only 202/204; 9.x/8.x use a synchronous delete that accepts only
200/204. 204 always means "nothing there".
"""

import re
import uuid

from tests.emulator import arm, clock
from tests.emulator import constants as c
from tests.emulator.httpbase import Response
from tests.emulator.state import iso

TYPE = "Microsoft.HybridCompute/machines"
# Arc resource names: letters, digits, '-', '_', '.'; 1-54 characters (Learn: Arc naming rules).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,53}$")


def machine_id(sub, rg, name):
    return f"/subscriptions/{sub}/resourceGroups/{rg}/providers/{TYPE}/{name}"


def _is_lro_api_version(api_version):
    # 2026-07-15 (10.x) is a long-running DELETE; 2024-07-10 and older are synchronous.
    return (api_version or "") >= "2025"


def settle_operations(state):
    """Finish accepted DELETEs whose time has come (the resource disappears then)."""
    now = clock.now()
    for op in state.data["operations"].values():
        if op["status"] == "InProgress" and now >= op["done_at"]:
            op["status"] = "Succeeded"
            op["end"] = now
            _remove_machine(state, op["resource_id"])
            state.mark_dirty()


def _remove_machine(state, rid):
    record = state.data["machines"].pop(rid.lower(), None)
    if record:
        # The system-assigned identity goes with the resource (its role assignments stay,
        # orphaned, as in Azure).
        state.data["principals"].pop(record["principal_id"].lower(), None)
        state.mark_dirty()


def render(state, record):
    """A machine as GET returns it."""
    now = clock.now()
    identity = {"type": "SystemAssigned"}
    if now - record["created"] >= state.settings["arc_identity_delay"]:
        identity.update(principalId=record["principal_id"], tenantId=c.TENANT_ID)
    props = record["properties"]
    body = {
        "id": record["id"],
        "name": record["name"],
        "type": TYPE,
        "location": record["location"],
        "tags": dict(record["tags"]),
        "identity": identity,
        "resources": [],
        "properties": {
            "provisioningState": record["provisioning_state"],
            "status": record["status"],
            "lastStatusChange": iso(record["last_status_change"]),
            "agentVersion": record["agent_version"],
            "vmId": record["vm_id"],
            "displayName": record["name"],
            "machineFqdn": props.get("machineFqdn", record["name"]),
            "dnsFqdn": props.get("dnsFqdn", record["name"]),
            "osName": props.get("osName", "linux"),
            "osType": props.get("osType", "linux"),
            "osVersion": props.get("osVersion", "6.1.0-28-amd64"),
            "osSku": props.get("osSku", "Debian GNU/Linux 12 (bookworm)"),
            "domainName": props.get("domainName", "WORKGROUP"),
            "detectedProperties": {"cloudprovider": "N/A", "manufacturer": "QEMU", "model": "Standard PC"},
            "agentConfiguration": {
                "proxyUrl": "", "incomingConnectionsPorts": [], "extensionsAllowList": [],
                "extensionsBlockList": [], "proxyBypass": [], "extensionsEnabled": "true",
                "guestConfigurationEnabled": "true", "configMode": "full",
            },
            "osProfile": {"computerName": record["name"],
                          "linuxConfiguration": {"patchSettings": {"assessmentMode": "ImageDefault",
                                                                   "patchMode": "ImageDefault"}}},
            "mssqlDiscovered": "false",
        },
    }
    if record.get("kind"):
        body["kind"] = record["kind"]
    return body


def handle(app, req, caller, sub, rg, rest):
    state = app.state
    settle_operations(state)
    if not rest:
        if req.method != "GET":
            arm.fail(405, "MethodNotAllowed", f"The HTTP method '{req.method}' is not supported here.")
        scope = f"/subscriptions/{sub}/resourceGroups/{rg}"
        arm.authorize(state, caller, scope, f"{TYPE}/read")
        items = [render(state, m) for m in state.data["machines"].values()
                 if m["subscription"].lower() == sub.lower() and m["resource_group"].lower() == rg.lower()]
        return Response.json(200, arm.paged(req, state, sorted(items, key=lambda m: m["name"])))
    if len(rest) != 1:
        arm.fail(404, "NotFound", f"No HTTP resource was found that matches the request URI '{req.path}'.")
    name = rest[0]
    rid = machine_id(sub, rg, name)
    record = state.data["machines"].get(rid.lower())
    if req.method == "GET":
        arm.authorize(state, caller, rid, f"{TYPE}/read")
        if record is None:
            arm.fail(404, "ResourceNotFound",
                     f"The Resource '{TYPE}/{name}' under resource group '{rg}' was not found. "
                     "For more details please go to https://aka.ms/ARMResourceNotFoundFix")
        return Response.json(200, render(state, record))
    if req.method == "PUT":
        arm.authorize(state, caller, rid, f"{TYPE}/write")
        return _put(app, req, caller, sub, rg, name, rid, record)
    if req.method == "DELETE":
        arm.authorize(state, caller, rid, f"{TYPE}/delete")
        return _delete(app, req, sub, rid, record)
    arm.fail(405, "MethodNotAllowed", f"The HTTP method '{req.method}' is not supported here.")


def _put(app, req, caller, sub, rg, name, rid, record):
    state = app.state
    body = req.json()
    if not isinstance(body, dict):
        arm.fail(400, "InvalidRequestContent", "The request content must be a JSON object.")
    if not _NAME.match(name):
        arm.fail(400, "InvalidResourceName",
                 f"The resource name '{name}' is invalid: expected 1-54 letters, digits, '-', '_' or '.', "
                 "starting with a letter or digit.")
    location = body.get("location")
    if not isinstance(location, str) or not location:
        arm.fail(400, "LocationRequired", "The location property is required for this definition.")
    tags = body.get("tags") or {}
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        arm.fail(400, "InvalidTag", f"tags = {tags!r}: expected an object of string values.")
    props = body.get("properties") or {}
    now = clock.now()
    if record is not None:
        if record["location"].lower() != location.lower():
            arm.fail(409, "InvalidResourceLocation",
                     f"The resource '{name}' already exists in location '{record['location']}' in resource group "
                     f"'{rg}'. A resource with the same name cannot be created in location '{location}'. "
                     "Please select a new resource name.")
        # Another host's connect under the same name (cloned images): Azure's answer is not
        # documented, so this models the conservative reading, that the PUT takes the resource
        # over. vmId is create-only (openapi.json: x-ms-mutability read, create), so it stays the
        # first host's, and `claims` keeps every vmId that PUT it, for tests to see the collision.
        claimed = props.get("vmId")
        if isinstance(claimed, str) and claimed and claimed not in record.setdefault("claims", [record["vm_id"]]):
            record["claims"].append(claimed)
        record["tags"] = tags
        record["properties"].update({k: v for k, v in props.items()
                                     if isinstance(v, (str, int, bool)) and k != "vmId"})
        if record["status"] != "Connected":
            record["status"], record["last_status_change"] = "Connected", now
        state.mark_dirty()
        return Response.json(200, render(state, record))
    principal_id = str(uuid.uuid4())
    state.add_principal(principal_id, kind="ManagedIdentity", client_id=str(uuid.uuid4()), display_name=name,
                        created=now)
    record = {
        "id": rid,
        "name": name,
        "subscription": sub,
        "resource_group": rg,
        "location": location,
        "tags": tags,
        "kind": body.get("kind"),
        "principal_id": principal_id,
        # The agent's own vmId when it sends one (the real agent does), else one of ours.
        "vm_id": props.get("vmId") if isinstance(props.get("vmId"), str) and props.get("vmId") else str(uuid.uuid4()),
        "created": now,
        "status": "Connected",
        "last_status_change": now,
        "provisioning_state": "Succeeded",
        "agent_version": props.get("agentVersion") or c.AZCMAGENT_VERSION,
        "properties": {k: v for k, v in props.items() if isinstance(v, (str, int, bool)) and k != "vmId"},
        "created_by": caller.principal_id,
    }
    state.data["machines"][rid.lower()] = record
    state.mark_dirty()
    return Response.json(200, render(state, record))


def _delete(app, req, sub, rid, record):
    state = app.state
    if record is None:
        return Response.empty(204)
    if state.settings["machine_delete_mode"] == "204":
        _remove_machine(state, rid)
        return Response.empty(204)
    api_version = req.q("api-version")
    if not _is_lro_api_version(api_version):
        _remove_machine(state, rid)
        return Response.empty(200)
    op_id = str(uuid.uuid4())
    now = clock.now()
    state.data["operations"][op_id] = {"id": op_id, "status": "InProgress", "start": now,
                                       "done_at": now + state.settings["lro_delay"], "end": None,
                                       "resource_id": rid, "location": record["location"]}
    record["provisioning_state"] = "Deleting"
    state.mark_dirty()
    settle_operations(state)
    ops = f"{arm.base_url(req)}/subscriptions/{sub}/providers/{TYPE.split('/')[0]}/locations/{record['location']}"
    headers = {
        "Azure-AsyncOperation": f"{ops}/operationStatus/{op_id}?api-version={api_version}",
        "Location": f"{ops}/operationResults/{op_id}?api-version={api_version}",
    }
    if state.settings["lro_retry_after"] is not None:
        headers["Retry-After"] = str(state.settings["lro_retry_after"])
    return Response.empty(202, headers)


def handle_subscription_level(app, req, caller, sub, rest):
    """GET .../providers/Microsoft.HybridCompute/machines and the async-operation endpoints."""
    state = app.state
    settle_operations(state)
    low = [s.lower() for s in rest]
    if low == ["machines"] and req.method == "GET":
        arm.authorize(state, caller, f"/subscriptions/{sub}", f"{TYPE}/read")
        items = [render(state, m) for m in state.data["machines"].values() if m["subscription"].lower() == sub.lower()]
        return Response.json(200, arm.paged(req, state, sorted(items, key=lambda m: m["id"].lower())))
    if len(low) == 4 and low[0] == "locations" and low[2] in ("operationstatus", "operationresults"):
        op = state.data["operations"].get(rest[3])
        if op is None:
            arm.fail(404, "OperationNotFound", f"The operation '{rest[3]}' could not be found.")
        if low[2] == "operationresults":
            # Location polling: 202 while running, 204 when done (Learn "Track asynchronous Azure
            # operations": https://learn.microsoft.com/azure/azure-resource-manager/management/async-operations).
            return Response.empty(202 if op["status"] == "InProgress" else 204,
                                  {"Location": f"{arm.base_url(req)}{req.path}?{req.query_string}"}
                                  if op["status"] == "InProgress" else None)
        body = {"id": req.path, "name": op["id"], "status": op["status"], "startTime": iso(op["start"])}
        if op["end"]:
            body["endTime"] = iso(op["end"])
        return Response.json(200, body)
    arm.fail(404, "NotFound", f"No HTTP resource was found that matches the request URI '{req.path}'.")
