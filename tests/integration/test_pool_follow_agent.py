"""The running agent (not `agent --once`) of an agent-pool node after its pool moved it: the
passes that follow the move are local ones, which do not read the Machine again (pool_follow.
observe), so what they report of the goal is what the agent carried from the pass that applied
it. That must be the goal in step, not the "apply" of a move already done (`aks-flex-node
status` would say so until the next full pass, half an hour later)."""

import signal

from tests.agent_fixtures import start_agent, status, wait_for_passes
from tests.emulator import constants as C
from tests.harness import MACHINE_NAME
from tests.waiting import wait_for

NEW = "1.31.2"


def _machine(emu):
    pools = emu.state()["agentpool_machines"]
    return next(m for pool in pools.values() for m in (pool.values() if isinstance(pool, dict) else pool)
                if m["name"] == MACHINE_NAME)


def _ended(seen):
    """The status of a pass that has ended (a running one has no summary yet), or None."""
    return seen if seen.get("state") not in (None, "running") else None


def test_the_passes_after_a_move_say_the_goal_is_in_step(pool_node):
    node, emu = pool_node, pool_node.emu
    emu.settings(rbac_propagation_delay=0)
    proc, _summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    agent = start_agent(node, "--interval", "0.5")
    try:
        assert wait_for_passes(node, 1)
        emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": NEW})
        op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
        assert wait_for(lambda: emu.pool_operation(op)["status"] != "InProgress", 120), emu.pool_operation(op)
        assert emu.pool_operation(op)["status"] == "Succeeded", emu.pool_operation(op)
        # Two local passes after the one that applied the goal (the move is over: the Node is back).
        assert wait_for_passes(node, 2)
        seen = wait_for(lambda: _ended(status(node)), 60)
        assert seen and seen["pass"] == "local", status(node)
        assert seen["machine_goal"]["verdict"] == "in-step", seen["machine_goal"]
        assert seen["machine_goal"]["etag"] == _machine(emu)["etag"]
        assert seen["machine_goal"]["version"] == NEW
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
