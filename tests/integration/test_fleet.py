"""The fleet simulation (tests/fleet) at small scale: six nodes join one emulated
subscription at once with buckets so small that ARM throttles them, every 429 is waited
out as Retry-After says, every node joins, and after the unjoin nothing of theirs is left.
`make fleet N=200` runs the same code with the documented figures (docs/fleet.md)."""

import pytest

from tests.emulator import throttling
from tests.fleet import simulation
from tests.fleet.__main__ import parse_args, scaled_figures

NODES = 6
# Far below the documented 250/200/200 tokens: six joins need 36 reads and 30 writes, their
# unjoins 24 deletes, each in a few seconds, so the write and delete buckets run dry (a
# bucket of 10 refilled at 2/s holds fewer than 30 tokens over 10 s) and refuse with
# Retry-After: 1, which keeps the test short.
TINY_BUCKETS = {"arm_reads_bucket": 24, "arm_reads_refill": 12.0,
                "arm_writes_bucket": 10, "arm_writes_refill": 2.0,
                "arm_deletes_bucket": 10, "arm_deletes_refill": 2.0}


def test_a_small_fleet_joins_under_throttling_and_leaves_nothing(tmp_path):
    result = simulation.run(NODES, settings=TINY_BUCKETS, parent=tmp_path)
    report = simulation.render(result)
    assert result.joined == NODES and result.unjoined == NODES, report
    seen = result.throttled["join"]["seen"] + result.throttled["unjoin"]["seen"]
    honoured = result.throttled["join"]["honoured"] + result.throttled["unjoin"]["honoured"]
    assert seen > 0, report  # the buckets did run dry
    assert honoured == seen and result.not_honoured == [], report
    assert result.unattributed == 0, report
    # The write floor of a legacy-preset join: the Arc machine, three role assignments and
    # the cluster's user credentials (a POST action: a write for ARM).
    assert result.arm["join"]["writes"] == [5] * NODES, report
    assert result.arm["unjoin"]["deletes"] == [4] * NODES, report
    assert result.assignments_per_node == [3], report
    assert result.leftovers == {"arc_machines": [], "pool_machines": [], "role_assignments": [], "nodes": []}, report
    assert result.ceilings()["legacy"] == {"assignments_per_node": 3, "max_nodes": (4000 - 3) // 3}
    assert result.ok and report.endswith("PASS")


def test_an_agent_pool_fleet_shares_one_identity_and_the_operator_cleans_up(tmp_path):
    """Six nodes join the FlexNodes pool with the pool's one service principal, whose
    buckets they share; the nodes' unjoins leave the Machines and Nodes (docs/roles.md),
    the operator's one deleteMachines removes them all."""
    result = simulation.run(NODES, settings=TINY_BUCKETS, parent=tmp_path, join_mode="agent-pool")
    report = simulation.render(result)
    assert result.joined == NODES and result.unjoined == NODES, report
    # Per node: listBootstrapData (a POST action: a write) and the Machine's PUT; no role
    # assignment, no Arc machine, nothing deleted by the nodes themselves.
    assert result.arm["join"]["writes"] == [2] * NODES, report
    assert result.arm["unjoin"]["deletes"] == [0] * NODES, report
    assert result.assignments_per_node == [1], report  # the operator's, on the pool
    assert result.not_honoured == [] and result.unattributed == 0, report
    names = [simulation.node_name(i) for i in range(NODES)]
    assert result.kept_by_nodes == {"pool_machines": names, "nodes": names}, report
    assert not any(result.leftovers.values()), report
    assert "the operator's one deleteMachines" in report and report.endswith("PASS")


def test_scale_divides_the_documented_figures_and_refuses_nonsense(capsys):
    scaled = scaled_figures(5)
    for kind, (bucket, refill) in throttling.DOCUMENTED.items():
        assert scaled[f"arm_{kind}_bucket"] == bucket // 5 and scaled[f"arm_{kind}_refill"] == refill / 5
    assert scaled_figures(1000)["arm_writes_bucket"] == 1  # never an empty bucket
    for bad in ("0.5", "101", "nan"):
        with pytest.raises(SystemExit):
            parse_args(["3", "--scale", bad])
        assert f"--scale = {float(bad):g}: expected a number from 1 to 100" in capsys.readouterr().err
