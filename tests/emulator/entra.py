"""Microsoft Entra ID (AAD) v2.0 endpoints, as far as client-credential clients need them.

Wire facts from MSAL for Python (AzureAD/microsoft-authentication-library-for-python,
msal/authority.py) and Learn's client credentials flow
(https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow):
the tenant discovery document must carry authorization_endpoint and token_endpoint (MSAL
raises KeyError otherwise); the token POST is form-encoded; errors are
{"error", "error_description": "AADSTS...", "error_codes", ...}.
Access tokens are opaque random strings the emulator remembers (the SDKs never decode them).
"""

import base64
import json
import time
import urllib.parse
import uuid

from tests.emulator import clock, constants as c
from tests.emulator.httpbase import HttpError, Response

# Resources a client may ask a token for (scope minus "/.default").
KNOWN_RESOURCES = {
    "https://management.azure.com": c.ARM_AUDIENCE,
    "https://management.core.windows.net": "https://management.core.windows.net",
    c.AKS_SERVER_APP_ID: c.AKS_SERVER_APP_ID,
    f"api://{c.AKS_SERVER_APP_ID}": c.AKS_SERVER_APP_ID,
    "https://graph.microsoft.com": "https://graph.microsoft.com",
}
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def base_url(req):
    return f"https://{req.header('Host', '127.0.0.1')}"


def aad_error(status, error, code, message):
    now = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(clock.now()))
    trace, correlation = str(uuid.uuid4()), str(uuid.uuid4())
    body = {
        "error": error,
        "error_description": f"AADSTS{code}: {message}\r\nTrace ID: {trace}\r\nCorrelation ID: {correlation}\r\nTimestamp: {now}",
        "error_codes": [code],
        "timestamp": now,
        "trace_id": trace,
        "correlation_id": correlation,
        "error_uri": f"https://login.microsoftonline.com/error?code={code}",
    }
    return HttpError(Response.json(status, body))


def handle(app, req):
    seg, low = req.segments, req.lower
    if low[:3] == ["common", "discovery", "instance"]:
        return _instance_discovery(req)
    if not seg:
        raise HttpError(Response.json(404, {"error": "not_found", "error_description": "No such endpoint."}))
    tenant = seg[0]
    rest = low[1:]
    if rest in (["v2.0", ".well-known", "openid-configuration"], [".well-known", "openid-configuration"]):
        _require_tenant(app, tenant)
        return Response.json(200, _discovery_document(req, tenant))
    if rest == ["discovery", "v2.0", "keys"]:
        return Response.json(200, {"keys": []})
    if rest in (["oauth2", "v2.0", "token"], ["oauth2", "token"]) and req.method == "POST":
        _require_tenant(app, tenant)
        return _token(app, req, tenant, v1=rest == ["oauth2", "token"])
    raise HttpError(Response.json(404, {"error": "not_found", "error_description": f"No endpoint at {req.path}."}))


def _require_tenant(app, tenant):
    if tenant.lower() != app.state.data["tenant_id"].lower():
        raise aad_error(400, "invalid_tenant", 90002,
                        f"Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are "
                        "signing into the correct cloud.")


def _discovery_document(req, tenant):
    base = f"{base_url(req)}/{tenant}"
    return {
        "token_endpoint": f"{base}/oauth2/v2.0/token",
        "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt", "client_secret_basic"],
        "jwks_uri": f"{base_url(req)}/{tenant}/discovery/v2.0/keys",
        "response_modes_supported": ["query", "fragment", "form_post"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "issuer": f"{base}/v2.0",
        "request_uri_parameter_supported": False,
        "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
        "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
        "end_session_endpoint": f"{base}/oauth2/v2.0/logout",
        "tenant_region_scope": "EU",
        "cloud_instance_name": "microsoftonline.com",
        "cloud_graph_host_name": "graph.windows.net",
        "msgraph_host": "graph.microsoft.com",
    }


