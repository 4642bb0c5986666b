"""The AKS cluster through the real containerservice SDK of this stack, against the emulator."""

import base64

import pytest
import yaml

from aks_flex_node import kube
from aks_flex_node.azure import aks
from aks_flex_node.errors import AuthError, FlexNodeError
from tests.emulator import constants as C
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)


class Ref:
    def __init__(self, name=C.CLUSTER_NAME, resource_group=C.CLUSTER_RG, subscription_id=C.SUBSCRIPTION_ID):
        self.name, self.resource_group, self.subscription_id = name, resource_group, subscription_id


def test_get_cluster(azure_clients):
    cluster = aks.get_cluster(azure_clients, Ref())
    assert cluster.id == C.CLUSTER_ID
    assert cluster.name == C.CLUSTER_NAME
    assert cluster.location == C.LOCATION
    assert cluster.kubernetes_version == C.K8S_VERSION
    assert cluster.fqdn and cluster.fqdn.endswith(".azmk8s.io")
    assert cluster.azure_rbac is True
    assert cluster.local_accounts_disabled is False


def test_cluster_without_azure_rbac_and_local_accounts(fresh_emulator, azure_clients):
    fresh_emulator.add_cluster(name="plain", resource_group=C.CLUSTER2_RG, kubernetes_version="1.29.7",
                               azure_rbac=False, local_accounts=False)
    cluster = aks.get_cluster(azure_clients, Ref("plain", C.CLUSTER2_RG))
    assert cluster.azure_rbac is False
    assert cluster.local_accounts_disabled is True
    assert cluster.kubernetes_version == "1.29.7"


def test_absent_cluster_is_named(azure_clients):
    with pytest.raises(aks.ClusterNotFound, match=r"\brg-aks/nope\b") as caught:  # the cluster, by group and name
        aks.get_cluster(azure_clients, Ref("nope"))
    assert C.SUBSCRIPTION_ID in caught.value.message and "cluster_resource_id" in caught.value.remedy


def test_server_and_ca_from_the_user_credential_only(fresh_emulator, azure_clients):
    server, ca_pem = aks.server_and_ca(azure_clients, Ref())
    assert server == fresh_emulator.apiserver_for(C.CLUSTER_ID)
    assert ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    # The CA really is the apiserver's: a client trusting only it gets an HTTP answer (401).
    with pytest.raises(kube.Unauthorized):
        kube.KubeClient(server, ca_pem, lambda: "x").get_node("n")
    assert fresh_emulator.requests(server="arm", path_contains="listClusterUserCredential")
    assert fresh_emulator.requests(server="arm", path_contains="listClusterAdminCredential") == []


def test_server_and_ca_needs_list_user_credential_permission(fresh_emulator, reader_clients):
    with pytest.raises(AuthError, match="listClusterUserCredential") as caught:  # the action refused
        aks.server_and_ca(reader_clients, Ref())
    assert caught.value.code == "forbidden"


def _kubeconfig(server="https://h:443", ca=b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"):
    return yaml.safe_dump({"clusters": [{"name": "c", "cluster": {
        "server": server, "certificate-authority-data": base64.b64encode(ca).decode()}}]}).encode()


def test_kubeconfig_value_as_bytes_or_str():
    doc = _kubeconfig()
    assert aks.parse_kubeconfig(aks._kubeconfig_bytes(doc), "x")[0] == "https://h:443"
    assert aks.parse_kubeconfig(aks._kubeconfig_bytes(doc.decode()), "x")[0] == "https://h:443"
    # Still base64 (an SDK that did not decode it)
    assert aks.parse_kubeconfig(aks._kubeconfig_bytes(base64.b64encode(doc).decode()), "x")[0] == "https://h:443"


@pytest.mark.parametrize("doc, expected", [
    (b"clusters: [", "not valid YAML"),
    (b"users: []", "has no clusters"),
    (_kubeconfig(server="http://h"), "clusters\\[0\\].cluster.server = 'http://h': expected an https:// URL"),
    (_kubeconfig(ca=b"junk"), "certificate-authority-data: expected a base64 PEM certificate"),
])
def test_bad_kubeconfig_names_the_field(doc, expected):
    with pytest.raises(FlexNodeError, match=expected):
        aks.parse_kubeconfig(doc, "listClusterUserCredential")
