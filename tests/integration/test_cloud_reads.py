"""One shared cloud read per run (issue 30, steps/cloud_reads.py): a full pass asks each
cloud answer once, and the reads that do not depend on one another go at once.

The counts come from the emulator's request log; the "at once" from a gate: every ARM read
of the run is held at the emulator until the test lets them go, and the test waits until all
of them are held together, which only reads sent without waiting on one another can be (a
read that waits on another's answer never arrives while that one is held). No test here
times anything: the depth figure on the WAN profile is make bench's (tests/bench_wan.py).
"""

import json
import subprocess
import sys
import time

import pytest

from aks_flex_node import paths
from tests import harness
from tests.emulator import constants as C
from tests.emulator import wan
from tests.harness import MACHINE_NAME, REPO
from tests.request_chains import chain_depth, describe, window
from tests.waiting import wait_for

ARC_MACHINE = f"/Microsoft.HybridCompute/machines/{MACHINE_NAME}"
POOL_MACHINE = f"/agentPools/{C.FLEX_POOL}/machines/{MACHINE_NAME}"
NODE = f"/api/v1/nodes/{MACHINE_NAME}"
# The converged Arc-mode run's ARM reads that need only the operator's token: the cluster,
# its user credential, the permissions at the cluster and at the Arc resource group, the Arc
# machine, and the role assignments of the principal the join recorded in the ledger.
INDEPENDENT_ARM_READS = 6
MACHINE_ID = "5f2b0c7e9a1d4e3f8b6a2c1d0e9f8a7b"
SLOW = 0.5  # seconds every service takes to answer in the depth test


def run_requests(emu, since):
    """A run's requests: not the test's admin calls, nor the kubelet stand-in's own (the bench
    counts the same: tests/bench_wan.py run_requests)."""
    return [r for r in window(emu.requests(), since)
            if r["server"] != "admin" and not (r.get("user_agent") or "").startswith("kubelet/")]


