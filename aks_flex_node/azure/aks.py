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

from aks_flex_node.azure.auth import azure_errors
from aks_flex_node.errors import FlexNodeError


class ClusterNotFound(FlexNodeError):
    code = "cluster_not_found"


@dataclass(frozen=True)
class Cluster:
    id: str
    name: str
    location: str
    kubernetes_version: Optional[str]
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
    aad = _flat(model, "aad_profile")
    return Cluster(
        id=model.id,
        name=model.name,
        location=model.location,
        kubernetes_version=_flat(model, "current_kubernetes_version") or _flat(model, "kubernetes_version"),
        fqdn=_flat(model, "fqdn") or _flat(model, "private_fqdn"),
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
    raise FlexNodeError(f"listClusterUserCredential kubeconfig value: expected bytes, got {type(value).__name__}")


def parse_kubeconfig(data, source):
    """(server, ca_pem) of the first cluster in a kubeconfig document."""
    import yaml  # only when credentials are listed: a converged run never pays for it

    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as err:
        raise FlexNodeError(f"{source}: the kubeconfig is not valid YAML ({err})") from None
    clusters = doc.get("clusters") if isinstance(doc, dict) else None
    if not clusters or not isinstance(clusters, list) or not isinstance(clusters[0], dict):
        raise FlexNodeError(f"{source}: the kubeconfig has no clusters")
    cluster = clusters[0].get("cluster") or {}
    server = cluster.get("server")
    ca_b64 = cluster.get("certificate-authority-data")
    if not server or not str(server).startswith("https://"):
        raise FlexNodeError(f"{source}: clusters[0].cluster.server = {server!r}: expected an https:// URL")
    try:
        ca_pem = base64.b64decode(ca_b64 or "", validate=True)
    except ValueError:
        ca_pem = b""
    if b"-----BEGIN CERTIFICATE-----" not in ca_pem:
        raise FlexNodeError(
            f"{source}: clusters[0].cluster.certificate-authority-data: expected a base64 PEM certificate"
        )
    return str(server), ca_pem


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
        raise FlexNodeError(f"{source}: the answer holds no kubeconfig")
    return parse_kubeconfig(_kubeconfig_bytes(kubeconfigs[0].value), source)
