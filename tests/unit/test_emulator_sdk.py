"""The real Azure SDK clients (whichever versions this interpreter has) against the emulator.

What the emulator must get right for each SDK release: api-versions, status codes the
generated code accepts (machine DELETE differs by release: azure-mgmt-hybridcompute 10.x
begin_delete takes 202/204, 9.x/8.x delete 200/204),
error codes mapped to exceptions, and the retry behaviour faults provoke.
"""

import base64
import datetime
import time
import uuid

import pytest
import yaml
from azure.core.exceptions import (ClientAuthenticationError, HttpResponseError, ResourceExistsError,
                                   ResourceNotFoundError, ServiceRequestError, ServiceResponseError)
from azure.identity import CertificateCredential, ClientSecretCredential
from azure.mgmt.authorization import AuthorizationManagementClient
from azure.mgmt.containerservice import ContainerServiceClient
from azure.mgmt.hybridcompute import HybridComputeManagementClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from aks_flex_node.azure import arc, sdk_compat
from tests.emulator import constants as C

MACHINES = "/providers/Microsoft.HybridCompute/machines/"


def role_id(guid):
    return f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/Microsoft.Authorization/roleDefinitions/{guid}"


class Clients:
    def __init__(self, emu, client_id=C.SP_CLIENT_ID, secret=C.SP_CLIENT_SECRET):
        self.credential = ClientSecretCredential(C.TENANT_ID, client_id, secret, **emu.credential_kwargs())
        kw = emu.mgmt_kwargs()
        self.hc = HybridComputeManagementClient(self.credential, C.SUBSCRIPTION_ID, **kw)
        self.auth = AuthorizationManagementClient(self.credential, C.SUBSCRIPTION_ID, **kw,
                                                  **sdk_compat.authorization_options(AuthorizationManagementClient))
        self.cs = ContainerServiceClient(self.credential, C.SUBSCRIPTION_ID, **kw)

    def delete_machine(self, rg, name):
        # 10.x: long-running begin_delete (202/204); 8.x/9.x: synchronous delete (200/204).
        if hasattr(self.hc.machines, "begin_delete"):
            return self.hc.machines.begin_delete(rg, name, polling_interval=0).result()
        return self.hc.machines.delete(rg, name)

    def assign(self, principal, role=C.ROLE_READER, scope=C.CLUSTER_ID, name=None, principal_type="ServicePrincipal"):
        params = self.auth.role_assignments.models.RoleAssignmentCreateParameters(
            role_definition_id=role_id(role), principal_id=principal, principal_type=principal_type)
        return self.auth.role_assignments.create(scope, name or str(uuid.uuid4()), params)


@pytest.fixture
def sdk(fresh_emulator):
    return Clients(fresh_emulator)


def connect_machine(emu, name, rg=C.CLUSTER_RG):
    """What `azcmagent connect` does to ARM: PUT the machine (the SDK has no create in 8.x)."""
    status, _, body = emu.arm_call("PUT", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{rg}{MACHINES}{name}",
                                   "2024-07-10", {"location": C.LOCATION, "identity": {"type": "SystemAssigned"}})
    assert status == 200, body
    return body


# -- Entra ID ---------------------------------------------------------------------------------


def test_client_secret_credential_gets_an_arm_token(fresh_emulator):
    cred = ClientSecretCredential(C.TENANT_ID, C.SP_CLIENT_ID, C.SP_CLIENT_SECRET, **fresh_emulator.credential_kwargs())
    token = cred.get_token(C.ARM_SCOPE)
    assert token.token.startswith(C.TOKEN_PREFIX) and token.expires_on > time.time() + 3000
    paths = [r["path"] for r in fresh_emulator.requests(server="entra")]
    expected = [f"/{C.TENANT_ID}/v2.0/.well-known/openid-configuration", f"/{C.TENANT_ID}/oauth2/v2.0/token"]
    if fresh_emulator.routed:
        # The public authority (azure-identity 1.7.0, tests/emulator_fixtures.py): msal 1.17.0
        # asks the public cloud for the host's aliases before it looks in its token cache
        # (msal/application.py, ClientApplication._get_authority_aliases).
        expected.insert(1, "/common/discovery/instance")
    assert paths == expected
    assert fresh_emulator.state()["tokens"]["by_audience"][C.ARM_AUDIENCE] >= 1


def test_wrong_client_secret_is_invalid_client_aadsts7000215(fresh_emulator):
    cred = ClientSecretCredential(C.TENANT_ID, C.SP_CLIENT_ID, "not-the-secret", **fresh_emulator.credential_kwargs())
    with pytest.raises(ClientAuthenticationError) as err:
        cred.get_token(C.ARM_SCOPE)
    assert "AADSTS7000215" in str(err.value) and "not-the-secret" not in str(err.value)


