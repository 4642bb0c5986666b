"""Built-in role definitions and the effective-permission check ARM makes before acting.

Permissions are from the Learn built-in-roles pages
(https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/general, .../containers,
.../hybrid-multicloud and .../privileged for Owner, Contributor, User Access Administrator).
The Azure Kubernetes Service Flex Node Agent Role is a preview role documented by upstream's
operator guide (Azure/AKSFlexNode docs/usage/getting-started.md, "Assign the host identity's
pool-scoped role", and docs/usage/joining-nodes.md): exactly three Actions, no DataActions, no
Machine delete; it is meant for an agent-pool scope. Its description below is ours.
"""

import re

from tests.emulator import constants as c


def _perm(actions=(), not_actions=(), data_actions=(), not_data_actions=()):
    return {"actions": list(actions), "notActions": list(not_actions),
            "dataActions": list(data_actions), "notDataActions": list(not_data_actions)}


_CS = "Microsoft.ContainerService/managedClusters"

BUILT_IN = {
    c.ROLE_OWNER: ("Owner", "Grants full access to manage all resources, including the ability to assign roles in Azure RBAC.",
                   _perm(["*"])),
    c.ROLE_CONTRIBUTOR: ("Contributor", "Grants full access to manage all resources, but does not allow you to assign roles in Azure RBAC.",
                         _perm(["*"], ["Microsoft.Authorization/*/Delete", "Microsoft.Authorization/*/Write",
                                       "Microsoft.Authorization/elevateAccess/Action"])),
    c.ROLE_READER: ("Reader", "View all resources, but does not allow you to make any changes.", _perm(["*/read"])),
    c.ROLE_USER_ACCESS_ADMIN: ("User Access Administrator", "Lets you manage user access to Azure resources.",
                               _perm(["*/read", "Microsoft.Authorization/*", "Microsoft.Support/*"])),
    c.ROLE_AKS_RBAC_CLUSTER_ADMIN: (
        "Azure Kubernetes Service RBAC Cluster Admin",
        "Lets you manage all resources in the cluster.",
        _perm(["Microsoft.Authorization/*/read", "Microsoft.Resources/subscriptions/operationresults/read",
               "Microsoft.Resources/subscriptions/read", "Microsoft.Resources/subscriptions/resourceGroups/read",
               f"{_CS}/listClusterUserCredential/action"],
              data_actions=[f"{_CS}/*"])),
    c.ROLE_AKS_CLUSTER_ADMIN: (
        "Azure Kubernetes Service Cluster Admin Role",
        "List cluster admin credential action.",
        _perm([f"{_CS}/listClusterAdminCredential/action", f"{_CS}/accessProfiles/listCredential/action",
               f"{_CS}/read", f"{_CS}/runcommand/action"])),
    c.ROLE_AKS_CLUSTER_USER: (
        "Azure Kubernetes Service Cluster User Role",
        "List cluster user credential action.",
        _perm([f"{_CS}/listClusterUserCredential/action", f"{_CS}/read"])),
    c.ROLE_CONNECTED_MACHINE_ONBOARDING: (
        "Azure Connected Machine Onboarding",
        "Can onboard Azure Connected Machines.",
        _perm(["Microsoft.HybridCompute/machines/read", "Microsoft.HybridCompute/machines/write",
               "Microsoft.HybridCompute/privateLinkScopes/read",
               "Microsoft.GuestConfiguration/guestConfigurationAssignments/read"])),
    c.ROLE_AKS_FLEX_NODE_AGENT: (
        "Azure Kubernetes Service Flex Node Agent Role",
        "Lets a Flex node's host identity fetch its agent pool's bootstrap data and read and write "
        "the pool's Machines.",
        _perm([f"{_CS}/agentPools/listBootstrapData/action", f"{_CS}/agentPools/machines/read",
               f"{_CS}/agentPools/machines/write"])),
}


def is_built_in(guid):
    return (guid or "").lower() in BUILT_IN


def definition_body(guid, scope=""):
    """A RoleDefinition as ARM returns it (spec example GetRoleDefinitionById.json)."""
    guid = guid.lower()
    name, description, permissions = BUILT_IN[guid]
    return {
        "id": f"{scope}/providers/Microsoft.Authorization/roleDefinitions/{guid}",
        "name": guid,
        "type": "Microsoft.Authorization/roleDefinitions",
        "properties": {
            "roleName": name,
            "type": "BuiltInRole",
            "description": description,
            "assignableScopes": ["/"],
            "permissions": [permissions],
        },
    }


def _pattern(action_pattern):
    return re.compile(re.escape(action_pattern).replace(r"\*", ".*"), re.IGNORECASE)


def _matches(patterns, action):
    return any(_pattern(p).fullmatch(action) for p in patterns)


def scope_covers(assignment_scope, resource_scope):
    """An assignment at `assignment_scope` applies to `resource_scope` (same, or a parent)."""
    a = assignment_scope.rstrip("/").lower()
    r = resource_scope.rstrip("/").lower()
    return a == "" or a == r or r.startswith(a + "/")


def assignments_covering(assignments, principal_id, scope):
    pid = (principal_id or "").lower()
    return [a for a in assignments if a["principal_id"].lower() == pid and scope_covers(a["scope"], scope)]


def permissions_of(assignments, principal_id, scope):
    """The caller's permission blocks at `scope`, one per applicable assignment (as ARM lists them)."""
    return [BUILT_IN[a["role_guid"]][2] for a in assignments_covering(assignments, principal_id, scope)
            if a["role_guid"] in BUILT_IN]


def allows(assignments, principal_id, scope, action):
    """Does any role the principal holds at or above `scope` grant `action` (and not deny it)?"""
    for block in permissions_of(assignments, principal_id, scope):
        if _matches(block["actions"], action) and not _matches(block["notActions"], action):
            return True
    return False
