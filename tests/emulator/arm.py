"""Azure Resource Manager front door: authentication, authorization, routing, common errors.

Resource providers live in their own modules (hybridcompute, authorization,
containerservice); this module owns what every ARM call shares: the Bearer token check
(401 + WWW-Authenticate), the caller's permission check (403 AuthorizationFailed),
subscriptions, resource groups, provider registration and paging.
"""

import time
import urllib.parse
import uuid

from tests.emulator import clock, constants as c
from tests.emulator import roles, throttling
from tests.emulator.httpbase import HttpError, Response

# ARM accepts tokens for either spelling of its audience (the error message of real ARM lists these).
ARM_AUDIENCES = {"https://management.azure.com", "https://management.core.windows.net"}


def error(status, code, message, headers=None, **extra):
    """An ARM error body (common-types ErrorResponse: {"error": {"code", "message", ...}})."""
    body = {"error": {"code": code, "message": message, **extra}}
    return Response.json(status, body, headers)


def fail(status, code, message, headers=None, **extra):
    raise HttpError(error(status, code, message, headers, **extra))


def base_url(req):
    return f"https://{req.header('Host', '127.0.0.1')}"


def common_headers(req, state=None):
    """Headers real ARM adds to every answer. The rate-limit headers (Learn
    https://learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling)
    are throttling.py's: what the call left in its buckets, or for a call refused before
    admission (401, no subscription in the path) what the buckets hold."""
    request_id = str(uuid.uuid4())
    ratelimit = getattr(req, "ratelimit", None)
    if ratelimit is None and state is not None:
        sub = req.segments[1] if len(req.lower) >= 2 and req.lower[0] == "subscriptions" else c.SUBSCRIPTION_ID
        with state.lock:
            ratelimit = throttling.peek_headers(state, req, None, sub)
    return {
        **(ratelimit or {}),
        "Cache-Control": "no-cache",
        "Pragma": "no-cache",
        "Expires": "-1",
        "x-ms-request-id": request_id,
        "x-ms-correlation-request-id": req.header("x-ms-correlation-request-id") or request_id,
        "x-ms-routing-request-id": f"{c.LOCATION.upper()}:{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(clock.now()))}:{request_id}",
    }


# -- authentication and authorization ---------------------------------------------------


class Caller:
    def __init__(self, principal_id, record):
        self.principal_id = principal_id
        self.token = record


def authenticate(state, req, audiences=ARM_AUDIENCES):
    """The caller behind the Bearer token, or a 401 shaped like ARM's."""
    tenant_uri = f"{base_url(req)}/{c.TENANT_ID}"

    def unauthorized(code, message):
        challenge = (f'Bearer authorization_uri="{tenant_uri}", error="invalid_token", '
                     f'error_description="{message}"')
        fail(401, code, message, {"WWW-Authenticate": challenge})

    header = req.header("Authorization") or ""
    if not header:
        unauthorized("AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        unauthorized("AuthenticationFailedInvalidHeader",
                     "Authentication failed. The 'Authorization' header is provided in an invalid format.")
    record = state.lookup_token(token.strip())
    if record is None:
        unauthorized("InvalidAuthenticationToken", "The access token is invalid.")
    if record["expires_on"] <= clock.now():
        unauthorized("ExpiredAuthenticationToken",
                     "The access token expiry UTC time is earlier than current UTC time.")
    if record["audience"].rstrip("/").lower() not in audiences:
        unauthorized("InvalidAuthenticationTokenAudience",
                     f"The access token has been obtained for wrong audience or resource '{record['audience']}'. "
                     "It should exactly match with one of the allowed audiences "
                     "'https://management.core.windows.net/','https://management.core.windows.net',"
                     "'https://management.azure.com/','https://management.azure.com'.")
    return Caller(record["principal"], record)