def test_unknown_tenant_is_refused(fresh_emulator):
    cred = ClientSecretCredential(str(uuid.uuid4()), C.SP_CLIENT_ID, C.SP_CLIENT_SECRET,
                                  **fresh_emulator.credential_kwargs())
    with pytest.raises(ClientAuthenticationError):
        cred.get_token(C.ARM_SCOPE)


def _self_signed_pem(tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "operator")])
    now = datetime.datetime.utcnow()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    path = tmp_path / "operator.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()) + cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def test_certificate_credential_works_only_for_a_certificate_principal(fresh_emulator, tmp_path):
    pem = _self_signed_pem(tmp_path)
    kw = fresh_emulator.credential_kwargs()
    token = CertificateCredential(C.TENANT_ID, C.CERT_SP_CLIENT_ID, certificate_path=pem, **kw).get_token(C.ARM_SCOPE)
    assert token.token.startswith(C.TOKEN_PREFIX)
    with pytest.raises(ClientAuthenticationError) as err:
        CertificateCredential(C.TENANT_ID, C.SP_CLIENT_ID, certificate_path=pem, **kw).get_token(C.ARM_SCOPE)
    assert "AADSTS700027" in str(err.value)


# -- HybridCompute machines -------------------------------------------------------------------------


def test_machine_get_list_and_delete(fresh_emulator, sdk):
    created = connect_machine(fresh_emulator, "sdk-m1")
    machine = sdk.hc.machines.get(C.CLUSTER_RG, "sdk-m1")
    assert machine.id == created["id"] and machine.identity.principal_id == created["identity"]["principalId"]
    # (hybridcompute 8.0.0b1 flattens the properties, 8.0.0 nests them: arc.machine_from_model reads both)
    assert arc.machine_from_model(machine).status.endswith(("Connected", "CONNECTED"))
    assert machine.location == C.LOCATION
    assert [m.name for m in sdk.hc.machines.list_by_resource_group(C.CLUSTER_RG)] == ["sdk-m1"]

    assert sdk.delete_machine(C.CLUSTER_RG, "sdk-m1") is None
    with pytest.raises(ResourceNotFoundError):
        sdk.hc.machines.get(C.CLUSTER_RG, "sdk-m1")
    assert sdk.delete_machine(C.CLUSTER_RG, "sdk-m1") is None  # absent: 204, accepted by every release
    deletes = fresh_emulator.requests(server="arm", method="DELETE", path_contains="sdk-m1")
    assert [r["status"] for r in deletes][-1] == 204
    assert deletes[0]["status"] in ((202,) if hasattr(sdk.hc.machines, "begin_delete") else (200,))


def test_machine_identity_appears_after_arc_identity_delay(fresh_emulator, sdk):
    fresh_emulator.settings(arc_identity_delay=600)
    connect_machine(fresh_emulator, "sdk-slow")
    assert sdk.hc.machines.get(C.CLUSTER_RG, "sdk-slow").identity.principal_id is None
    fresh_emulator.advance_clock(601)
    assert sdk.hc.machines.get(C.CLUSTER_RG, "sdk-slow").identity.principal_id


def test_missing_resource_group_is_resource_group_not_found(fresh_emulator, sdk):
    with pytest.raises(ResourceNotFoundError) as err:
        sdk.hc.machines.get("rg-missing", "x")
    assert "ResourceGroupNotFound" in str(err.value)


# -- role assignments, definitions, permissions ----------------------------------------------------------


def test_role_assignment_create_list_conflict_delete(fresh_emulator, sdk):
    principal = connect_machine(fresh_emulator, "sdk-ra")["identity"]["principalId"]
    created = sdk.assign(principal)
    assert created.principal_id == principal and created.role_definition_id.lower().endswith(C.ROLE_READER)

    with pytest.raises(ResourceExistsError) as err:
        sdk.assign(principal)
    assert created.name.replace("-", "") in str(err.value) and "RoleAssignmentExists" in str(err.value)

    by_scope = list(sdk.auth.role_assignments.list_for_scope(C.CLUSTER_ID, filter=f"principalId eq '{principal}'"))
    assert [a.name for a in by_scope] == [created.name]
    by_sub = list(sdk.auth.role_assignments.list_for_subscription(filter=f"principalId eq '{principal}'"))
    assert [a.name for a in by_sub] == [created.name]

    deleted = sdk.auth.role_assignments.delete(C.CLUSTER_ID, created.name)
    assert deleted.name == created.name
    assert sdk.auth.role_assignments.delete(C.CLUSTER_ID, created.name) is None
    assert list(sdk.auth.role_assignments.list_for_scope(C.CLUSTER_ID, filter=f"principalId eq '{principal}'")) == []


