"""The target AKS cluster: its facts, and the apiserver URL + CA for the kubelet.

Only the *user* credential is ever listed: it carries the server and CA we need, and its
user part (an exec/AAD entry, no secret) is thrown away. Upstream called
listClusterAdminCredential on every bootstrap, which needs cluster-admin rights and
fails on clusters with local accounts disabled (Azure/AKSFlexNode v0.0.10,
pkg/components/kubelet/kubelet_installer.go getClusterCredentials;
https://learn.microsoft.com/azure/aks/manage-local-accounts-managed-azure-ad).
"""

import base64
from dataclasses import dataclass
from typing import Optional

from azure.core.exceptions import ResourceNotFoundError

from aks_flex_node import cloud_values
from aks_flex_node.azure.auth import azure_errors
from aks_flex_node.cloud_values import BadCloudValue
from aks_flex_node.errors import FlexNodeError

# A kubeconfig of one cluster is a few kilobytes; a bigger answer is not one (and YAML's
# parser is not where to find out).
MAX_KUBECONFIG = 1024 * 1024


class ClusterNotFound(FlexNodeError):
    code = "cluster_not_found"


@dataclass(frozen=True)
class Cluster:
    id: str
    name: str
    location: str
    kubernetes_version: str  # a release "1.30.4": currentKubernetesVersion, checked
    fqdn: Optional[str]
    azure_rbac: bool
    local_accounts_disabled: bool


def _flat(model, name):
    """A property under both SDK shapes (flattened, or under `.properties`)."""
    value = getattr(model, name, None)
    if value is None and getattr(model, "properties", None) is not None:
        value = getattr(model.properties, name, None)
    return value


def _describe(ref):
    return f"AKS cluster {ref.resource_group}/{ref.name} in subscription {ref.subscription_id}"


def get_cluster(clients, ref):
    """`ref` has subscription_id, resource_group, name (config.ClusterRef)."""
    with azure_errors(f"reading {_describe(ref)}"):
        try:
            model = clients.containerservice(ref.subscription_id).managed_clusters.get(ref.resource_group, ref.name)
        except ResourceNotFoundError:
            raise ClusterNotFound(
                f"{_describe(ref)} does not exist",
                remedy="check cluster_resource_id in the configuration (and that the operator identity can read it)",
            ) from None
    return parse_cluster(model, f"ARM managedClusters GET {ref.resource_group}/{ref.name}")


def parse_cluster(model, source):
    """The Cluster of a managedClusters GET answer (an SDK model), each value we use checked
    (cloud_values): the version names download paths and directories, the FQDN a URL."""
    current = _flat(model, "current_kubernetes_version")
    if current is None:  # an older API version's answer: the version asked for, patch included
        field, current = "properties.kubernetesVersion", _flat(model, "kubernetes_version")
    else:
        field = "properties.currentKubernetesVersion"
    version = cloud_values.kube_release(current, source, field)
    fqdn, fqdn_field = _flat(model, "fqdn"), "properties.fqdn"
    if not fqdn:
        fqdn, fqdn_field = _flat(model, "private_fqdn"), "properties.privateFQDN"
    aad = _flat(model, "aad_profile")
    return Cluster(
        id=cloud_values.resource_id(model.id, source, "id"),
        name=cloud_values.resource_name(model.name, source, "name"),
        location=cloud_values.resource_name(model.location, source, "location"),
        kubernetes_version=str(version),
        fqdn=None if fqdn is None else cloud_values.host_name(fqdn, source, fqdn_field),
        azure_rbac=bool(getattr(aad, "enable_azure_rbac", False)),
        local_accounts_disabled=bool(_flat(model, "disable_local_accounts")),
    )


def _kubeconfig_bytes(value):
    # The SDK base64-decodes the value into bytes (CredentialResult.value, `format: byte` in
    # azure-rest-api-specs' managedClusters.json); stay tolerant of a
    # str, raw or still base64-encoded.
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            decoded = base64.b64decode(value, validate=True)
            if b"clusters" in decoded:
                return decoded
        except ValueError:
            pass
        return value.encode("utf-8")
    raise BadCloudValue("listClusterUserCredential", "kubeconfigs[0].value", type(value).__name__, "bytes")


def parse_kubeconfig(data, source):
    """(server, ca_pem) of the first cluster in a kubeconfig document, both checked
    (cloud_values): the server an https:// URL of a host, the CA base64 PEM an SSL context
    takes. Anything else is BadCloudValue naming `source` and the field."""
    import yaml  # only when credentials are listed: a converged run never pays for it

    if len(data) > MAX_KUBECONFIG:
        raise BadCloudValue(source, "kubeconfig", f"{len(data)} bytes", f"at most {MAX_KUBECONFIG} bytes")
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError:
        raise BadCloudValue(source, "kubeconfig", data[:40], "a kubeconfig (YAML)") from None
    clusters = doc.get("clusters") if isinstance(doc, dict) else None
    if not clusters or not isinstance(clusters, list) or not isinstance(clusters[0], dict):
        raise BadCloudValue(source, "clusters", clusters, "a kubeconfig with a cluster")
    cluster = clusters[0].get("cluster")
    if not isinstance(cluster, dict):
        raise BadCloudValue(source, "clusters[0].cluster", cluster, "a cluster object")
    server = cloud_values.https_url(cluster.get("server"), source, "clusters[0].cluster.server")
    ca_pem = cloud_values.ca_pem(cluster.get("certificate-authority-data"), source,
                                 "clusters[0].cluster.certificate-authority-data")
    return server, ca_pem


def server_and_ca(clients, ref):
    """The apiserver URL and its CA (PEM bytes) from listClusterUserCredential."""
    source = f"listClusterUserCredential of {_describe(ref)}"
    with azure_errors(source):
        try:
            result = clients.containerservice(ref.subscription_id).managed_clusters.list_cluster_user_credentials(
                ref.resource_group, ref.name
            )
        except ResourceNotFoundError:
            raise ClusterNotFound(f"{_describe(ref)} does not exist") from None
    kubeconfigs = getattr(result, "kubeconfigs", None) or []
    if not kubeconfigs:
        raise BadCloudValue(source, "kubeconfigs", kubeconfigs, "a list with a kubeconfig")
    return parse_kubeconfig(_kubeconfig_bytes(kubeconfigs[0].value), source)