def _instance_discovery(req):
    """Answer like AAD's instance discovery, for clients that do not disable it (MSAL's
    msal/authority.py calls it for a host it does not know)."""
    endpoint = req.q("authorization_endpoint") or f"{base_url(req)}/common/oauth2/v2.0/authorize"
    parts = urllib.parse.urlsplit(endpoint)
    tenant = (parts.path.strip("/").split("/") or ["common"])[0] or "common"
    host = req.header("Host", "127.0.0.1")
    return Response.json(200, {
        "tenant_discovery_endpoint": f"https://{host}/{tenant}/v2.0/.well-known/openid-configuration",
        "api-version": "1.1",
        "metadata": [{"preferred_network": host, "preferred_cache": host, "aliases": [host]}],
    })


def _b64json(part):
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def _check_assertion(assertion, client_id, tenant):
    """A well-formed client assertion JWT for client_id; the signature is not checked."""
    parts = (assertion or "").split(".")
    try:
        if len(parts) != 3:
            raise ValueError("expected three dot-separated parts")
        header, claims = _b64json(parts[0]), _b64json(parts[1])
        if "alg" not in header:
            raise ValueError("header has no alg")
        if claims.get("iss") != client_id or claims.get("sub") != client_id:
            raise ValueError("iss and sub must both be the client ID")
        if not str(claims.get("aud", "")).rstrip("/").endswith(f"/{tenant}/oauth2/v2.0/token"):
            raise ValueError(f"aud {claims.get('aud')!r} is not this tenant's token endpoint")
        if float(claims.get("exp", 0)) < clock.now():
            raise ValueError("the assertion has expired")
    except (ValueError, TypeError) as e:
        raise aad_error(401, "invalid_client", 700027,
                        f"The certificate with identifier used to sign the client assertion is not registered "
                        f"on application {client_id}, or the assertion is malformed: {e}.")


def _token(app, req, tenant, v1):
    state = app.state
    try:
        form = dict(urllib.parse.parse_qsl(req.body.decode(), keep_blank_values=True))
    except UnicodeDecodeError:
        form = {}
    grant = form.get("grant_type")
    if grant != "client_credentials":
        raise aad_error(400, "unsupported_grant_type", 70003,
                        f"The app requested an unsupported grant type '{grant}'; the emulator supports client_credentials.")
    client_id = form.get("client_id", "")
    principal = state.principal_by_client_id(client_id)
    if principal is None:
        raise aad_error(400, "unauthorized_client", 700016,
                        f"Application with identifier '{client_id}' was not found in the directory '{tenant}'.")
    if form.get("client_assertion") is not None:
        if form.get("client_assertion_type") != JWT_BEARER or not principal["certificate"]:
            raise aad_error(401, "invalid_client", 700027,
                            f"Client assertion failed signature validation: no certificate is registered on "
                            f"application {client_id}.")
        _check_assertion(form["client_assertion"], client_id, tenant)
    elif principal["secret"] is None or form.get("client_secret") != principal["secret"]:
        raise aad_error(401, "invalid_client", 7000215,
                        "Invalid client secret provided. Ensure the secret being sent in the request is the client "
                        f"secret value, not the client secret ID, for a secret added to app '{client_id}'.")
    if v1:
        resource = form.get("resource", "")
    else:
        scopes = [s for s in form.get("scope", "").split() if s not in ("openid", "profile", "offline_access")]
        if len(scopes) != 1 or not scopes[0].endswith("/.default"):
            raise aad_error(400, "invalid_scope", 1002012,
                            f"The provided value for scope {form.get('scope', '')} is not valid. Client credential "
                            "flows must have a scope value with /.default suffixed to the resource identifier "
                            "(application ID URI).")
        resource = scopes[0][: -len("/.default")]
    audience = KNOWN_RESOURCES.get(resource.rstrip("/"))
    if audience is None:
        raise aad_error(400, "invalid_resource", 500011,
                        f"The resource principal named {resource} was not found in the tenant named {tenant}.")
    lifetime = state.settings["arm_token_lifetime"]
    token, _ = state.mint_token(principal["object_id"], audience, lifetime, "entra")
    req.detail = {"client_id": client_id, "audience": audience}
    return Response.json(200, {"token_type": "Bearer", "expires_in": lifetime, "ext_expires_in": lifetime,
                               "access_token": token})
