"""Fixtures shared by the tests of azure/ and of the commands that call Azure: the emulator, an operator credential and clients.

Everything talks to tests/emulator over loopback HTTPS with the real SDK clients; the only
thing faked is Azure itself (and host commands, through tests/fakes/bin, and `az` below).

On an azure-identity that cannot turn MSAL's instance discovery off (1.7.0, Ubuntu 22.04's:
aks_flex_node/azure/sdk_compat.py) the library refuses any custom authority, the emulator's
included; there `endpoints.authority` is the public cloud's, whose name the suite routes to
the emulator (tests/emulator_fixtures.py, Emulator.route_entra).
"""

import json
import os
import sys
import textwrap

import pytest

from aks_flex_node.azure import auth
from aks_flex_node.azure.clients import Clients
from aks_flex_node.clouds import CUSTOM, CloudEndpoints
from tests.emulator import constants as C
from tests.emulator_fixtures import emulator, fake_host, fresh_emulator  # noqa: F401  (fixtures)
from tests.emulator_fixtures import entra_by_public_name

__all__ = ["emulator", "fresh_emulator", "fake_host", "no_proxy", "endpoints", "secret_file", "operator",
           "azure_clients", "put_machine", "settings_for", "reader_clients", "node_clients", "fake_az",
           "NO_DISCOVERY_SWITCH"]

# True on azure-identity 1.7.0 (Ubuntu 22.04's): the library refuses a custom authority.
NO_DISCOVERY_SWITCH = entra_by_public_name()

# The stand-in `az account get-access-token --output json --resource R [--tenant T]`: the
# token comes from the emulator's token endpoint (client credentials), the output has the
# fields of az's JSON (azure-cli's `az account get-access-token`; azure-identity reads
# accessToken and expiresOn, newer releases expires_on). Each argv is appended to $FAKE_AZ_LOG.
FAKE_AZ = textwrap.dedent("""\
    import datetime, json, os, ssl, sys, urllib.parse, urllib.request
    args = sys.argv[1:]
    with open(os.environ["FAKE_AZ_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    if args[:2] != ["account", "get-access-token"]:
        sys.exit("fake az: only account get-access-token")
    conf = json.loads(os.environ["FAKE_AZ_LOGIN"])
    resource = args[args.index("--resource") + 1]
    tenant = args[args.index("--tenant") + 1] if "--tenant" in args else conf["tenant"]
    body = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": conf["client_id"],
                                   "client_secret": conf["secret"], "scope": resource + "/.default"}).encode()
    context = ssl.create_default_context(cafile=conf["ca_bundle"])
    try:
        with urllib.request.urlopen(f"{conf['authority']}/{tenant}/oauth2/v2.0/token", body, context=context) as r:
            answer = json.load(r)
    except urllib.error.HTTPError as err:
        sys.exit("ERROR: " + err.read().decode())
    expires = datetime.datetime.now() + datetime.timedelta(seconds=int(answer["expires_in"]))
    print(json.dumps({"accessToken": answer["access_token"], "expiresOn": expires.strftime("%Y-%m-%d %H:%M:%S.%f"),
                      "expires_on": int(expires.timestamp()), "subscription": conf["subscription"],
                      "tenant": tenant, "tokenType": "Bearer"}))
    """)



@pytest.fixture
def no_proxy(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def endpoints(fresh_emulator, no_proxy):
    # The emulator's tokens are for the public ARM audience whatever the base URL
    # (the azure-mgmt-* clients' default credential_scopes), so the scope is given explicitly.
    return CloudEndpoints(CUSTOM, fresh_emulator.arm, fresh_emulator.authority, C.ARM_SCOPE, fresh_emulator.ca_bundle)


def write_secret(path, secret, mode=0o600):
    path.write_text(secret + "\n")
    path.chmod(mode)
    return path


@pytest.fixture
def secret_file(tmp_path):
    return write_secret(tmp_path / "sp-secret", C.SP_CLIENT_SECRET)


def settings_for(endpoints, secret_path, client_id=C.SP_CLIENT_ID):
    return auth.AuthSettings(
        method="service-principal",
        tenant_id=C.TENANT_ID,
        client_id=client_id,
        client_secret_file=str(secret_path),
        authority=endpoints.authority,
        ca_bundle=endpoints.ca_bundle,
    )


@pytest.fixture
def fake_az(tmp_path, monkeypatch, endpoints, fresh_emulator):
    """`az` on PATH, logged in as the service principal (client_id, secret) given to
    login(); returns the log of its argv lists."""
    bindir = tmp_path / "az-bin"
    bindir.mkdir()
    script = bindir / "az"
    script.write_text(f"#!{sys.executable}\n" + FAKE_AZ)
    script.chmod(0o755)
    log = tmp_path / "az.log"
    log.write_text("")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_AZ_LOG", str(log))
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))  # ours (the ownership check)

    class FakeAz:
        def login(self, client_id=C.SP_CLIENT_ID, secret=C.SP_CLIENT_SECRET):
            monkeypatch.setenv("FAKE_AZ_LOGIN", json.dumps({
                "client_id": client_id, "secret": secret, "tenant": C.TENANT_ID, "subscription": C.SUBSCRIPTION_ID,
                "authority": fresh_emulator.entra.rstrip("/"), "ca_bundle": endpoints.ca_bundle}))

        def calls(self):
            return [json.loads(line) for line in log.read_text().splitlines()]

    return FakeAz()


def _operator_credential(endpoints, secret_path, secret, client_id):
    return auth.credential(settings_for(endpoints, write_secret(secret_path, secret), client_id))


@pytest.fixture
def operator(endpoints, tmp_path):
    return _operator_credential(endpoints, tmp_path / "sp-secret", C.SP_CLIENT_SECRET, C.SP_CLIENT_ID)


@pytest.fixture
def azure_clients(endpoints, operator):
    # polling_interval=0: the emulator's LROs finish at once (azure-core ignores Retry-After: 0 and
    # polls at polling_interval, 30 s by default: azure/core/polling/base_polling.py).
    with Clients(endpoints, operator, polling_interval=0) as clients:
        yield clients


def _clients_of(endpoints, secret_path, secret, client_id):
    cred = _operator_credential(endpoints, secret_path, secret, client_id)
    return Clients(endpoints, cred, polling_interval=0)


@pytest.fixture
def reader_clients(endpoints, tmp_path):
    """Clients for a principal that is only Reader on the subscription."""
    with _clients_of(endpoints, tmp_path / "reader-secret", C.READER_SP_CLIENT_SECRET,
                     C.READER_SP_CLIENT_ID) as clients:
        yield clients


@pytest.fixture
def node_clients(endpoints, tmp_path):
    """Clients for the node's service principal: only the Flex Node Agent Role on flexpool."""
    with _clients_of(endpoints, tmp_path / "node-secret", C.NODE_SP_CLIENT_SECRET,
                     C.NODE_SP_CLIENT_ID) as clients:
        yield clients


def put_machine(emulator, name, resource_group=C.ARC_RG, api_version="2024-07-10"):
    """Create an Arc machine the way `azcmagent connect` does (a PUT with SystemAssigned)."""
    path = f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{resource_group}/providers/Microsoft.HybridCompute/machines/{name}"
    status, _, body = emulator.arm_call(
        "PUT", path, api_version, {"location": C.LOCATION, "identity": {"type": "SystemAssigned"}, "properties": {}}
    )
    assert status in (200, 201), body
    return body
