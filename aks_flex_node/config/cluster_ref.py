"""The cluster a configuration names: an AKS managed cluster's resource ID, parsed
(ClusterRef). A leaf of config/: the checks and the Config both use it."""

import dataclasses
import re

# Cluster names: the AKS spec's resourceName pattern (aks/stable/2026-08-01/managedClusters.json).
_CLUSTER_NAME = r"[a-zA-Z0-9](?:[-_a-zA-Z0-9]{0,61}[a-zA-Z0-9])?"
_CLUSTER_ID = re.compile(
    r"^/subscriptions/(?P<sub>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"/resourcegroups/(?P<rg>[-\w._()]{1,90})"
    r"/providers/microsoft\.containerservice/managedclusters/(?P<name>" + _CLUSTER_NAME + r")$",
    re.I,
)
CLUSTER_ID_EXAMPLE = (
    "/subscriptions/<uuid>/resourceGroups/<group>/providers/"
    "Microsoft.ContainerService/managedClusters/<name>"
)


@dataclasses.dataclass(frozen=True)
class ClusterRef:
    subscription_id: str
    resource_group: str
    name: str
    resource_id: str  # canonical casing


def parse_cluster_id(text):
    """ClusterRef from an AKS resource ID, matched case-insensitively; ValueError if it is not one."""
    match = _CLUSTER_ID.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not an AKS cluster resource ID like {CLUSTER_ID_EXAMPLE}")
    sub, rg, name = match.group("sub").lower(), match.group("rg"), match.group("name")
    resource_id = (
        f"/subscriptions/{sub}/resourceGroups/{rg}/providers/"
        f"Microsoft.ContainerService/managedClusters/{name}"
    )
    return ClusterRef(sub, rg, name, resource_id)