def test_list_for_scope_includes_inherited_assignments_and_pages(fresh_emulator, sdk):
    fresh_emulator.settings(page_size=2)
    inherited = list(sdk.auth.role_assignments.list_for_scope(C.CLUSTER_ID))
    # The three seeded subscription-level assignments (Owner, Reader, Owner-by-certificate) and
    # the node SP's one below the cluster (its flex pool), across two pages: the SDK followed nextLink.
    assert {a.principal_id for a in inherited} == {C.SP_OBJECT_ID, C.READER_SP_OBJECT_ID, C.CERT_SP_OBJECT_ID,
                                                   C.NODE_SP_OBJECT_ID}
    assert len(fresh_emulator.requests(server="arm", path_contains="roleAssignments")) == 2


def test_new_principal_needs_principal_type_service_principal(fresh_emulator, sdk):
    principal = connect_machine(fresh_emulator, "sdk-young")["identity"]["principalId"]
    with pytest.raises(HttpResponseError) as err:
        sdk.assign(principal, principal_type=None)
    assert err.value.status_code == 400 and "PrincipalNotFound" in str(err.value)
    assert sdk.assign(principal).principal_type == "ServicePrincipal"


def test_unknown_principal_is_principal_not_found(fresh_emulator, sdk):
    with pytest.raises(HttpResponseError) as err:
        sdk.assign(str(uuid.uuid4()))
    assert "PrincipalNotFound" in str(err.value)


def test_reader_may_read_but_not_assign_roles(fresh_emulator):
    reader = Clients(fresh_emulator, C.READER_SP_CLIENT_ID, C.READER_SP_CLIENT_SECRET)
    assert reader.cs.managed_clusters.get(C.CLUSTER_RG, C.CLUSTER_NAME).name == C.CLUSTER_NAME
    with pytest.raises(HttpResponseError) as err:
        reader.assign(C.SP_OBJECT_ID, role=C.ROLE_AKS_FLEX_NODE_AGENT)
    assert err.value.status_code == 403 and "AuthorizationFailed" in str(err.value)
    assert "Microsoft.Authorization/roleAssignments/write" in str(err.value)
    perms = list(reader.auth.permissions.list_for_resource_group(C.CLUSTER_RG))
    assert [p.actions for p in perms] == [["*/read"]]


def test_role_definitions_and_permissions(fresh_emulator, sdk):
    definition = sdk.auth.role_definitions.get(C.CLUSTER_ID, C.ROLE_AKS_RBAC_CLUSTER_ADMIN)
    assert definition.role_name == "Azure Kubernetes Service RBAC Cluster Admin"
    if "data_actions" in type(definition.permissions[0])._attribute_map:  # not in api 2015-07-01 (2.0.0's)
        assert "Microsoft.ContainerService/managedClusters/*" in definition.permissions[0].data_actions
    with pytest.raises(ResourceNotFoundError):
        sdk.auth.role_definitions.get(C.CLUSTER_ID, str(uuid.uuid4()))
    perms = list(sdk.auth.permissions.list_for_resource(C.CLUSTER_RG, "Microsoft.ContainerService", "",
                                                          "managedClusters", C.CLUSTER_NAME))
    assert [p.actions for p in perms] == [["*"]]


# -- managed clusters -------------------------------------------------------------------------------------


def _kubeconfig(credential_results):
    value = credential_results.kubeconfigs[0].value
    return yaml.safe_load(bytes(value).decode())


def test_managed_cluster_get_and_user_credentials(fresh_emulator, sdk):
    cluster = sdk.cs.managed_clusters.get(C.CLUSTER_RG, C.CLUSTER_NAME)
    assert cluster.kubernetes_version == C.K8S_VERSION and cluster.aad_profile.enable_azure_rbac
    assert cluster.fqdn.endswith(".azmk8s.io")

    kubeconfig = _kubeconfig(sdk.cs.managed_clusters.list_cluster_user_credentials(C.CLUSTER_RG, C.CLUSTER_NAME))
    cluster_entry = kubeconfig["clusters"][0]["cluster"]
    assert cluster_entry["server"] == fresh_emulator.apiserver
    with open(fresh_emulator.ca_bundle, "rb") as f:
        assert base64.b64decode(cluster_entry["certificate-authority-data"]) == f.read()
    user = kubeconfig["users"][0]["user"]
    assert set(user) == {"exec"} and user["exec"]["command"] == "kubelogin"
    assert C.AKS_SERVER_APP_ID in user["exec"]["args"]

    other = _kubeconfig(sdk.cs.managed_clusters.list_cluster_user_credentials(C.CLUSTER2_RG, C.CLUSTER2_NAME))
    assert other["clusters"][0]["cluster"]["server"] == fresh_emulator.apiservers[C.CLUSTER2_ID]
    assert other["clusters"][0]["cluster"]["server"] != fresh_emulator.apiserver


