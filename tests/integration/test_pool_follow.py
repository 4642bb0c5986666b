"""An agent-pool node follows its pool (pool_follow.py, docs/upgrade.md "Agent-pool nodes
follow their pool"), through the real CLI and agent pass against the emulator playing the AKS
resource provider (tests/emulator/pool_operations.py): a pool upgrade and a rollback move the
node's kubelet when the RP deletes the Node, never on a goal change alone and never with a
cordon or drain of the node's; delete-machines makes the node leave; a node that lost its role
keeps its version and says why."""

import json
import os

from tests import harness
from tests.emulator import constants as C
from tests.harness import MACHINE_NAME
from tests.waiting import wait_for
from tests.workload_fixtures import pool_machines, registered_node

LEDGER = "/var/lib/aks-flex-node/ledger.json"
NEW = "1.31.2"


def _ledger_goal(node):
    ledger = json.loads(node.read(LEDGER))
    return next((e for e in ledger["entries"] if e["kind"] == "machine_goal"), None)


def _kubelet_version(emu):
    node = registered_node(emu) or {}
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")


def _machine(emu):
    return pool_machines(emu)[MACHINE_NAME]


def _status(node):
    return json.loads(node.read("/var/lib/aks-flex-node/status.json"))


def _pass(node):
    proc = node.cli("agent", "--once")
    return proc, _status(node)


def _put_machine_version(emu, version):
    """The pool's goal changed (as `az aks nodepool upgrade` writes it first), with no signal."""
    path = f"{C.CLUSTER_ID}/agentPools/{C.FLEX_POOL}/machines/{MACHINE_NAME}"
    spec = dict(_machine(emu)["spec"]["kubernetes"], orchestratorVersion=version)
    status, _headers, body = emu.arm_call("PUT", path, "2026-05-02-preview", {"properties": {"kubernetes": spec}})
    assert status in (200, 201), body


def _joined(node):
    node.emu.settings(rbac_propagation_delay=0)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    goal = _ledger_goal(node)
    assert goal["applied"]["etag"] == _machine(node.emu)["etag"]  # the join recorded the Machine it registered
    return summary


def test_a_pool_upgrade_moves_the_kubelet_and_a_rollback_brings_it_back(pool_node):
    node, emu = pool_node, pool_node.emu
    _joined(node)
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": NEW})
    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    # The RP wrote the goal, drained and deleted the Node: the signal.
    assert wait_for(lambda: registered_node(emu) is None, 30), emu.pool_operation(op)
    machine = _machine(emu)
    assert machine["spec"]["kubernetes"]["orchestratorVersion"] == NEW

    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["machine_goal"]["verdict"] == "apply" and status["machine_goal"]["version"] == NEW
    assert _kubelet_version(emu) == f"v{NEW}"
    assert _ledger_goal(node)["applied"]["etag"] == machine["etag"]
    assert "applying" not in _ledger_goal(node)
    assert wait_for(lambda: emu.pool_operation(op)["status"] == "Succeeded", 30), emu.pool_operation(op)
    # The node cordoned and evicted nothing: disruption was the RP's.
    assert not emu.requests(server="apiserver", method="POST", path_contains="/eviction")
    assert not [r for r in emu.requests(server="apiserver", method="PATCH", path_contains=f"/nodes/{MACHINE_NAME}")
                if (r.get("detail") or {}).get("unschedulable")]

    # Converged: the next pass reads the same eTag; it removes the previous version's
    # directory (docs/upgrade.md: kept until the next run), and the one after changes nothing.
    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["machine_goal"]["verdict"] == "in-step"
    assert [p["name"] for p in status["phases"] if p["status"] == "changed"] in ([], ["kubernetes"])
    proc, status = _pass(node)
    assert [p["name"] for p in status["phases"] if p["status"] == "changed"] == []

    # Rollback: the previous settings, a new eTag, an older minor: allowed because the pool asks.
    op = emu.rollback_pool(C.CLUSTER_ID, C.FLEX_POOL)
    assert wait_for(lambda: registered_node(emu) is None, 30), emu.pool_operation(op)
    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert _kubelet_version(emu) == f"v{C.K8S_VERSION}"
    assert _ledger_goal(node)["applied"]["values"]["kubernetes_version"] == C.K8S_VERSION
    assert wait_for(lambda: emu.pool_operation(op)["status"] == "Succeeded", 30), emu.pool_operation(op)


