"""Role presets for the Arc machine's identity, as data (docs/roles.md says why each).

Every role is granted at the cluster's resource ID; the role definition is referenced in
the cluster's subscription (upstream built it from the Arc subscription, a bug when the
two differ: Azure/AKSFlexNode v0.0.10, pkg/components/arc/arc_installer.go assignRole).
"""

from dataclasses import dataclass
from typing import Tuple

CLUSTER_SCOPE = "cluster"


@dataclass(frozen=True)
class Role:
    name: str
    guid: str  # the role definition's name (a GUID), the same in every tenant
    scope: str = CLUSTER_SCOPE


# Built-in role IDs: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
READER = Role("Reader", "acdd72a7-3385-48ef-bd42-f606fba81ae7")
AKS_RBAC_CLUSTER_ADMIN = Role("Azure Kubernetes Service RBAC Cluster Admin", "b1ff04bb-8a4e-4dc4-8eb5-8693973ce19b")
AKS_CLUSTER_ADMIN_ROLE = Role("Azure Kubernetes Service Cluster Admin Role", "0ab0b1a8-8aac-4efd-b8c2-3ee1fb270be8")
# Azure/AKSFlexNode#306: a dedicated role for flex nodes; not in every cloud yet.
AKS_FLEX_NODE_AGENT = Role("Azure Kubernetes Service Flex Node Agent Role", "8f139b0f-7eaf-460b-a9da-5b1246d9ed0d")

PRESETS = {
    # What upstream v0.0.10 grants (Azure/AKSFlexNode, pkg/components/arc/arc_base.go
    # getRoleAssignments): cluster-admin for the kubelet, which authenticates to the API
    # server as the Arc identity, so it needs Kubernetes DataActions.
    "legacy": (READER, AKS_RBAC_CLUSTER_ADMIN, AKS_CLUSTER_ADMIN_ROLE),
}
# There is no "minimal" preset (AKS_FLEX_NODE_AGENT alone) any more: that role's actions
# are listBootstrapData and machines read/write at the agent pool's scope, with no
# DataActions (Azure/AKSFlexNode docs/usage/getting-started.md; docs/roles.md), so an
# Arc-mode kubelet holding only it gets 403 from the API server. Least privilege is
# join_mode = agent-pool: the node's own identity holds that role at the pool, and the
# kubelet joins by TLS bootstrapping instead.
RETIRED = {"minimal": "for least privilege use join_mode = agent-pool (docs/roles.md)"}


def preset(name) -> Tuple[Role, ...]:
    try:
        return PRESETS[name]
    except KeyError:
        hint = f"; {RETIRED[name]}" if name in RETIRED else ""
        raise ValueError(f"role preset = {name!r}: expected one of {', '.join(sorted(PRESETS))}{hint}") from None
