"""The agent service: it finishes a pending join by itself once Azure answers, keeps a
joined node converged, does nothing on a node that wants no join, and stops cleanly."""

import json
import os
import re
import signal
import subprocess
import time

from tests import harness
from tests.agent_fixtures import FORK_WARNING, PENDING, start_agent, status, wait_for_passes
from tests.emulator import constants as C
from tests.waiting import wait_for

def test_agent_completes_a_pending_join_once_azure_answers(node):
    os.makedirs(node.path("/var/lib/aks-flex-node"), exist_ok=True)
    open(node.path(PENDING), "w").close()
    # Entra ID is down at first: the join fails, the agent backs off and retries.
    node.emu.faults([{"match": {"server": "entra"}, "respond": {"status": 503}}])
    agent = start_agent(node, "--interval", "1")
    try:
        assert wait_for(lambda: status(node).get("state") == "pending", 120), status(node)
        assert os.path.exists(node.path(PENDING))
        # A failed attempt of a pending join is not the end: `status --wait` keeps waiting.
        waited = node.cli("status", "--wait", "--timeout", "1")
        assert waited.returncode == 75, waited.stderr
        assert "the join is still pending after 1 s; " in waited.stderr
        shown = node.cli("status")
        assert "the join is pending: aks-flex-node-agent retries it" in shown.stdout
        node.emu.clear_faults()
        assert wait_for(lambda: status(node).get("state") == "succeeded", 120), \
            (status(node), agent.poll())
        assert not os.path.exists(node.path(PENDING)), "a successful join clears the pending mark"
        # A ceiling, not a measure: with a pass every second a loaded machine may show one
        # running for a while; --wait returns as soon as one has ended.
        assert node.cli("status", "--wait", "--timeout", "120").returncode == 0
        assert len(node.emu.state()["machines"]) == 1
        # Local passes converge the host without reading ARM (throttling: Learn
        # https://learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling).
        arm_reads = len(node.emu.requests(server="arm"))
        passes = status(node)["started"]
        assert wait_for(lambda: status(node).get("pass") == "local"
                        and status(node)["started"] != passes, 30)
        assert wait_for_passes(node, 2)
        assert len(node.emu.requests(server="arm")) == arm_reads
        # It keeps watching: a stopped kubelet is started again on a later pass.
        subprocess.run(["systemctl", "stop", "kubelet"], env=node.env, check=True)
        assert wait_for(lambda: subprocess.run(["systemctl", "is-active", "kubelet"], env=node.env,
                                               capture_output=True).returncode == 0, 30)
    finally:
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    assert FORK_WARNING not in err, "the agent forked a pass beside another thread of its own"
    assert "retrying" in err
    # The service's journal (INFO by default) says what each pass changed and why: the
    # join, then the kubelet started again by a local pass.
    assert re.search(r"INFO .*arc: connect to Azure Arc as ", err), err
    assert len(re.findall(r"INFO .*services: start kubelet \(it is not running\)", err)) >= 2, err
    assert len(re.findall(r"INFO .*: joined aks-one as flex-node-1", err)) == 1, err
    assert re.search(r"INFO .*: local pass: repaired services", err), err


def test_agent_does_nothing_when_no_join_is_wanted(node):
    proc = node.cli("agent", "--once")
    assert proc.returncode == 0, proc.stderr
    assert node.emu.state()["machines"] == []
    assert not os.path.exists(node.path("/usr/local/bin/kubelet"))


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(child) for child in f.read().split()]


def _vmrss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def test_the_agent_stays_small_between_passes(node):
    """Issue 12: at most 35 MB resident between passes (49.8 MB when a pass ran in the
    agent's own process and the Azure SDK stayed imported)."""
    os.makedirs(node.path("/var/lib/aks-flex-node"), exist_ok=True)
    open(node.path(PENDING), "w").close()
    agent = start_agent(node, "--interval", "1", "--cloud-interval", "2")
    try:
        assert wait_for(lambda: status(node).get("state") == "succeeded", 120), status(node)
        samples, passes = [], set()
        deadline = time.monotonic() + 6  # full and local passes, each in a child
        while time.monotonic() < deadline:
            if not _children(agent.pid):  # between passes
                samples.append(_vmrss_kb(agent.pid))
            passes.add((status(node).get("started"), status(node).get("pass")))
            time.sleep(0.05)
        assert {kind for _started, kind in passes} == {"full", "local"}, passes
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    assert samples
    print(f"agent VmRSS between passes: {min(samples)}..{max(samples)} kB over {len(samples)} samples")
    assert max(samples) < 35 * 1024, f"VmRSS between passes {max(samples)} kB"


def test_a_pass_killed_mid_way_is_a_failed_pass_and_the_next_one_joins(node):
    os.makedirs(node.path("/var/lib/aks-flex-node"), exist_ok=True)
    open(node.path(PENDING), "w").close()
    # Entra ID holds its answer until the faults are cleared: the first pass is still waiting
    # on it when its process dies, however slow this machine.
    node.emu.faults([{"match": {"server": "entra"}, "hold": True}])
    agent = start_agent(node, "--interval", "1")
    try:
        # Well into the pass: Entra ID has its request, and holds it.
        assert wait_for(lambda: status(node).get("state") == "running" and _children(agent.pid)
                        and node.emu.state()["fault_hits"] >= 1, 60)
        (child,) = _children(agent.pid)
        os.kill(child, signal.SIGKILL)
        node.emu.clear_faults()
        assert wait_for(lambda: status(node).get("state") == "succeeded", 120), status(node)
    finally:
        node.emu.clear_faults()  # lets the held request go, whatever happened
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    assert re.search(rf"WARNING .*bootstrap pass failed \(the pass's process {child} was killed by "
                     r"signal 9 \(SIGKILL\)\); retrying in 1 s", err), err
    assert len(re.findall(r"INFO .*: joined aks-one as flex-node-1", err)) == 1, err


def test_a_pass_never_moves_the_node_to_the_cluster_an_edited_file_names(node):
    """An operator edits cluster_resource_id, then runs dpkg-reconfigure (which leaves the old
    cluster first). A pass that runs in between must not join the new cluster over the old
    join: it waits for the operator, and the ledger still names the old cluster."""
    node.cli("bootstrap", check=True)
    harness.write_config(node.root, node.emu, node.wrapper, cluster_id=C.CLUSTER2_ID)
    machines = node.emu.state()["machines"]
    proc = node.cli("agent", "--once")
    assert proc.returncode == 2, proc.stderr
    assert "dpkg-reconfigure aks-flex-node" in proc.stderr and C.CLUSTER_ID in proc.stderr
    ledger = json.loads(node.read("/var/lib/aks-flex-node/ledger.json"))
    assert ledger["joined"]["cluster_resource_id"].lower() == C.CLUSTER_ID.lower()
    assert node.emu.state()["machines"] == machines, "nothing done in Azure for the new cluster"
