"""Scenario: two agent-pool nodes of one FlexNodes pool follow their pool under real systemd
(issue 31; aks_flex_node/pool_follow.py). The AKS resource provider is the emulator's
(tests/emulator/pool_operations.py), as Azure/AKSFlexNode docs/design/agent-and-aks.md describes
it: it writes each Machine's settings (a new eTag), cordons and drains the Node, then deletes
it as the signal; the node's agent sees its Node gone, reads its Machine, moves the kubelet
through the atomic versioned switch, and the kubelet registers the Node again; the RP goes on
to the next Machine once that Node is Ready at the version.

- Both nodes join by a preseeded install (test_agent_pool's answers), each as its own Machine.
- The control plane goes to 1.31.2, then the pool: the Machines move one after the other (the
  second Node is not deleted before the first is back Ready at v1.31.2), both kubelets end on
  1.31.2, no node cordons or evicts anything (the RP's drain is no request of the node's), and
  each node's status says its goal is in step with its Machine's new eTag.
- The rollback brings both back to 1.30.4, the first node's agent killed (SIGKILL, the whole
  unit) in the middle of its pass: its registration held by the API server stand-in, the
  ledger says the goal is being applied and the kubelet switch under way; systemd restarts the
  agent (Restart=on-failure) and its next pass finishes.
- delete-machines (the operator's ARM POST): each agent confirms its Machine's 404 and the
  deletion taint, and leaves: the host clean (no ledger, no kubelet), `status` says unjoined
  and why, the package installed, the agent with nothing to watch; the Machines gone, the
  Nodes left to the cluster with the RP's taint (no node may delete its own Node).

The agents pass every few seconds (pool.shorten_agent_interval, a drop-in), so that a node
notices its deleted Node soon; every wait is on a condition, none asserts a duration.
"""

import concurrent.futures
import time

import pytest

from aks_flex_node.pool_follow import DELETING_TAINT
from tests.e2e import node as n
from tests.e2e import pool
from tests.emulator import constants as C
from tests.waiting import wait_for
from tests.workload_fixtures import pool_machines

pytestmark = pytest.mark.e2e

NAMES = ("pool-node-1", "pool-node-2")  # the RP moves them in this order (by name)
NEW, OLD = "1.31.2", C.K8S_VERSION
KUBE_LIB = "/usr/local/lib/aks-flex-node/kubernetes"
AGENT_INTERVAL = 3
ACTIVE = ("Draining", "WaitingForNode")  # a Machine the RP is moving (pool_operations.py)


class Laps:
    """Seconds each section took, printed for the record (`pytest -s`); never asserted."""

    def __init__(self):
        self.last = time.monotonic()

    def __call__(self, what):
        now = time.monotonic()
        print(f"{what}: {now - self.last:.0f} s")
        self.last = now


def kubelet_version_of(emu, name):
    return n.cluster_nodes(emu)[name]["status"]["nodeInfo"]["kubeletVersion"]


def on_version(node, emu, name, version):
    """The Node Ready at v`version` and the node's own kubelet binary that version."""
    registered = n.cluster_nodes(emu).get(name)
    return (registered is not None and n.is_ready(registered)
            and registered["status"]["nodeInfo"]["kubeletVersion"] == f"v{version}"
            and node.c.run(["/usr/local/bin/kubelet", "--version"]).stdout.strip() == f"Kubernetes v{version}"
            and node.c.run(["readlink", f"{KUBE_LIB}/current"]).stdout.strip() == f"v{version}")


def running(node, comm):
    """The pids in the node whose command name is `comm` (proc(5), /proc/PID/comm)."""
    found = []
    for pid in node.c.processes():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == comm:
                    found.append(pid)
        except OSError:  # gone meanwhile
            pass
    return found


def in_step(node, etag):
    """`aks-flex-node status --json`'s machine goal: in-step with `etag`; the status seen."""
    status = node.status()
    goal = status.get("machine_goal") or {}
    return status if goal.get("verdict") == "in-step" and goal.get("etag") == etag else None


