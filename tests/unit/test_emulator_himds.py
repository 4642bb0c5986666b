"""The HIMDS challenge protocol (Learn:
https://learn.microsoft.com/azure/azure-arc/servers/managed-identity-authentication) with a
stdlib client, and what its tokens are good for: the kube-apiserver stand-in, once RBAC has
propagated."""

import os
import stat
import time
import urllib.parse
import uuid

import pytest

from tests.emulator import constants as C

ROLE = f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/Microsoft.Authorization/roleDefinitions/{{}}"


def token_url(emu, resource=C.AKS_SERVER_APP_ID, api_version="2020-06-01"):
    return f"{emu.himds}?api-version={api_version}&resource={urllib.parse.quote(resource, safe='')}"


def challenge(emu, **kw):
    status, headers, body = emu.http("GET", token_url(emu, **kw), headers={"Metadata": "true"})
    assert status == 401, body
    scheme, _, realm = headers["WWW-Authenticate"].partition(" ")
    assert scheme == "Basic" and realm.startswith("realm=")
    return realm[len("realm="):]


def himds_token(emu, **kw):
    key_file = challenge(emu, **kw)
    with open(key_file) as f:
        key = f.read()
    status, _, body = emu.http("GET", token_url(emu, **kw), headers={"Metadata": "true", "Authorization": f"Basic {key}"})
    assert status == 200, body
    return body


def connect(emu, name="himds-node"):
    """A connected machine bound to this host's HIMDS, as the fake azcmagent leaves it."""
    status, _, machine = emu.arm_call(
        "PUT", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.CLUSTER_RG}/providers/"
               f"Microsoft.HybridCompute/machines/{name}", "2024-07-10", {"location": C.LOCATION})
    assert status == 200
    emu.bind_himds(machine["id"])
    return machine


def assign(emu, principal, role, scope=C.CLUSTER_ID):
    status, _, body = emu.arm_call(
        "PUT", f"{scope}/providers/Microsoft.Authorization/roleAssignments/{uuid.uuid4()}", "2022-04-01",
        {"properties": {"roleDefinitionId": ROLE.format(role), "principalId": principal,
                        "principalType": "ServicePrincipal"}})
    assert status == 201, body
    return body


def test_challenge_writes_a_private_single_use_key(fresh_emulator):
    connect(fresh_emulator)
    key_file = challenge(fresh_emulator)
    assert os.path.dirname(key_file) == fresh_emulator.himds_key_dir and key_file.endswith(".key")
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    with open(key_file) as f:
        key = f.read()
    assert key.startswith(C.HIMDS_KEY_PREFIX)
    headers = {"Metadata": "true", "Authorization": f"Basic {key}"}
    status, _, body = fresh_emulator.http("GET", token_url(fresh_emulator), headers=headers)
    assert status == 200
    assert not os.path.exists(key_file)  # consumed
    status, _, again = fresh_emulator.http("GET", token_url(fresh_emulator), headers=headers)
    assert status == 401 and again["error"] == "invalid_client"


def test_token_response_is_imds_shaped_with_numbers_as_strings(fresh_emulator):
    connect(fresh_emulator)
    for api_version in ("2019-11-01", "2020-06-01"):
        body = himds_token(fresh_emulator, api_version=api_version)
        assert body["token_type"] == "Bearer" and body["resource"] == C.AKS_SERVER_APP_ID
        assert body["access_token"].startswith(C.TOKEN_PREFIX)
        for key in ("expires_in", "expires_on", "not_before", "ext_expires_in"):
            assert isinstance(body[key], str) and body[key].isdigit(), key
        assert abs(int(body["expires_on"]) - (time.time() + 3600)) < 60
    assert fresh_emulator.state()["himds"]["tokens_issued"] == 2


def test_key_expires_after_the_ttl(fresh_emulator):
    connect(fresh_emulator)
    fresh_emulator.settings(himds_key_ttl=60)
    key_file = challenge(fresh_emulator)
    with open(key_file) as f:
        key = f.read()
    fresh_emulator.advance_clock(61)
    status, _, _ = fresh_emulator.http("GET", token_url(fresh_emulator),
                                       headers={"Metadata": "true", "Authorization": f"Basic {key}"})
    assert status == 401 and not os.path.exists(key_file)


@pytest.mark.parametrize("url_args,headers,status,fragment", [
    ({}, {}, 400, "Metadata: true"),
    ({"api_version": "2018-02-01"}, {"Metadata": "true"}, 400, "api-version"),
    ({"resource": "https://not.a.resource.example"}, {"Metadata": "true"}, 400, "AADSTS500011"),
])
def test_bad_requests_say_what_is_wrong(fresh_emulator, url_args, headers, status, fragment):
    connect(fresh_emulator)
    got, _, body = fresh_emulator.http("GET", token_url(fresh_emulator, **url_args), headers=headers)
    assert got == status and fragment in body["error_description"]


def test_no_bound_machine_or_a_deleted_one_is_404(fresh_emulator):
    status, _, body = fresh_emulator.http("GET", token_url(fresh_emulator), headers={"Metadata": "true"})
    assert status == 404 and "not connected" in body["error_description"]
    machine = connect(fresh_emulator)
    fresh_emulator.arm_call("DELETE", machine["id"], "2024-07-10")
    status, _, body = fresh_emulator.http("GET", token_url(fresh_emulator), headers={"Metadata": "true"})
    assert status == 404 and "no longer exists" in body["error_description"]