def authorize(state, caller, scope, action):
    """403 AuthorizationFailed unless a role of the caller at or above `scope` grants `action`."""
    if roles.allows(state.data["role_assignments"].values(), caller.principal_id, scope, action):
        return
    principal = state.principal(caller.principal_id) or {}
    fail(403, "AuthorizationFailed",
         f"The client '{principal.get('client_id', caller.principal_id)}' with object id '{caller.principal_id}' "
         f"does not have authorization to perform action '{action}' over scope '{scope}' or the scope is invalid. "
         "If access was recently granted, please refresh your credentials.")


# -- shared building blocks -------------------------------------------------------------


def require_subscription(state, sub):
    if sub.lower() not in state.data["subscriptions"]:
        fail(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")


def require_resource_group(state, sub, rg):
    require_subscription(state, sub)
    if f"/subscriptions/{sub}/resourcegroups/{rg}".lower() not in state.data["resource_groups"]:
        fail(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")


def require_registered(state, sub, namespace):
    """409 MissingSubscriptionRegistration for a namespace not registered (azure-mgmt-core's
    ARMAutoResourceProviderRegistrationPolicy parses the namespace from the quoted part:
    Azure/azure-sdk-for-python sdk/core/azure-mgmt-core/azure/mgmt/core/policies/_base.py)."""
    ns = namespace.lower()
    if ns in state.settings["unregistered_providers"] and \
            state.data["providers"].get(f"{sub}/{ns}".lower()) != "Registered":
        msg = (f"The subscription is not registered to use namespace '{namespace}'. "
               "See https://aka.ms/rps-not-found for how to register subscriptions.")
        fail(409, "MissingSubscriptionRegistration", msg,
             details=[{"code": "MissingSubscriptionRegistration", "target": namespace, "message": msg}])


def paged(req, state, items):
    """One page of `items` and a nextLink when more follow ($skipToken is the offset)."""
    size = max(1, state.settings["page_size"])
    try:
        start = int(req.q("$skipToken") or 0)
    except ValueError:
        fail(400, "InvalidSkipToken", f"The $skipToken '{req.q('$skipToken')}' is not valid.")
    body = {"value": items[start:start + size]}
    if start + size < len(items):
        query = [(k, v) for k, v in urllib.parse.parse_qsl(req.query_string, keep_blank_values=True)
                 if k.lower() != "$skiptoken"]
        query.append(("$skipToken", str(start + size)))
        body["nextLink"] = f"{base_url(req)}{req.path}?{urllib.parse.urlencode(query, safe=chr(39) + '$()')}"
    return body


def record_api_version(state, resource_type, api_version):
    """Remember every api-version seen per resource type (lower-case key, e.g.
    "microsoft.hybridcompute/machines"): never rejected, always recorded."""
    seen = state.data.setdefault("api_versions", {}).setdefault(resource_type.lower(), [])
    if api_version and api_version not in seen:
        seen.append(api_version)
        state.mark_dirty()


# -- routing ------------------------------------------------------------------------------


def handle(app, req):
    from tests.emulator import authorization, containerservice, hybridcompute

    state = app.state
    if not req.q("api-version"):
        fail(400, "MissingApiVersionParameter",
             "The api-version query parameter (?api-version=) is required for all requests.")
    caller = authenticate(state, req)
    seg, low = req.segments, req.lower
    if len(low) >= 2 and low[0] == "subscriptions":  # subscription-level: ARM's buckets apply
        throttling.admit(state, req, caller.principal_id, seg[1])

    # {scope}/providers/Microsoft.Authorization/{roleAssignments|roleDefinitions|permissions}[/...]
    for i in range(len(low) - 2, -1, -1):
        if low[i] == "providers" and low[i + 1] == "microsoft.authorization":
            scope = "/" + "/".join(seg[:i]) if i else ""
            if scope.lower().startswith("/subscriptions/"):
                require_subscription(state, seg[1])
            record_api_version(state, "Microsoft.Authorization/" + (seg[i + 2] if len(seg) > i + 2 else ""),
                               req.q("api-version"))
            return authorization.handle(app, req, caller, scope, seg[i + 2:])

    if len(low) < 2 or low[0] != "subscriptions":
        fail(404, "NotFound", f"No HTTP resource was found that matches the request URI '{req.path}'.")
    sub = seg[1]
    require_subscription(state, sub)
    if len(low) == 2 and req.method == "GET":
        return Response.json(200, {"id": f"/subscriptions/{sub}", "subscriptionId": sub, "tenantId": c.TENANT_ID,
                                   "displayName": "aks-flex-node emulator", "state": "Enabled"})

    if len(low) >= 4 and low[2] == "resourcegroups":
        rg = seg[3]
        if len(low) == 4:
            return resource_group(app, req, caller, sub, rg)
        if len(low) >= 7 and low[4] == "providers":
            require_resource_group(state, sub, rg)
            namespace, rtype = seg[5], low[6]
            require_registered(state, sub, namespace)
            record_api_version(state, f"{namespace}/{seg[6]}", req.q("api-version"))
            if low[5] == "microsoft.hybridcompute" and rtype == "machines":
                return hybridcompute.handle(app, req, caller, sub, rg, seg[7:])
            if low[5] == "microsoft.containerservice" and rtype == "managedclusters":
                return containerservice.handle(app, req, caller, sub, rg, seg[7:])
            fail(400, "InvalidResourceType",
                 f"The resource type '{seg[6]}' could not be found in the namespace '{namespace}' "
                 f"for api version '{req.q('api-version')}'.")

    if len(low) >= 4 and low[2] == "providers":
        namespace = seg[3]
        if len(low) == 4 or (len(low) == 5 and low[4] == "register"):
            return provider(app, req, sub, namespace, register=len(low) == 5)
        require_registered(state, sub, namespace)
        if low[3] == "microsoft.hybridcompute":
            record_api_version(state, f"{namespace}/{seg[4]}", req.q("api-version"))
            return hybridcompute.handle_subscription_level(app, req, caller, sub, seg[4:])
        if low[3] == "microsoft.containerservice" and low[4:] == ["managedclusters"]:
            return containerservice.list_for_subscription(app, req, caller, sub)
    fail(404, "NotFound", f"No HTTP resource was found that matches the request URI '{req.path}'.")


def resource_group(app, req, caller, sub, rg):
    state = app.state
    rid = f"/subscriptions/{sub}/resourceGroups/{rg}"
    if req.method in ("GET", "HEAD"):
        authorize(state, caller, rid, "Microsoft.Resources/subscriptions/resourceGroups/read")
        record = state.data["resource_groups"].get(rid.lower())
        if record is None:
            fail(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
        return Response.json(200, {"id": record["id"], "name": record["name"], "type": "Microsoft.Resources/resourceGroups",
                                   "location": record["location"], "properties": {"provisioningState": "Succeeded"}})
    fail(405, "MethodNotAllowed", f"The HTTP method '{req.method}' is not supported for resource groups here.")


def provider(app, req, sub, namespace, register):
    """GET .../providers/{ns} and POST .../providers/{ns}/register (the auto-registration policy)."""
    state = app.state
    key = f"{sub}/{namespace}".lower()
    if register:
        if req.method != "POST":
            fail(405, "MethodNotAllowed", "Provider registration takes POST.")
        state.data["providers"][key] = "Registered"
        state.mark_dirty()
    registered = (namespace.lower() not in state.settings["unregistered_providers"]
                  or state.data["providers"].get(key) == "Registered")
    return Response.json(200, {
        "id": f"/subscriptions/{sub}/providers/{namespace}",
        "namespace": namespace,
        "registrationState": "Registered" if registered else "NotRegistered",
        "registrationPolicy": "RegistrationRequired",
        "resourceTypes": [],
    })
