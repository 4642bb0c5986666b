"""Cordon, drain and the upgrade checks against the emulated cluster, as the joined node.

The node joins with `aks-flex-node bootstrap`; drain.py then talks to the API server stand-in
with the node's own credential (upgrade.node_client: what unbootstrap and upgrade use), and
the workloads are put in through the emulator's admin API as the controllers would have left
them (tests/workload_fixtures.py; tests/emulator/kube_pods.py).
"""

import os
import threading

import pytest

from aks_flex_node import config
from aks_flex_node.commands import upgrade
from aks_flex_node.kube import drain
from aks_flex_node.host import Host
from tests.emulator import constants as C
from tests.harness import MACHINE_NAME
from tests.waiting import wait_for
from tests.workload_fixtures import OTHER_NODE, budget, node_object, pod, pods, put, workloads

STAYING = {"kube-system/agent-x1", f"kube-system/static-web-{MACHINE_NAME}", "default/web-2"}


@pytest.fixture
def joined(node):
    node.emu.settings(rbac_propagation_delay=0)
    node.cli("bootstrap", check=True)
    cfg = config.load("/etc/aks-flex-node/aks-flex-node.conf", root=node.root)
    node.client = upgrade.node_client(cfg, Host(node.root))
    node.emu.admin("DELETE", "requests")  # the join's own requests: the tests look at what follows
    return node


def test_cordon_and_uncordon_show_in_the_node(joined):
    client, emu = joined.client, joined.emu
    assert drain.cordon(client, MACHINE_NAME) is True
    assert node_object(emu)["spec"]["unschedulable"] is True
    assert drain.cordon(client, MACHINE_NAME) is False  # already cordoned: no second PATCH
    assert drain.uncordon(client, MACHINE_NAME) is True
    assert "unschedulable" not in node_object(emu)["spec"]
    assert drain.uncordon(client, MACHINE_NAME) is False
    patches = [r for r in emu.requests(server="apiserver", method="PATCH") if r["path"] == f"/api/v1/nodes/{MACHINE_NAME}"]
    assert [r["status"] for r in patches] == [200, 200]


def test_drain_evicts_replicaset_pods_and_leaves_daemonset_and_mirror_pods(joined):
    workloads(joined.emu, blocked=False)
    drain.cordon(joined.client, MACHINE_NAME)
    report = drain.drain(joined.client, MACHINE_NAME, timeout=10, retry_first=0.05)
    assert sorted(report.evicted) == ["default/api-1", "default/web-1"]
    assert {pod for pod, _ in report.kept} == {"kube-system/agent-x1", f"kube-system/static-web-{MACHINE_NAME}"}
    assert pods(joined.emu) == STAYING
    evictions = [r for r in joined.emu.requests(server="apiserver", method="POST") if r["path"].endswith("/eviction")]
    assert sorted(r["path"] for r in evictions) == ["/api/v1/namespaces/default/pods/api-1/eviction",
                                                    "/api/v1/namespaces/default/pods/web-1/eviction"]


def test_drain_waits_out_a_budget_that_frees(joined):
    emu = joined.emu
    workloads(emu, blocked=True)
    done = {}

    def run():
        done["report"] = drain.drain(joined.client, MACHINE_NAME, timeout=30, retry_first=0.1, retry_max=0.5)

    runner = threading.Thread(target=run)
    runner.start()
    refused = wait_for(lambda: [r for r in emu.requests(server="apiserver", method="POST")
                                if r["path"].endswith("/web-1/eviction") and r["status"] == 429], timeout=20)
    assert refused, "the budget never refused an eviction"
    assert "default/web-1" in pods(emu)
    put(emu, budget("web", {"app": "web"}, 1))  # the disruption controller frees one disruption
    runner.join(timeout=30)
    assert not runner.is_alive()
    assert "default/web-1" in done["report"].evicted
    assert pods(emu) == STAYING


def test_drain_that_never_frees_fails_naming_the_pod_and_the_budget_and_deletes_nothing(joined):
    workloads(joined.emu, blocked=True)
    with pytest.raises(drain.DrainError) as failed:
        drain.drain(joined.client, MACHINE_NAME, timeout=1, retry_first=0.1, retry_max=0.2)
    message = failed.value.message
    assert failed.value.exit_code == 75
    assert "default/web-1" in message and "The disruption budget web needs 1 healthy pods" in message
    assert "default/web-1" in pods(joined.emu)  # nothing forced
    assert not [r for r in joined.emu.requests(server="apiserver", method="DELETE") if "/pods/" in r["path"]]


def test_cordon_and_drain_as_unbootstrap_calls_it(joined):
    workloads(joined.emu, blocked=False)
    report = drain.cordon_and_drain(joined.client, MACHINE_NAME, timeout=10, retry_first=0.05)
    assert node_object(joined.emu)["spec"]["unschedulable"] is True
    assert sorted(report.evicted) == ["default/api-1", "default/web-1"] and pods(joined.emu) == STAYING
    assert drain.cordon_and_drain(joined.client, "no-such-node", timeout=1) is None