def assert_moved_one_after_the_other(watch, version):
    """Every view of the operation: the second Machine left Pending only once the first had
    Succeeded, and whenever the second's Node was gone the first's was back, Ready, at `version`."""
    first, second = NAMES
    assert watch.last["status"] == "Succeeded", (watch.last, watch.views[-5:])
    assert watch.last["machines"] == {first: "Succeeded", second: "Succeeded"}, watch.last
    for machines, nodes in watch.views:
        assert not (machines[first] in ACTIVE and machines[second] in ACTIVE), (machines, nodes)
        if machines[second] != "Pending":
            assert machines[first] == "Succeeded", (machines, nodes)
        if not nodes[second][0]:  # the second Node deleted: the first is back at the version
            assert nodes[first][:2] == (True, True) and nodes[first][2] == f"v{version}", (machines, nodes)
    # The views caught the first Machine on its way while the second waited.
    assert any(machines[first] in ACTIVE and machines[second] == "Pending" for machines, _ in watch.views), \
        watch.views


def assert_nodes_did_not_disrupt(watch):
    """No cordon (a write of the Node object itself) and no eviction by a node's identity:
    disruption is the RP's (its drain is no request; docs/design/agent-and-aks.md "Ownership")."""
    evictions = watch.by_nodes(path_contains="/eviction")
    node_writes = [r for r in watch.by_nodes() if r["method"] in ("PATCH", "PUT")
                   and any(r["path"].rstrip("/").endswith(f"/api/v1/nodes/{name}") for name in NAMES)]
    assert evictions == [] and node_writes == [], (evictions, node_writes)
    assert watch.by_nodes(method="GET"), "the log shows the nodes' own reads, so it would show their writes"


