"""Arc HIMDS (Hybrid Instance Metadata Service) token endpoint, plain HTTP like the real one.

The challenge protocol (Learn:
https://learn.microsoft.com/azure/azure-arc/servers/managed-identity-authentication): a GET
with `Metadata: true` and no Authorization gets 401 + `WWW-Authenticate: Basic
realm=<key_dir>/<random>.key` after a random secret is written to that file (0600); the same
GET with `Authorization: Basic <file contents>` gets an IMDS-style token (numbers as
strings) for the identity of the machine `azcmagent connect` bound to this host. A key is
single-use and expires after `himds_key_ttl` seconds (~60 s is a reported figure; Learn
documents no lifetime: unverified).

Many hosts on one emulator (the fleet simulation, tests/fleet): the same listener also
serves /hosts/<machine name>/metadata/identity/oauth2/token, the HIMDS of the host whose
Arc machine has that resource name. Its challenge keys go to <key dir>/hosts/<name>/ (the
host's /var/opt/azcmagent/tokens) and it serves that machine's identity as long as the
machine exists: what `azcmagent connect` on that host installed. The single-host endpoint
keeps its bind/unbind model.
"""

import os
import re
import secrets

from tests.emulator import clock, constants as c
from tests.emulator.entra import KNOWN_RESOURCES
from tests.emulator.httpbase import HttpError, Response

TOKEN_PATH = "/metadata/identity/oauth2/token"
HOST_PATH = re.compile(r"^/hosts/([A-Za-z0-9][A-Za-z0-9-]{0,62})" + re.escape(TOKEN_PATH) + "$")
API_VERSIONS = ("2019-11-01", "2020-06-01")  # Learn's Arc samples use both: accept both


def _error(status, error, description, headers=None):
    return HttpError(Response.json(status, {"error": error, "error_description": description}, headers))


def _expire_keys(state):
    now = clock.now()
    keys = state.data["himds"]["keys"]
    for secret, info in list(keys.items()):
        if now - info["created"] > state.settings["himds_key_ttl"]:
            _forget_key(keys, secret)
            state.mark_dirty()


def _forget_key(keys, secret):
    info = keys.pop(secret, None)
    if info:
        try:
            os.unlink(info["path"])
        except FileNotFoundError:
            pass


def host_key_dir(app, host):
    """Where the HIMDS of fleet host `host` writes its challenge keys (None: the single host's)."""
    return app.himds_key_dir if host is None else os.path.join(app.himds_key_dir, "hosts", host)


def _challenge(app, host=None):
    state = app.state
    key_dir = host_key_dir(app, host)
    os.makedirs(key_dir, mode=0o700, exist_ok=True)
    secret = c.HIMDS_KEY_PREFIX + secrets.token_hex(32)
    path = os.path.join(key_dir, secrets.token_hex(16) + ".key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret)
    state.data["himds"]["keys"][secret] = {"path": path, "created": clock.now(), "host": host}
    state.data["himds"]["challenges"] += 1
    state.mark_dirty()
    raise _error(401, "unauthorized_client", "Authorization required: read the key file named in WWW-Authenticate "
                                             "and send its contents as 'Authorization: Basic <key>'.",
                 {"WWW-Authenticate": f"Basic realm={path}"})


def handle(app, req):
    state = app.state
    host_match = HOST_PATH.match(req.path)
    host = host_match.group(1) if host_match else None
    if req.path != TOKEN_PATH and host is None:
        raise _error(404, "not_found", f"No HIMDS endpoint at {req.path}; tokens are at {TOKEN_PATH}.")
    if req.method != "GET":
        raise _error(405, "invalid_request", f"Method {req.method} is not allowed; use GET.")
    if (req.header("Metadata") or "").lower() != "true":
        raise _error(400, "invalid_request", "Required metadata header not specified: expected 'Metadata: true'.")
    api_version = req.q("api-version")
    if api_version not in API_VERSIONS:
        raise _error(400, "invalid_request",
                     f"api-version = {api_version!r}: expected one of {', '.join(API_VERSIONS)}.")
    resource = req.q("resource")
    if not resource:
        raise _error(400, "invalid_request", "Required query variable 'resource' is missing.")
    audience = KNOWN_RESOURCES.get(resource.rstrip("/").removesuffix("/.default"))
    if audience is None:
        raise _error(400, "invalid_resource",
                     f"AADSTS500011: The resource principal named {resource} was not found in the tenant.")

    if host is not None:
        bound = next((m["id"] for m in state.data["machines"].values() if m["name"].lower() == host.lower()),
                     None)
        if bound is None:
            raise _error(404, "not_found", f"No Azure Arc identity on host {host}: no Arc machine of that name "
                                           "(azcmagent connect has not run there).")
    else:
        bound = state.data["himds"]["bound_machine"]
    machine = state.data["machines"].get((bound or "").lower())
    if bound is None:
        raise _error(404, "not_found", "No Azure Arc identity on this host: the machine is not connected "
                                       "(azcmagent connect has not bound a machine).")
    if machine is None:
        raise _error(404, "not_found", f"The Arc machine {bound} this host is connected to no longer exists; "
                                       "its managed identity is gone.")

    _expire_keys(state)
    header = req.header("Authorization")
    if not header:
        _challenge(app, host)
    scheme, _, key = header.partition(" ")
    keys = state.data["himds"]["keys"]
    if scheme.lower() != "basic" or key.strip() not in keys or keys[key.strip()].get("host") != host:
        raise _error(401, "invalid_client", "The key is unknown, already used or expired: request a new challenge.")
    _forget_key(keys, key.strip())  # single use

    lifetime = state.settings["himds_token_lifetime"]
    token, record = state.mint_token(machine["principal_id"], audience, lifetime, "himds")
    state.data["himds"]["tokens_issued"] += 1
    principal = state.principal(machine["principal_id"]) or {}
    now = int(record["issued"])
    return Response.json(200, {
        "access_token": token,
        "client_id": principal.get("client_id", machine["principal_id"]),
        "expires_in": str(lifetime),
        "expires_on": str(record["expires_on"]),
        "ext_expires_in": str(lifetime),
        "not_before": str(now),
        "resource": resource,
        "token_type": "Bearer",
    })