def test_drain_waits_for_a_terminating_pod(joined):
    emu = joined.emu
    put(emu, pod("old-1", owner=("ReplicaSet", "old-1a"), deletionTimestamp="2026-01-01T00:00:00Z"))
    threading.Timer(0.5, lambda: emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": pod(
        "old-1", node=OTHER_NODE, owner=("ReplicaSet", "old-1a"))})).start()  # "gone" from this node
    report = drain.drain(joined.client, MACHINE_NAME, timeout=10, retry_first=0.1, retry_max=0.2)
    assert report.waited == ["default/old-1"] and report.evicted == []
    assert not [r for r in emu.requests(server="apiserver", method="POST") if r["path"].endswith("/eviction")]


def test_drain_refuses_pods_without_a_controller_before_evicting_anything(joined):
    workloads(joined.emu, blocked=False)
    put(joined.emu, pod("bare"))
    with pytest.raises(drain.UnmanagedPods) as refused:
        drain.drain(joined.client, MACHINE_NAME, timeout=5)
    assert "default/bare" in refused.value.message
    assert "default/web-1" in pods(joined.emu)
    assert not [r for r in joined.emu.requests(server="apiserver", method="POST") if r["path"].endswith("/eviction")]


# -- upgrade ----------------------------------------------------------------------------------

def changes(emu):
    """What was written to the API server, but for the kubelet stand-in's own status updates."""
    return [(r["method"], r["path"]) for r in emu.requests(server="apiserver")
            if r["method"] != "GET" and not r["path"].endswith("/status")]


def test_upgrade_dry_run_prints_the_plan_and_changes_nothing(joined):
    workloads(joined.emu, blocked=False)
    before = pods(joined.emu)
    proc = joined.cli("upgrade", "--dry-run", "--to", "1.30.5", check=True)
    assert f"would upgrade node {MACHINE_NAME} from kubelet 1.30.4 to 1.30.5 (kube-apiserver 1.30.4" in proc.stdout
    for word in ("cordon", "drain", "PodDisruptionBudgets", "side by side", "atomic", "restart the kubelet",
                 "Ready and reports kubelet v1.30.5", "uncordon", "switch back to 1.30.4"):
        assert word in proc.stdout, word
    assert changes(joined.emu) == [] and pods(joined.emu) == before
    assert "unschedulable" not in node_object(joined.emu)["spec"]
    proc, plan = joined.cli_json("upgrade", "--dry-run")
    assert proc.returncode == 0 and plan["needed"] is False and plan["target"] == "1.30.4"
    assert plan["kubelet_from"] == f"node {MACHINE_NAME} status.nodeInfo.kubeletVersion"


@pytest.mark.parametrize("to, rule", [
    ("1.31.0", "forbids a kubelet newer than kube-apiserver"),
    ("1.26.9", "allows at most 3"),
])
def test_upgrade_refuses_a_skew_violation_naming_both_versions(joined, to, rule):
    proc = joined.cli("upgrade", "--dry-run", "--to", to)
    assert proc.returncode == 3, proc.stderr
    assert f"kubelet {to}" in proc.stderr and "kube-apiserver 1.30.4" in proc.stderr and rule in proc.stderr
    assert changes(joined.emu) == []


# -- unbootstrap drains before it deletes the Node ----------------------------------------

def test_unbootstrap_cordons_and_drains_before_deleting_the_node(joined):
    emu = joined.emu
    workloads(emu, blocked=False)
    proc, summary = joined.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stderr
    assert pods(emu) >= STAYING and {"default/web-1", "default/api-1"}.isdisjoint(pods(emu))
    assert MACHINE_NAME not in {n["metadata"]["name"] for n in emu.state()["nodes"][C.CLUSTER_NAME]}
    # In that order: the cordon (a PATCH), the evictions, then the DELETE of the Node.
    calls = [(r["method"], r["path"]) for r in emu.requests(server="apiserver")
             if r["method"] in ("PATCH", "POST", "DELETE")]
    cordon = calls.index(("PATCH", f"/api/v1/nodes/{MACHINE_NAME}"))
    evictions = [i for i, c in enumerate(calls) if c[1].endswith("/eviction")]
    delete = calls.index(("DELETE", f"/api/v1/nodes/{MACHINE_NAME}"))
    assert cordon < min(evictions) and max(evictions) < delete and len(evictions) == 2


def test_a_drain_that_cannot_finish_keeps_the_node_and_says_why(joined):
    emu = joined.emu
    workloads(emu, blocked=True)
    proc, summary = joined.cli_json("unbootstrap", "--drain-timeout", "1")
    assert proc.returncode == 1, proc.stderr
    assert MACHINE_NAME in {n["metadata"]["name"] for n in emu.state()["nodes"][C.CLUSTER_NAME]}
    assert "default/web-1" in pods(emu)  # never deleted by force
    [left] = [item for item in summary["leftovers"] if MACHINE_NAME in item]
    assert "default/web-1" in left and "disruption budget web" in left
    # The rest of the host was still cleaned: the drain is the Node's leftover only.
    assert not os.path.exists(joined.path("/var/lib/kubelet"))


def test_skip_drain_deletes_the_node_with_its_pods(joined):
    emu = joined.emu
    workloads(emu, blocked=True)
    proc, _summary = joined.cli_json("unbootstrap", "--skip-drain")
    assert proc.returncode == 0, proc.stderr
    assert MACHINE_NAME not in {n["metadata"]["name"] for n in emu.state()["nodes"][C.CLUSTER_NAME]}
    assert not [r for r in emu.requests(server="apiserver") if r["path"].endswith("/eviction")]