def test_a_new_goal_without_the_nodes_deletion_changes_nothing(pool_node):
    node, emu = pool_node, pool_node.emu
    _joined(node)
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": NEW})
    _put_machine_version(emu, NEW)
    etag = _machine(emu)["etag"]
    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["machine_goal"]["verdict"] == "wait" and status["machine_goal"]["etag"] == etag
    assert _kubelet_version(emu) == f"v{C.K8S_VERSION}"
    # The agent did not write its own settings back over the pool's goal.
    machine = _machine(emu)
    assert machine["etag"] == etag and machine["spec"]["kubernetes"]["orchestratorVersion"] == NEW
    assert "machine goal: wait" in node.cli("status").stdout
    conditions = {c["type"]: c for c in registered_node(emu)["status"]["conditions"]}
    assert conditions["FlexNodeMachineGoalBlocked"]["status"] == "False"


def test_delete_machines_makes_the_node_leave(pool_node):
    node, emu = pool_node, pool_node.emu
    _joined(node)
    emu.settings(machine_operation_delay=0)
    path = f"{C.CLUSTER_ID}/agentPools/{C.FLEX_POOL}/deleteMachines"
    status, _headers, body = emu.arm_call("POST", path, "2026-05-02-preview", {"machineNames": [MACHINE_NAME]})
    assert status == 202, body
    assert wait_for(lambda: MACHINE_NAME not in pool_machines(emu), 30)
    taints = [t["key"] for t in registered_node(emu)["spec"]["taints"]]
    assert "kubernetes.azure.com/flex-node-deleting" in taints

    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["operation"] == "unbootstrap" and status["state"] == "unjoined"
    assert "Machine" in status["reason"]
    assert not os.path.lexists(node.path(LEDGER))  # the host is clean: nothing left to undo
    assert not os.path.lexists(node.path("/usr/local/bin/kubelet"))
    # The Node is the cluster's to remove (no node may delete its own), tainted as the RP left it.
    assert registered_node(emu) is not None
    # The agent is idle now: nothing joined, nothing pending.
    proc = node.cli("agent", "--once")
    assert proc.returncode == 0, proc.stderr
    assert _status(node)["operation"] == "unbootstrap"


def test_a_machine_gone_without_the_rps_mark_is_waited_on(pool_node):
    """A 404 alone (an RP half-way, an answer gone wrong) wipes nothing, and the agent does
    not register the Machine again behind the pool's back."""
    node, emu = pool_node, pool_node.emu
    _joined(node)
    emu.faults([{"match": {"method": "GET", "path_regex": f"machines/{MACHINE_NAME}"},
                 "respond": {"status": 404, "body": {"error": {"code": "ResourceNotFound", "message": "gone"}}}}])
    puts = len(emu.requests(server="arm", method="PUT", path_contains="/machines/"))
    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["operation"] == "bootstrap"
    assert status["machine_goal"]["verdict"] == "wait"
    assert _ledger_goal(node) is not None and os.path.exists(node.path("/usr/local/bin/kubelet"))
    assert len(emu.requests(server="arm", method="PUT", path_contains="/machines/")) == puts


def test_a_node_that_lost_its_role_keeps_its_version_and_says_why(pool_node):
    node, emu = pool_node, pool_node.emu
    _joined(node)
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": NEW})
    _put_machine_version(emu, NEW)
    assert emu.remove_role_assignments(C.NODE_SP_OBJECT_ID) >= 1
    proc, status = _pass(node)
    assert proc.returncode != 0  # the full pass cannot read its Machine: it fails, saying so
    assert status["machine_goal"]["verdict"] == "blocked" and status["machine_goal"]["code"] == "forbidden"
    assert "Flex Node Agent Role" in status["error"]["remedy"] or "role" in status["error"]["message"]
    assert _kubelet_version(emu) == f"v{C.K8S_VERSION}"
    conditions = {c["type"]: c for c in registered_node(emu)["status"]["conditions"]}
    assert conditions["FlexNodeMachineGoalBlocked"]["status"] == "True"
    assert conditions["FlexNodeMachineGoalBlocked"]["reason"] == "Forbidden"