def converged(node):
    proc = node.cli("bootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    node.emu.admin("DELETE", "requests")


def gets(node, server, path_end):
    """The run's GETs of `path_end` (not the kubelet stand-in's own)."""
    return [r for r in node.emu.requests(server=server, method="GET") if r["path"].endswith(path_end)
            and not (r.get("user_agent") or "").startswith("kubelet/")]


def test_a_converged_run_reads_each_cloud_answer_once(node):
    """Preflight's arc-identity check and the arc phase take one read of the Arc machine;
    preflight's node-identity and cluster-api checks, rbac-propagation and node-ready one read
    of the Node, as the kubelet asks (with the token it holds: no HIMDS exchange)."""
    with open(node.path("/etc/machine-id"), "w") as f:  # node-identity compares it with the Node's
        f.write(MACHINE_ID + "\n")
    converged(node)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0 and not any(p["changes"] for p in summary["phases"]), proc.stderr
    assert len(gets(node, "arm", ARC_MACHINE)) == 1, describe(node.emu.requests())
    assert len(gets(node, "apiserver", NODE)) == 1, describe(node.emu.requests())
    assert len(gets(node, "arm", "/roleAssignments")) == 1
    assert len(node.emu.requests(server="entra", method="POST")) == 1
    # The API server answered that read: preflight's cluster-api check sends no probe of its own.
    assert not gets(node, "apiserver", "/readyz")
    # HIMDS: preflight's reachability probe alone, no token exchange.
    assert len(node.emu.requests(server="himds")) == 1, describe(node.emu.requests(server="himds"))


def test_the_independent_reads_of_a_converged_run_go_at_once(node):
    converged(node)
    before = node.emu.state()["fault_hits"]
    node.emu.faults([{"match": {"server": "arm"}, "hold": True}])
    proc = subprocess.Popen([sys.executable, "-m", "aks_flex_node", "bootstrap", "--root", node.root], env=node.env,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        held = wait_for(lambda: node.emu.state()["fault_hits"] - before >= INDEPENDENT_ARM_READS, 120)
        assert held, f"only {node.emu.state()['fault_hits'] - before} ARM read(s) in flight at once"
    finally:
        node.emu.clear_faults()
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err


def test_a_converged_re_run_waits_on_at_most_four_answers_in_a_row(node):
    """The depth of a converged re-run (tests/request_chains.py): Entra's sign-in, then every
    ARM read (the role assignments of the principal the ledger recorded among them) and the
    Node at once. The sign-in is the SDK's: Entra's discovery document and the token with MSAL as Debian 12 and
    13 and PyPI ship it (four in all), one more with Ubuntu 22.04's older MSAL, which asks
    for the instance discovery first; so the sign-in's own depth is counted as it is, and
    what is ours is the one after it. Every service answers SLOW s late here, so that
    requests sent together overlap however slowly this machine runs the threads that send
    them: a request that waits on another's answer comes after it whatever the load, one
    sent beside it does not unless the machine stalls a whole SLOW."""
    converged(node)
    node.emu.settings(**{setting: SLOW for setting in wan.RTT_SETTINGS.values()})
    since = time.time()
    proc = node.cli("bootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    requests = run_requests(node.emu, since)
    # The sign-in: Entra's requests but preflight's anonymous probes (GET / of Entra, GET /v2/
    # of the test's pause image registry, which the emulator files under entra too).
    sign_in, _ = chain_depth([r for r in requests if r["server"] == "entra" and r["path"].rstrip("/") not in ("", "/v2")])
    depth, path = chain_depth(requests)
    assert sign_in >= 2 and depth <= sign_in + 1, describe(path)


def test_a_recorded_principal_that_is_no_longer_the_machine_s_is_read_again(node):
    """The role assignments are read beside the machine, for the principal the last join
    recorded; when the machine's identity is another by now, the roles phase reads them again
    for the machine's own, and finds them in place."""
    converged(node)
    with open(node.path(paths.LEDGER)) as f:
        ledger = json.load(f)
    ledger["joined"]["facts"]["principal_id"] = "00000000-0000-4000-8000-00000000dead"
    with open(node.path(paths.LEDGER), "w") as f:
        json.dump(ledger, f)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0 and not any(p["changes"] for p in summary["phases"]), proc.stdout + proc.stderr
    reads = gets(node, "arm", "/roleAssignments")
    assert len(reads) == 2, describe(reads)
    stale = [r for r in reads if "00000000-0000-4000-8000-00000000dead" in r["query"]]
    assert len(stale) == 1 and stale[0] is reads[0], describe(reads)


def test_an_agent_pool_pass_reads_its_machine_once(pool_node):
    """pool_follow.observe reads the Machine for its decision; the run's machine phase takes
    that answer instead of reading it again."""
    node = pool_node
    node.emu.settings(rbac_propagation_delay=0)
    converged(node)
    proc = node.cli("agent", "--once")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(gets(node, "arm", POOL_MACHINE)) == 1, describe(node.emu.requests())


# What ARM answers (a fault rule's match), the phase that must fail, its error code and the
# exit code: as when each step read for itself (the same test passes on the code before the
# shared read). A 403 is not retried, a 404 neither: no test here waits out a backoff.
FAILED_READS = [
    ({"method": "GET", "path_regex": r"managedClusters/[^/]+$"}, 404, "cluster", "cluster_not_found", 1),
    ({"method": "GET", "path_regex": r"/roleAssignments$"}, 403, "roles", "forbidden", 4),
    ({"method": "GET", "path_regex": r"HybridCompute/machines/[^/]+$"}, 403, "arc", "forbidden", 4),
]


@pytest.mark.parametrize("match, status, phase, code, exit_code", FAILED_READS,
                         ids=[f[2] for f in FAILED_READS])
def test_a_read_that_fails_fails_the_phase_that_asks_for_it(node, match, status, phase, code, exit_code):
    converged(node)
    node.emu.faults([{"match": dict(match, server="arm"), "respond": {
        "status": status, "body": {"error": {"code": "Injected", "message": "injected by the test"}}}}])
    proc, summary = node.cli_json("bootstrap")
    node.emu.clear_faults()
    failed = [p["name"] for p in summary["phases"] if p["status"] == "failed"]
    assert (proc.returncode, failed, summary["error"]["error"]) == (exit_code, [phase], code), proc.stderr


@pytest.mark.parametrize("flag", ["--sequential", "--dry-run"])
def test_a_sequential_or_dry_run_on_a_converged_node_changes_nothing(node, flag):
    converged(node)
    proc, summary = node.cli_json("bootstrap", flag)
    assert proc.returncode == 0, proc.stderr
    assert not [p["name"] for p in summary["phases"] if p["changes"]]
    assert {p["status"] for p in summary["phases"]} <= {"unchanged", "skipped"}, summary["phases"]


def test_a_first_join_that_fails_preflight_reads_nothing_more_from_azure(node):
    """The shared read starts only on a node that has joined before: a first join, which the
    agent retries while it is pending, asks ARM nothing but preflight's own arc-identity read
    until preflight has passed (a fleet of pending nodes would otherwise spend ARM's read
    budget on every attempt)."""
    harness.write_config(node.root, node.emu, node.wrapper, extra={"azcmagent": "/opt/nowhere/azcmagent"})
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 3, proc.stdout + proc.stderr  # preflight: the Arc agent is not installed
    assert [p["status"] for p in summary["phases"] if p["name"] == "preflight"] == ["failed"]
    arm = node.emu.requests(server="arm")
    assert [r for r in arm if not r["path"].endswith(ARC_MACHINE)] == [], describe(arm)
    assert node.emu.requests(server="apiserver") == []
