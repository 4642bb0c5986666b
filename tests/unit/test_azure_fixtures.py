"""Fixtures shared by the test_azure_* modules: the emulator, an operator credential and clients.

Everything talks to tests/emulator over loopback HTTPS with the real SDK clients; the only
thing faked is Azure itself (and host commands, through tests/fakes/bin).
"""

import pytest

from aks_flex_node.azure import auth
from aks_flex_node.azure.clients import Clients
from aks_flex_node.clouds import CUSTOM, CloudEndpoints
from tests.emulator import constants as C
from tests.emulator_fixtures import emulator, fake_host, fresh_emulator  # noqa: F401  (fixtures)

__all__ = ["emulator", "fresh_emulator", "fake_host", "no_proxy", "endpoints", "secret_file", "operator",
           "azure_clients", "put_machine", "settings_for", "reader_clients", "node_clients"]


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
def operator(endpoints, secret_file):
    return auth.credential(settings_for(endpoints, secret_file))


@pytest.fixture
def azure_clients(endpoints, operator):
    # polling_interval=0: the emulator's LROs finish at once (azure-core ignores Retry-After: 0 and
    # polls at polling_interval, 30 s by default: azure/core/polling/base_polling.py).
    with Clients(endpoints, operator, polling_interval=0) as clients:
        yield clients


def _clients_of(endpoints, secret_path, secret, client_id):
    cred = auth.credential(settings_for(endpoints, write_secret(secret_path, secret), client_id))
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
