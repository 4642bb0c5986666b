"""Scenario 2: the operator points a joined node at another cluster, in the configuration
file (which wins over debconf's stale answer), and runs dpkg-reconfigure: the node leaves
the first cluster (its role assignments there go) and joins the second."""

import pytest

from tests.e2e import node as n
from tests.emulator import constants as C

pytestmark = pytest.mark.e2e


def joined_to_the_first_cluster(node, mirror):
    emu = node.emulator
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, apt.stderr[-5000:]
    n.wait_for_state(node)
    [first] = n.arc_machines(emu)
    assert {a["scope"].lower() for a in n.machine_role_assignments(emu, first["principal_id"])} == \
        {C.CLUSTER_ID.lower()}
    assert node.debconf_get("cluster_resource_id") == C.CLUSTER_ID
    return first


def assert_moved_to_the_second_cluster(node, first, output):
    emu = node.emulator
    assert f"leaving {C.CLUSTER_ID} first" in output, output[-5000:]
    assert "aks-flex-node: joined" in output, output[-5000:]
    assert node.debconf_get("cluster_resource_id") == C.CLUSTER2_ID
    assert node.conf_value("cluster_resource_id") == C.CLUSTER2_ID
    # Left the first cluster: no role assignment there for the first identity, no Node there.
    scopes = {a["scope"].lower() for a in n.machine_role_assignments(emu, first["principal_id"])}
    assert C.CLUSTER_ID.lower() not in scopes
    assert n.MACHINE_NAME not in n.cluster_nodes(emu, C.CLUSTER_NAME)
    # Joined the second: the Arc machine's identity holds its roles there, the node is
    # Ready there, on the second cluster's Kubernetes version.
    [machine] = n.arc_machines(emu)
    roles = n.machine_role_assignments(emu, machine["principal_id"])
    assert roles and {a["scope"].lower() for a in roles} == {C.CLUSTER2_ID.lower()}
    registered = n.cluster_nodes(emu, C.CLUSTER2_NAME)[n.MACHINE_NAME]
    assert n.is_ready(registered)
    assert registered["status"]["nodeInfo"]["kubeletVersion"] == f"v{C.CLUSTER2_K8S_VERSION}"
    status = n.wait_for_state(node)
    assert status["cluster_resource_id"].lower() == C.CLUSTER2_ID.lower()
    for unit in ("containerd", "kubelet", "aks-flex-node-agent"):
        assert node.c.is_active(unit) == "active"


def test_reconfigure_moves_the_node_to_the_cluster_named_in_the_file(node, mirror):
    first = joined_to_the_first_cluster(node, mirror)
    # The file wins over debconf's stale answer (debconf-devel(7), "Config file handling").
    node.set_conf_value("cluster_resource_id", C.CLUSTER2_ID)
    reconf = node.c.run(["dpkg-reconfigure", "-fnoninteractive", "aks-flex-node"], timeout=900, check=False)
    assert reconf.returncode == 0, reconf.stderr[-5000:]
    assert_moved_to_the_second_cluster(node, first, reconf.stderr)


def test_the_same_change_answered_at_the_question_behaves_alike(node, mirror):
    first = joined_to_the_first_cluster(node, mirror)
    # dpkg-reconfigure asks every question (low priority included), each filled in with
    # the current answer: only the cluster is changed, the rest kept with Enter.
    keep = None
    code, transcript = n.converse(node.c, ["dpkg-reconfigure", "aks-flex-node"], [
        (r"now\? \[yes/no\]", keep),
        (r"How the machine joins the cluster:", keep),
        (r"tenant ID:", keep),
        (r"Resource ID of the AKS cluster:", C.CLUSTER2_ID),
        (r"authenticate to Azure for the join:", keep),
        (r"client\) ID of the service principal:", keep),
        (r"Client secret of the service principal:", keep),  # empty keeps the stored one
        (r"Subscription of the Arc machine:", keep),
        (r"Resource group of the Arc machine:", keep),
        (r"Azure region of the Arc machine:", keep),
        (r"Name of the machine and of its Kubernetes node:", keep),
        (r"Tags of the Arc machine:", keep),
        (r"Kubernetes version of the kubelet:", keep),
        (r"Azure cloud of the cluster:", keep),
        (r"When the join fails:", keep),
    ], env={"DEBIAN_FRONTEND": "readline"})
    assert code == 0, transcript[-5000:]
    assert_moved_to_the_second_cluster(node, first, transcript)
    assert node.c.read("/etc/aks-flex-node/sp-client-secret").decode().strip() == C.SP_CLIENT_SECRET
