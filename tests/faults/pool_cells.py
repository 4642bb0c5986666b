"""An agent-pool node following its pool's upgrade (pool_follow.py), killed half-way.

The pool's operation (the emulator playing the RP: tests/emulator/pool_operations.py) writes the
Machine's new version and deletes the Node; the agent's pass applies it. The cells kill -9 that
pass (its process group: the forked pass and the stand-ins it runs) in the kubelet's restart
after the switch, and while it waits for the new kubelet to be Ready; then agent passes run until
one succeeds. Judged: the Node back at the new version, the goal recorded as applied (nothing
applying, no kubelet upgrade record, nothing owed), and an unbootstrap that leaves the root as
it was before the join.
"""

import json
import time

from tests import harness
from tests.emulator import constants as C
from tests.faults.cells import (
    ATTEMPTS, LEDGER, REFERENCE, Cell, Hang, bootstrap_killed_at, check_azure_joined, error_of, short,
    unbootstrap_and_compare, upgrade_record)

POOL_TO = "1.31.2"  # a minor up: the control plane goes first, as AKS requires of a pool
NODE_GONE_TIMEOUT = 60  # the RP's drain and delete happen on the emulator's next requests


def _node(cell):
    state = cell.emu.state()
    return {n["metadata"]["name"]: n for n in state["nodes"].get(C.CLUSTER_NAME, [])}.get(harness.MACHINE_NAME)


def _goal_record(cell):
    try:
        with open(cell.node.path(LEDGER)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return next((e for e in data.get("entries", []) if e.get("kind") == "machine_goal"), None)


def _released(cell, result):
    """Join, then the pool upgrades: True once the RP deleted the Node (the release)."""
    code, summary, stderr, _ = cell.cli("bootstrap")
    if code != 0:
        result.notes.append(f"the join failed: {short(error_of(summary, stderr))}")
        return False
    cell.emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": POOL_TO})
    cell.emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, POOL_TO)
    deadline = time.monotonic() + NODE_GONE_TIMEOUT
    while _node(cell) is not None:
        if time.monotonic() > deadline:
            result.notes.append("the pool's operation never deleted the Node")
            return False
        time.sleep(0.2)
    return True


def _agent_converges(cell, result, started):
    """Agent passes (each a full one: `--once`) until one succeeds (ATTEMPTS at most)."""
    for _ in range(ATTEMPTS):
        proc = cell.node.cli("agent", "--once")
        if proc.returncode == 0:
            result.converged = True
            result.seconds = time.monotonic() - started
            break
        result.exit_failing.append(proc.returncode)
        note = short((proc.stderr.strip().splitlines() or [""])[-1], 160)
        if note and note not in result.notes:
            result.notes.append(note)
    result.final = cell.snapshot()
    return result.converged


def _check_followed(cell, result):
    node = _node(cell) or {}
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
    goal = _goal_record(cell) or {}
    record, owed = upgrade_record(cell)
    problems = []
    if version != f"v{POOL_TO}":
        problems.append(f"the Node reports kubelet {version}")
    if (goal.get("applied") or {}).get("values", {}).get("kubernetes_version") != POOL_TO or goal.get("applying"):
        problems.append(f"the ledger's goal is {goal}")
    if record is not None or owed:
        problems.append(f"the ledger still holds {record} and owes {owed}")
    if problems:
        result.converged = False
        result.notes.extend(problems)


class _SwitchedAndWaiting:
    """Kill while the pass waits for the new kubelet's Node: the switch is recorded and the new
    kubelet's Node registration refused (503) until the cell releases it."""

    what = "waiting for the re-registered Node at the new version (its registration refused)"
    RULE = {"match": {"server": "apiserver", "method": "POST", "path_regex": r"/api/v1/nodes$"},
            "respond": {"status": 503, "body": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                  "reason": "ServiceUnavailable", "code": 503}}}

    def __init__(self):
        self.armed = False

    def arm(self, cell):
        cell.emu.faults([self.RULE])
        self.armed = True

    def reached(self, cell, run):
        record, owed = upgrade_record(cell)
        hits = sum(r["hits"] for r in cell.emu.admin("GET", "faults"))
        return record is not None and record.get("phase") == "switch" and not any(
            o.get("unit") == "kubelet" for o in owed) and hits > 0

    def release(self, cell):
        cell.emu.clear_faults()


def pool_follow_reference_cell():
    def run(cell, result):
        before_raw = cell.snapshot(raw=True)
        if not _released(cell, result):
            return
        result.pre = cell.snapshot()
        if _agent_converges(cell, result, time.monotonic()):
            check_azure_joined(cell, result)
            _check_followed(cell, result)
            unbootstrap_and_compare(cell, result, before_raw)

    return Cell("pool follow", REFERENCE, "none (the reference: the pool's upgrade, followed)", run,
                seconds_hint=30, mode="pool-follow")


def pool_follow_kill_cell(name, point):
    def run(cell, result):
        before_raw = cell.snapshot(raw=True)
        if not _released(cell, result):
            return
        result.pre = cell.snapshot()
        started = time.monotonic()
        bootstrap_killed_at(cell, result, point, ("agent", "--once"))
        record = _goal_record(cell) or {}
        result.notes.append(f"killed with the goal {'applying' if record.get('applying') else 'not begun'}")
        if _agent_converges(cell, result, started):
            check_azure_joined(cell, result)
            _check_followed(cell, result)
            unbootstrap_and_compare(cell, result, before_raw)

    return Cell("pool follow", f"kill -9 {name}", f"kill -9 the agent's pass {point.what}", run,
                seconds_hint=30, mode="pool-follow")


def pool_follow_cells():
    """The pool's upgrade applied by the agent (docs/upgrade.md, "Agent-pool nodes follow their
    pool"), its pass killed after the switch: in the kubelet's restart, and waiting for the Node."""
    return [
        pool_follow_reference_cell(),
        pool_follow_kill_cell("pool upgrade (in the kubelet's restart)", Hang("systemctl", "restart")),
        pool_follow_kill_cell("pool upgrade (waiting for the Node)", _SwitchedAndWaiting()),
    ]
