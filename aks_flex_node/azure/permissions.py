"""What the operator's identity may do, checked before anything changes.

ARM's permissions API returns the caller's effective actions at a scope
(Permissions_ListForResource, azure-rest-api-specs' authorization-RoleDefinitionsCalls.json);
we evaluate the wildcards ourselves (`*`, `*/read`,
`Microsoft.Authorization/*`), an action being allowed when some block's actions match it
and that block's notActions do not. Upstream found out mid-way, with a 403 after the Arc
connect (Azure/AKSFlexNode#183).
"""

import concurrent.futures
import fnmatch

from aks_flex_node.azure.auth import azure_errors
from aks_flex_node.errors import AuthError

# What a join needs, and where (role assignments and Arc machines are also deleted by
# unbootstrap, so those are needed too).
CLUSTER_ACTIONS = (
    "Microsoft.ContainerService/managedClusters/read",
    "Microsoft.ContainerService/managedClusters/listClusterUserCredential/action",
    "Microsoft.Authorization/roleAssignments/write",
    "Microsoft.Authorization/roleAssignments/delete",
)
ARC_GROUP_ACTIONS = (
    "Microsoft.HybridCompute/machines/read",
    "Microsoft.HybridCompute/machines/write",
    "Microsoft.HybridCompute/machines/delete",
)


def allowed(action, blocks):
    """Is `action` allowed by the permission `blocks` (each with actions / not_actions)?"""
    action = action.lower()

    def matches(patterns):
        return any(fnmatch.fnmatchcase(action, p.lower()) for p in patterns or ())

    return any(matches(b.actions) and not matches(b.not_actions) for b in blocks)


def _cluster_blocks(clients, ref):
    perms = clients.authorization(ref.subscription_id).permissions
    return list(perms.list_for_resource(ref.resource_group, "Microsoft.ContainerService", "",
                                        "managedClusters", ref.name))


def _group_blocks(clients, subscription_id, resource_group):
    perms = clients.authorization(subscription_id).permissions
    return list(perms.list_for_resource_group(resource_group))


def require_join_permissions(clients, cluster_ref, arc_subscription_id, arc_resource_group):
    """Raise AuthError naming every missing action, and where, before a join begins.

    The two scopes are read at once: each read is an ARM round trip on the way of every
    bootstrap, a converged one included (the cluster's error is raised first)."""
    group_id = f"/subscriptions/{arc_subscription_id}/resourceGroups/{arc_resource_group}"

    def group_blocks():
        with azure_errors(f"reading the operator's permissions on {group_id}"):
            return _group_blocks(clients, arc_subscription_id, arc_resource_group)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        group = pool.submit(group_blocks)
        with azure_errors(f"reading the operator's permissions on {cluster_ref.resource_id}"):
            blocks = _cluster_blocks(clients, cluster_ref)
        missing = [(a, cluster_ref.resource_id) for a in CLUSTER_ACTIONS if not allowed(a, blocks)]
        blocks = group.result()
    missing += [(a, group_id) for a in ARC_GROUP_ACTIONS if not allowed(a, blocks)]
    if missing:
        lines = "\n  ".join(f"{action} on {scope}" for action, scope in missing)
        raise AuthError(
            f"the operator identity lacks {len(missing)} permission(s) a join needs:\n  {lines}",
            remedy="grant it Owner on the cluster (or Cluster User Role plus User Access "
            "Administrator), and Azure Connected Machine Onboarding plus delete rights on the "
            "Arc resource group: docs/roles.md lists each action")


# What a node of a FlexNodes pool does there: the Flex Node Agent Role's actions (upstream
# Azure/AKSFlexNode docs/usage/getting-started.md), and what only an operator may.
_POOL = "Microsoft.ContainerService/managedClusters/agentPools"
POOL_ACTIONS = (f"{_POOL}/listBootstrapData/action", f"{_POOL}/machines/read", f"{_POOL}/machines/write")
POOL_READ = f"{_POOL}/read"
DELETE_MACHINES = f"{_POOL}/deleteMachines/action"


def pool_blocks(clients, cluster_ref, pool):
    """The caller's permission blocks on an agent pool (Permissions_ListForResource)."""
    perms = clients.authorization(cluster_ref.subscription_id).permissions
    with azure_errors(f"reading this identity's permissions on agent pool {pool}"):
        return list(perms.list_for_resource(cluster_ref.resource_group, "Microsoft.ContainerService",
                                            f"managedClusters/{cluster_ref.name}", "agentPools", pool))


def may_delete_machines(clients, cluster_ref, pool):
    """Whether the caller may delete Machines of the pool (AgentPools_DeleteMachines): the
    Flex Node Agent Role does not grant it, an operator's Contributor or Owner does."""
    return allowed(DELETE_MACHINES, pool_blocks(clients, cluster_ref, pool))