def test_a_goal_whose_kubelet_fails_is_rolled_back_not_retried_and_upgrade_tries_again(pool_node):
    node, emu = pool_node, pool_node.emu
    harness.write_config(node.root, node.emu, node.wrapper, extra={
        "join_mode": "agent-pool", "agent_pool": C.FLEX_POOL, "sp_client_id": C.NODE_SP_CLIENT_ID,
        "arc_tags": "", "himds_endpoint": "", "node_ready_timeout": "15"})
    with open(node.path(harness.SECRET_PATH), "w") as f:  # (write_config wrote the operator's)
        f.write(C.NODE_SP_CLIENT_SECRET + "\n")
    _joined(node)
    node.env["FAKE_KUBELET_FAIL_VERSIONS"] = NEW
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": NEW})
    emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    assert wait_for(lambda: registered_node(emu) is None, 30)
    etag = _machine(emu)["etag"]

    proc, status = _pass(node)
    assert proc.returncode == 1 and status["error"]["error"] == "upgrade-failed", status["error"]
    assert _ledger_goal(node)["failed"]["etag"] == etag and "applying" not in _ledger_goal(node)
    assert _ledger_goal(node)["applied"]["values"]["kubernetes_version"] == C.K8S_VERSION
    assert wait_for(lambda: _kubelet_version(emu) == f"v{C.K8S_VERSION}", 30)  # the old one is back

    # Not tried again on its own: the next pass says why and leaves the kubelet alone.
    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["machine_goal"]["verdict"] == "blocked" and status["machine_goal"]["code"] == "goal-failed"
    assert "kubelet-upgrade" not in [p["name"] for p in status["phases"] if p["status"] == "changed"]
    conditions = {c["type"]: c for c in registered_node(emu)["status"]["conditions"]}
    assert conditions["FlexNodeMachineGoalBlocked"]["reason"] == "GoalFailed"

    # The cause fixed, the operator's `upgrade` applies the Machine's goal (draining itself,
    # as an operator's upgrade does).
    del node.env["FAKE_KUBELET_FAIL_VERSIONS"]
    proc = node.cli("upgrade")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _kubelet_version(emu) == f"v{NEW}"
    goal = _ledger_goal(node)
    assert goal["applied"]["etag"] == etag and "failed" not in goal


def test_a_leave_cut_short_is_finished_by_the_next_pass_not_converged_back(pool_node):
    """A pass killed inside the leave (the kubelet's kubeconfig already removed, the ledger not
    yet): the mark written before the leave makes the next pass finish it, where it would have
    found no Node to read and converged the host back (the booted pool scenario saw it)."""
    node, emu = pool_node, pool_node.emu
    _joined(node)
    emu.settings(machine_operation_delay=0)
    path = f"{C.CLUSTER_ID}/agentPools/{C.FLEX_POOL}/deleteMachines"
    assert emu.arm_call("POST", path, "2026-05-02-preview", {"machineNames": [MACHINE_NAME]})[0] == 202
    assert wait_for(lambda: MACHINE_NAME not in pool_machines(emu), 30)
    # What the killed pass left: its mark, the kubelet's kubeconfig gone, the ledger still there.
    with open(os.open(node.path("/var/lib/aks-flex-node/leave-pending"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("the pool deleted this node's Machine and marked its Node")
    os.remove(node.path("/var/lib/kubelet/kubeconfig"))

    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["operation"] == "unbootstrap" and status["state"] == "unjoined", status
    assert not os.path.lexists(node.path(LEDGER))
    assert not os.path.lexists(node.path("/var/lib/aks-flex-node/leave-pending"))
    assert not os.path.lexists(node.path("/var/lib/kubelet/kubeconfig"))  # nothing joined back
    # An operator's bootstrap joins again (a new Machine), the mark long gone.
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert MACHINE_NAME in pool_machines(emu)


def test_a_node_deleted_while_a_pass_runs_is_left_to_the_next_pass(pool_node):
    """The pass read its Node, then the pool's operation deleted it: node-ready does not wait
    node_ready_timeout for a Node the kubelet will not register again by itself; the next
    pass reads the Machine and applies it (the booted pool scenario lost two minutes here)."""
    node, emu = pool_node, pool_node.emu
    _joined(node)
    before = registered_node(emu)
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": NEW})
    emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    assert wait_for(lambda: registered_node(emu) is None, 30)
    # The pass's first read of the Node (pool_follow.observe) still sees it; the rest do not.
    public = {k: v for k, v in before.items() if not k.startswith("_")}
    emu.faults([{"match": {"server": "apiserver", "method": "GET", "path_regex": f"/api/v1/nodes/{MACHINE_NAME}$",
                           "times": 1}, "respond": {"status": 200, "body": public}}])
    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["machine_goal"]["verdict"] == "wait"
    phase = {p["name"]: p for p in status["phases"]}["node-ready"]
    assert phase["status"] == "unchanged" and "next pass" in phase["message"], phase
    proc, status = _pass(node)
    assert proc.returncode == 0, proc.stderr
    assert status["machine_goal"]["verdict"] == "apply" and _kubelet_version(emu) == f"v{NEW}"
