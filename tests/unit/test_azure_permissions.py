"""Evaluating ARM permission blocks, and the join's permission check against the emulator."""

import collections

import pytest

from aks_flex_node.azure import permissions
from aks_flex_node.errors import AuthError

Block = collections.namedtuple("Block", "actions not_actions")


@pytest.mark.parametrize("blocks,action,expected", [
    ([Block(["*"], [])], "Microsoft.Authorization/roleAssignments/write", True),
    ([Block(["*/read"], [])], "Microsoft.ContainerService/managedClusters/read", True),
    ([Block(["*/read"], [])], "Microsoft.HybridCompute/machines/write", False),
    ([Block(["Microsoft.Authorization/*"], [])], "microsoft.authorization/roleassignments/write", True),
    # Contributor: everything but writing role assignments.
    ([Block(["*"], ["Microsoft.Authorization/*/Write", "Microsoft.Authorization/*/Delete"])],
     "Microsoft.Authorization/roleAssignments/write", False),
    ([Block(["*"], ["Microsoft.Authorization/*/Write"]), Block(["Microsoft.Authorization/roleAssignments/*"], [])],
     "Microsoft.Authorization/roleAssignments/write", True),
    ([], "Microsoft.HybridCompute/machines/read", False),
])
def test_allowed(blocks, action, expected):
    assert permissions.allowed(action, blocks) is expected


def test_join_permissions_against_the_emulator(emulator):
    from azure.identity import ClientSecretCredential

    from aks_flex_node.azure.clients import Clients
    from aks_flex_node.clouds import endpoints
    from aks_flex_node.config import parse_cluster_id
    from tests.emulator import constants as C

    ends = endpoints("custom", emulator.arm, emulator.authority, emulator.ca_bundle)
    ref = parse_cluster_id(C.CLUSTER_ID)
    owner = ClientSecretCredential(C.TENANT_ID, C.SP_CLIENT_ID, C.SP_CLIENT_SECRET,
                                   **emulator.credential_kwargs())
    permissions.require_join_permissions(Clients(ends, owner), ref, C.SUBSCRIPTION_ID, C.CLUSTER_RG)
    reader = ClientSecretCredential(C.TENANT_ID, C.READER_SP_CLIENT_ID, C.READER_SP_CLIENT_SECRET,
                                    **emulator.credential_kwargs())
    with pytest.raises(AuthError) as err:
        permissions.require_join_permissions(Clients(ends, reader), ref, C.SUBSCRIPTION_ID, C.CLUSTER_RG)
    assert "Microsoft.Authorization/roleAssignments/write on " + C.CLUSTER_ID in err.value.message
    assert "Microsoft.HybridCompute/machines/write" in err.value.message


def test_both_scopes_are_read_and_the_clusters_failure_is_the_one_reported(emulator):
    """The two reads go at once (each is an ARM round trip on every bootstrap's way); when
    both fail, the error names the cluster's scope, as when they went one after the other."""
    from azure.identity import ClientSecretCredential

    from aks_flex_node.azure.clients import Clients
    from aks_flex_node.clouds import endpoints
    from aks_flex_node.config import parse_cluster_id
    from tests.emulator import constants as C

    ends = endpoints("custom", emulator.arm, emulator.authority, emulator.ca_bundle)
    ref = parse_cluster_id(C.CLUSTER_ID)
    owner = ClientSecretCredential(C.TENANT_ID, C.SP_CLIENT_ID, C.SP_CLIENT_SECRET,
                                   **emulator.credential_kwargs())
    emulator.admin("DELETE", "requests")
    denied = {"status": 403, "body": {"error": {"code": "AuthorizationFailed", "message": "denied (fault)"}}}
    emulator.faults([{"match": {"server": "arm", "path_regex": r"/providers/Microsoft\.Authorization/permissions$"},
                      "respond": denied}])
    try:
        with pytest.raises(AuthError) as err:
            permissions.require_join_permissions(Clients(ends, owner), ref, C.SUBSCRIPTION_ID, C.CLUSTER_RG)
    finally:
        emulator.clear_faults()
    assert f"permissions on {C.CLUSTER_ID}" in str(err.value), str(err.value)
    reads = [r["path"] for r in emulator.requests(server="arm") if r["path"].endswith("/permissions")]
    assert len(reads) == 2 and any("managedClusters" in p for p in reads), reads