def test_admin_credentials_carry_a_client_certificate_unless_local_accounts_are_off(fresh_emulator, sdk):
    admin = _kubeconfig(sdk.cs.managed_clusters.list_cluster_admin_credentials(C.CLUSTER_RG, C.CLUSTER_NAME))
    user = admin["users"][0]["user"]
    assert b"BEGIN CERTIFICATE" in base64.b64decode(user["client-certificate-data"])
    assert b"PRIVATE KEY" in base64.b64decode(user["client-key-data"])
    fresh_emulator.add_cluster(name="aks-local-off", resource_group=C.CLUSTER_RG, local_accounts=False)
    with pytest.raises(HttpResponseError) as err:
        sdk.cs.managed_clusters.list_cluster_admin_credentials(C.CLUSTER_RG, "aks-local-off")
    assert err.value.status_code == 400 and "disable local accounts" in str(err.value)


# -- faults and retries --------------------------------------------------------------------------------------


def test_429_with_retry_after_is_retried_by_the_sdk(fresh_emulator, sdk):
    connect_machine(fresh_emulator, "sdk-429")
    fresh_emulator.faults([{"match": {"method": "GET", "path_regex": "machines/sdk-429", "times": 1},
                            "respond": {"status": 429, "headers": {"Retry-After": "1"},
                                        "body": {"error": {"code": "TooManyRequests", "message": "throttled"}}}}])
    started = time.time()
    assert sdk.hc.machines.get(C.CLUSTER_RG, "sdk-429").name == "sdk-429"
    assert time.time() - started >= 0.9  # it waited as told
    gets = fresh_emulator.requests(server="arm", method="GET", path_contains="sdk-429")
    assert [(r["status"], r["fault"]) for r in gets] == [(429, "respond"), (200, None)]
    assert gets[0]["client_request_id"] == gets[1]["client_request_id"]  # a retry, not a new call


def test_post_429_without_retry_after_is_not_retried(fresh_emulator, sdk):
    fresh_emulator.faults([{"match": {"method": "POST", "path_regex": "listClusterUserCredential", "times": 1},
                            "respond": {"status": 429, "body": {"error": {"code": "TooManyRequests",
                                                                          "message": "throttled"}}}}])
    with pytest.raises(HttpResponseError) as err:
        sdk.cs.managed_clusters.list_cluster_user_credentials(C.CLUSTER_RG, C.CLUSTER_NAME)
    assert err.value.status_code == 429
    assert len(fresh_emulator.requests(method="POST", path_contains="listClusterUserCredential")) == 1


def test_dropped_connection_is_retried(fresh_emulator, sdk):
    connect_machine(fresh_emulator, "sdk-drop")
    fresh_emulator.faults([{"match": {"method": "GET", "path_regex": "machines/sdk-drop", "times": 1}, "drop": True}])
    assert sdk.hc.machines.get(C.CLUSTER_RG, "sdk-drop").name == "sdk-drop"
    gets = fresh_emulator.requests(server="arm", method="GET", path_contains="sdk-drop")
    assert [(r["status"], r["fault"]) for r in gets] == [(None, "drop"), (200, None)]


def test_every_connection_dropped_surfaces_as_a_connection_error(fresh_emulator):
    fresh_emulator.faults([{"match": {"server": "entra"}, "drop": True}])
    cred = ClientSecretCredential(C.TENANT_ID, C.SP_CLIENT_ID, C.SP_CLIENT_SECRET, retry_total=0,
                                  **fresh_emulator.credential_kwargs())
    with pytest.raises((ClientAuthenticationError, ServiceRequestError, ServiceResponseError)) as err:
        cred.get_token(C.ARM_SCOPE)
    # An answer-less close is an error at once, not a hang: the error is the close itself
    # (http.client's RemoteDisconnected), not a read that timed out waiting for an answer.
    assert "Remote end closed connection without response" in str(err.value)
    assert "timed out" not in str(err.value)
    assert {r["fault"] for r in fresh_emulator.requests(server="entra")} == {"drop"}