def test_two_pool_nodes_follow_upgrade_rollback_and_delete_machines(boot_node, repo, mirror):
    lap = Laps()
    nodes = {name: boot_node(repo, hostname=name) for name in NAMES}
    lap("two nodes booted")
    emu = nodes[NAMES[0]].emulator
    # A loaded machine makes the RP's wait for a Node longer, never the test red; the RP's
    # fallback that deletes a stale Node (emulator's choice, 600 s) is kept out of this test's
    # way, so that what deleteMachines leaves is the agent's doing.
    emu.settings(pool_node_timeout=7200.0, stale_node_grace=86400.0)

    # -- 1. both join ----------------------------------------------------------------------
    for name, node in nodes.items():
        pool.shorten_agent_interval(node, AGENT_INTERVAL)
    with concurrent.futures.ThreadPoolExecutor(len(nodes)) as workers:
        installs = dict(zip(NAMES, workers.map(lambda name: pool.install_pool_node(nodes[name], mirror, name),
                                               NAMES)))
    for name, apt in installs.items():
        assert apt.returncode == 0, f"{name}: {apt.stdout[-3000:]}\n{apt.stderr[-5000:]}"
    machines = pool_machines(emu)
    for name, node in nodes.items():
        assert n.wait_for_state(node)["state"] == "succeeded"
        assert on_version(node, emu, name, OLD), node.journals()
        # The join recorded its Machine's settings as the ones it runs.
        assert pool.machine_goal(node)["applied"]["etag"] == machines[name]["etag"]
        assert pool.unit_property(node, pool.AGENT, "Restart") == "on-failure"

    lap("both joined")

    # -- 2. the control plane, then the pool, to 1.31.2 --------------------------------------
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": NEW})
    upgrade = pool.OperationWatch(emu, emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW), NAMES)
    upgrade.wait()
    assert_moved_one_after_the_other(upgrade, NEW)
    assert_nodes_did_not_disrupt(upgrade)
    machines = pool_machines(emu)
    for name, node in nodes.items():
        assert on_version(node, emu, name, NEW), node.journals()
        status = wait_for(lambda: in_step(node, machines[name]["etag"]), timeout=300, interval=1)
        assert status, (name, machines[name]["etag"], node.status().get("machine_goal"), node.journal(pool.AGENT))
        assert status["machine_goal"]["version"] == NEW
        assert pool.machine_goal(node).get("applying") is None

    lap("the upgrade, and both nodes in step")

    # -- 3. the rollback, the first node's agent killed half-way through its pass ----------------
    first = nodes[NAMES[0]]
    restarts = int(pool.unit_property(first, pool.AGENT, "NRestarts"))
    # The first kubelet's registration waits at the API server stand-in until released: a gate
    # for "the pass is inside the move", not a time the test races.
    emu.faults([{"match": {"server": "apiserver", "method": "POST", "path_regex": r"^/api/v1/nodes/?$"},
                 "hold": True}])
    rollback = pool.OperationWatch(emu, emu.rollback_pool(C.CLUSTER_ID, C.FLEX_POOL), NAMES)

    def inside_the_move():
        rollback.look()
        upgrading = pool.kubelet_upgrade(first) or {}
        return bool(pool.machine_goal(first).get("applying")) and upgrading.get("phase") == "switch" \
            and upgrading.get("to") == OLD

    assert wait_for(inside_the_move, timeout=600, interval=0.2), (
        pool.machine_goal(first), pool.kubelet_upgrade(first), rollback.last, first.journal(pool.AGENT))
    killed = pool.kill_unit(first, pool.AGENT)
    assert len(killed) >= 2, killed  # the agent and its pass's child, at least
    emu.clear_faults()  # the registration goes on
    rollback.wait()
    assert_moved_one_after_the_other(rollback, OLD)
    assert_nodes_did_not_disrupt(rollback)
    # systemd restarted the killed agent, and its pass finished the move.
    assert wait_for(lambda: int(pool.unit_property(first, pool.AGENT, "NRestarts")) > restarts, timeout=300,
                    interval=1), first.journal(pool.AGENT)
    machines = pool_machines(emu)
    for name, node in nodes.items():
        assert on_version(node, emu, name, OLD), node.journals()
        status = wait_for(lambda: in_step(node, machines[name]["etag"]), timeout=300, interval=1)
        assert status, (name, machines[name]["etag"], node.status().get("machine_goal"), node.journal(pool.AGENT))
        goal = pool.machine_goal(node)
        assert goal.get("applying") is None and goal["applied"]["etag"] == machines[name]["etag"], goal
        assert pool.kubelet_upgrade(node) is None, pool.kubelet_upgrade(node)

    lap("the rollback, the killed agent back, and both nodes in step")

    # -- 4. delete-machines: each node leaves ------------------------------------------------
    ended = pool.operator_delete_machines(emu, NAMES)
    lap("deleteMachines")
    assert ended["status"] == "Succeeded", ended
    for name, node in nodes.items():
        left = {}

        def unjoined():
            left["status"] = status = node.status()
            return status.get("state") == "unjoined" and node.c.read(pool.LEDGER) is None

        assert wait_for(unjoined, timeout=600, interval=1), (name, left.get("status"), node.journal(pool.AGENT))
        lap(f"{name} left")
        assert left["status"].get("reason"), left["status"]  # why it left
        assert node.c.is_active("kubelet") in ("inactive", "unknown", "failed"), node.journal("kubelet")
        assert n.main_pid(node, "kubelet") == "0" and running(node, "kubelet") == [], node.journal("kubelet")
        assert node.c.read("/usr/local/bin/kubelet") is None
        assert node.dpkg_status().startswith("install ok installed")
        assert node.c.read(n.CONF) is not None  # the configuration kept for a new join
        # The agent stays up with nothing to watch; started again, its unit's conditions (a
        # pending join or a ledger) keep it from running at all.
        assert node.c.is_active(pool.AGENT) == "active", node.journal(pool.AGENT)
        node.c.run(["systemctl", "restart", pool.AGENT])
        assert pool.unit_property(node, pool.AGENT, "ConditionResult") == "no"
    assert not set(NAMES) & set(pool_machines(emu))
    registered = n.cluster_nodes(emu)
    for name in NAMES:
        taints = registered[name]["spec"].get("taints") or []
        assert any(t.get("key") == DELETING_TAINT for t in taints), registered[name]
