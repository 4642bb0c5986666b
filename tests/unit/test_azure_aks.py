"""The AKS cluster through the real containerservice SDK of this stack, against the emulator."""

import base64

import pytest
import yaml

from aks_flex_node import cloud_values, kube
from aks_flex_node.azure import aks
from aks_flex_node.errors import AuthError
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


@pytest.fixture
def real_ca(emulator):
    with open(emulator.ca_bundle, "rb") as f:
        return f.read()


def test_kubeconfig_value_as_bytes_or_str(real_ca):
    doc = _kubeconfig(ca=real_ca)
    assert aks.parse_kubeconfig(aks._kubeconfig_bytes(doc), "x") == ("https://h:443", real_ca)
    assert aks.parse_kubeconfig(aks._kubeconfig_bytes(doc.decode()), "x")[0] == "https://h:443"
    # Still base64 (an SDK that did not decode it)
    assert aks.parse_kubeconfig(aks._kubeconfig_bytes(base64.b64encode(doc).decode()), "x")[0] == "https://h:443"


@pytest.mark.parametrize("doc, field", [
    (b"clusters: [", "kubeconfig"),
    (b"users: []", "clusters"),
    (b"clusters: [{cluster: 3}]", "clusters[0].cluster"),
    (_kubeconfig(server="http://h"), "clusters[0].cluster.server"),
    (_kubeconfig(server="https://h:443\n[Service]"), "clusters[0].cluster.server"),
    (_kubeconfig(server="https://h:443/../evil"), "clusters[0].cluster.server"),
    (_kubeconfig(server="https://user@h:443"), "clusters[0].cluster.server"),
    (_kubeconfig(server="https://h:99999"), "clusters[0].cluster.server"),
    # PEM-looking, but no certificate an SSL context takes (issue 26, defect 7)
    (_kubeconfig(), "clusters[0].cluster.certificate-authority-data"),
    (_kubeconfig(ca=b"junk"), "clusters[0].cluster.certificate-authority-data"),
    (yaml.safe_dump({"clusters": [{"cluster": {"server": "https://h", "certificate-authority-data": "%%%"}}]}).encode(),
     "clusters[0].cluster.certificate-authority-data"),
])
def test_bad_kubeconfig_is_a_bad_cloud_value_naming_the_field(doc, field):
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        aks.parse_kubeconfig(doc, "listClusterUserCredential")
    assert caught.value.code == "bad-cloud-value" and caught.value.exit_code == 1
    assert (caught.value.source, caught.value.field) == ("listClusterUserCredential", field)
    assert "\n" not in caught.value.message, "a newline of the answer is shown escaped, never raw"


# -- hostile values in ARM's answers (issue 26, defect 7), through the real SDK ------------

CLUSTER_GET = {"server": "arm", "method": "GET", "path_regex": "managedClusters/aks-one$", "times": 1}
# Where a cluster's version is read: currentKubernetesVersion where the SDK models it, else the
# version asked for (Ubuntu 22.04's azure-mgmt-containerservice has no current version).
VERSION_FIELDS = ("properties.currentKubernetesVersion", "properties.kubernetesVersion")


@pytest.mark.parametrize("field, value", [
    ("properties.currentKubernetesVersion", "1.30.4/x"),
    ("properties.currentKubernetesVersion", "1.30.4 --v=9"),
    ("properties.currentKubernetesVersion", "1.30.4\n[Service]"),
    ("properties.currentKubernetesVersion", ""),
    ("properties.currentKubernetesVersion", "1." + "3" * 5000 + ".4"),
    ("properties.currentKubernetesVersion", "../../1.30.4"),
    ("properties.fqdn", "aks-one.example.com/evil"),
    ("properties.fqdn", "aks-one.example.com\nHost: x"),
    ("id", "/subscriptions/" + C.SUBSCRIPTION_ID + "/resourceGroups/../providers/x"),
    ("location", "west europe\n"),
])
def test_a_bad_value_in_the_cluster_answer_is_refused_naming_source_and_field(
        fresh_emulator, azure_clients, field, value):
    change, fields = {field: value}, (field,)
    if field in VERSION_FIELDS:  # the one this SDK reads (an older one knows no current version)
        change, fields = {f: value for f in VERSION_FIELDS}, VERSION_FIELDS
    fresh_emulator.faults([{"match": CLUSTER_GET, "set": change}])
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        aks.get_cluster(azure_clients, Ref())
    err = caught.value
    assert (err.code, err.exit_code) == ("bad-cloud-value", 1) and err.field in fields
    assert err.source.startswith("ARM managedClusters GET") and C.CLUSTER_NAME in err.source
    assert "\n" not in err.message and len(err.message) < 600, "the value is shown bounded, escaped"


def test_a_cluster_with_no_version_at_all_is_refused(fresh_emulator, azure_clients):
    fresh_emulator.faults([{"match": CLUSTER_GET, "set": {"properties.currentKubernetesVersion": None,
                                                          "properties.kubernetesVersion": None}}])
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        aks.get_cluster(azure_clients, Ref())
    assert caught.value.field == "properties.kubernetesVersion"


def test_a_v_prefixed_version_is_read_as_the_release(fresh_emulator, azure_clients):
    fresh_emulator.faults([{"match": CLUSTER_GET, "set": {"properties.currentKubernetesVersion": "v1.30.4"}}])
    assert aks.get_cluster(azure_clients, Ref()).kubernetes_version == "1.30.4"


def _credential_rule(kubeconfig):
    return [{"match": {"server": "arm", "path_regex": "listClusterUserCredential", "times": 1},
             "set": {"kubeconfigs.0.value": base64.b64encode(kubeconfig).decode()}}]


@pytest.mark.parametrize("server, ca, field", [
    ("http://h:443", None, "clusters[0].cluster.server"),
    ("https://h:443\nx", None, "clusters[0].cluster.server"),
    ("https://h:443", b"not pem", "clusters[0].cluster.certificate-authority-data"),
])
def test_a_bad_user_credential_is_refused_naming_the_field(fresh_emulator, azure_clients, real_ca, server, ca, field):
    fresh_emulator.faults(_credential_rule(_kubeconfig(server=server, ca=ca or real_ca)))
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        aks.server_and_ca(azure_clients, Ref())
    assert caught.value.field == field and caught.value.source.startswith("listClusterUserCredential")