def api(emu, token, path="/api/v1/nodes", server=None):
    return emu.http("GET", f"{server or emu.apiserver}{path}", headers={"Authorization": f"Bearer {token}"})


def test_apiserver_honours_the_role_only_after_propagation(fresh_emulator):
    principal = connect(fresh_emulator)["identity"]["principalId"]
    fresh_emulator.settings(rbac_propagation_delay=600)  # the emulator's clock: moved, never waited for
    token = himds_token(fresh_emulator)["access_token"]
    status, _, body = api(fresh_emulator, token)
    assert status == 403 and f'User "{principal}"' in body["message"] and body["kind"] == "Status"

    assign(fresh_emulator, principal, C.ROLE_READER)  # Reader is not enough for the Kubernetes API
    # Nor is the Flex Node Agent Role: no DataActions (Azure/AKSFlexNode docs/usage/getting-started.md).
    assign(fresh_emulator, principal, C.ROLE_AKS_FLEX_NODE_AGENT)
    fresh_emulator.advance_clock(601)
    assert api(fresh_emulator, token)[0] == 403
    assign(fresh_emulator, principal, C.ROLE_AKS_RBAC_CLUSTER_ADMIN)
    status, _, _ = api(fresh_emulator, token)
    assert status == 403  # not propagated yet
    fresh_emulator.advance_clock(601)
    status, _, body = api(fresh_emulator, token)
    assert status == 200 and body["kind"] == "NodeList"
    # The other cluster's apiserver is not covered by an assignment at this cluster's scope.
    status, _, _ = api(fresh_emulator, token, server=fresh_emulator.apiservers[C.CLUSTER2_ID])
    assert status == 403


def test_apiserver_honours_a_role_at_a_parent_scope(fresh_emulator):
    principal = connect(fresh_emulator)["identity"]["principalId"]
    fresh_emulator.settings(rbac_propagation_delay=0)
    assign(fresh_emulator, principal, C.ROLE_AKS_RBAC_CLUSTER_ADMIN,
           scope=f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.CLUSTER_RG}")
    token = himds_token(fresh_emulator)["access_token"]
    assert api(fresh_emulator, token)[0] == 200
    assert api(fresh_emulator, token, server=fresh_emulator.apiservers[C.CLUSTER2_ID])[0] == 403


def test_apiserver_refuses_other_audiences_and_expired_tokens(fresh_emulator):
    connect(fresh_emulator)
    arm_token = himds_token(fresh_emulator, resource="https://management.azure.com/")["access_token"]
    assert api(fresh_emulator, arm_token)[0] == 401
    expired = fresh_emulator.mint_token(C.SP_OBJECT_ID, lifetime=-1)
    assert api(fresh_emulator, expired)[0] == 401
    assert api(fresh_emulator, "emuat.made-up")[0] == 401
    # Anonymous discovery of /version is allowed, as on a real apiserver.
    status, _, version = fresh_emulator.http("GET", f"{fresh_emulator.apiserver}/version")
    assert status == 200 and version["gitVersion"] == f"v{C.K8S_VERSION}"


def test_machine_token_for_arm_acts_as_the_machine(fresh_emulator):
    principal = connect(fresh_emulator)["identity"]["principalId"]
    arm_token = himds_token(fresh_emulator, resource="https://management.azure.com/")["access_token"]
    path = f"{C.CLUSTER_ID}"
    status, _, body = fresh_emulator.arm_call("GET", path, "2026-08-01", token=arm_token)
    assert status == 403 and principal in body["error"]["message"]
    assign(fresh_emulator, principal, C.ROLE_READER)
    assert fresh_emulator.arm_call("GET", path, "2026-08-01", token=arm_token)[0] == 200


def test_azure_identity_arc_credential_reads_the_challenge_path(fresh_emulator, monkeypatch):
    import azure.identity
    from azure.identity import ManagedIdentityCredential

    major, minor = (int(p) for p in azure.identity.__version__.split(".")[:2])
    if (major, minor) >= (1, 19):
        pytest.skip("azure-identity >= 1.19 hands Arc to MSAL, which reads keys only from "
                    "/var/opt/azcmagent/tokens (msal/managed_identity.py)")
    connect(fresh_emulator)
    monkeypatch.setenv("IDENTITY_ENDPOINT", fresh_emulator.himds)
    monkeypatch.setenv("IMDS_ENDPOINT", fresh_emulator.himds.split("/metadata")[0])
    monkeypatch.delenv("IDENTITY_HEADER", raising=False)
    token = ManagedIdentityCredential().get_token(f"{C.AKS_SERVER_APP_ID}/.default")
    assert token.token.startswith(C.TOKEN_PREFIX)


def test_unanswered_challenge_keys_are_removed_on_reset(fresh_emulator):
    connect(fresh_emulator)
    key_file = challenge(fresh_emulator)
    assert os.path.exists(key_file)
    fresh_emulator.reset()
    assert not os.path.exists(key_file) and os.listdir(fresh_emulator.himds_key_dir) == []
