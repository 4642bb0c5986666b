"""A joined node's kubelet moved to another version: cordon, drain, switch, restart, Ready,
uncordon; switched back when the new one does not come Ready; finished after a run was cut
short (steps/kubelet_upgrade.py, docs/upgrade.md).

The emulated cluster runs 1.30.4; the upgrades go to the patch release 1.30.5, which the
version-skew policy allows (it speaks of minor versions). The stand-in kubelet of each
version reports that version in status.nodeInfo.kubeletVersion; a version listed in
FAKE_KUBELET_FAIL_VERSIONS exits at start, as a kubelet that cannot run here would.
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from aks_flex_node import config
from aks_flex_node.commands import upgrade
from aks_flex_node.kube import drain
from aks_flex_node.host import Host
from tests import harness
from tests.harness import MACHINE_NAME
from tests.workload_fixtures import node_object, pods, workloads

LEDGER = "/var/lib/aks-flex-node/ledger.json"
KUBE_LIB = "/usr/local/lib/aks-flex-node/kubernetes"
CURRENT = KUBE_LIB + "/current"


def reconfigure(node, **values):
    harness.write_config(node.root, node.emu, node.wrapper, extra={k: str(v) for k, v in values.items()})


@pytest.fixture
def joined(node):
    node.emu.settings(rbac_propagation_delay=0)
    reconfigure(node, node_ready_timeout=15, upgrade_drain_timeout=30)
    node.cli("bootstrap", check=True)
    node.emu.admin("DELETE", "requests")
    return node


def client_of(node):
    cfg = config.load("/etc/aks-flex-node/aks-flex-node.conf", root=node.root)
    return upgrade.node_client(cfg, Host(node.root))


def link(node, path):
    return os.readlink(node.path(path))


def kubelet_version(node):
    return node_object(node.emu)["status"]["nodeInfo"]["kubeletVersion"]


def upgrade_record(node):
    entries = json.loads(node.read(LEDGER))["entries"]
    return next((e for e in entries if e["kind"] == "kubelet_upgrade"), None)


def writes(emu):
    """The node's writes to the API server, in order, but for the kubelet's status updates."""
    out = []
    for r in emu.requests(server="apiserver"):
        if r["method"] == "PATCH" and r["path"] == f"/api/v1/nodes/{MACHINE_NAME}":
            out.append("node-patch")
        elif r["method"] == "POST" and r["path"].endswith("/eviction"):
            out.append("eviction")
    return out


def test_a_first_join_installs_one_version_and_links_to_it(joined):
    assert link(joined, CURRENT) == "v1.30.4"
    for tool in ("kubelet", "kubectl", "kubeadm"):
        assert link(joined, f"/usr/local/bin/{tool}") == f"../lib/aks-flex-node/kubernetes/current/{tool}"
    assert sorted(os.listdir(joined.path(KUBE_LIB))) == ["current", "v1.30.4"]
    assert kubelet_version(joined) == "v1.30.4"


def test_upgrade_cordons_drains_switches_and_uncordons(joined):
    emu = joined.emu
    workloads(emu, blocked=False)
    proc = joined.cli("upgrade", "--to", "1.30.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"node {MACHINE_NAME} runs kubelet 1.30.5 (was 1.30.4)" in proc.stdout

    assert kubelet_version(joined) == "v1.30.5" and link(joined, CURRENT) == "v1.30.5"
    assert "unschedulable" not in node_object(emu)["spec"], "uncordoned at the end"
    assert not {"default/web-1", "default/api-1"} & pods(emu), "ReplicaSet pods were evicted"
    assert {"kube-system/agent-x1", "default/web-2"} <= pods(emu), "DaemonSet pods and other nodes' pods stay"
    seen = writes(emu)
    assert seen[0] == "node-patch" and seen.count("eviction") == 2 and seen[-1] == "node-patch", seen
    assert upgrade_record(joined) is None
    # The previous version stays until the next run, which prunes it; then nothing is left to do.
    assert sorted(os.listdir(joined.path(KUBE_LIB))) == ["current", "v1.30.4", "v1.30.5"]
    proc, summary = joined.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    changed = {p["name"] for p in summary["phases"] if p["status"] == "changed"}
    assert changed == {"kubernetes"}, summary["phases"]
    assert sorted(os.listdir(joined.path(KUBE_LIB))) == ["current", "v1.30.5"]
    proc, summary = joined.cli_json("bootstrap")
    assert not [p["name"] for p in summary["phases"] if p["status"] == "changed"]
    assert kubelet_version(joined) == "v1.30.5"


def flex_events(emu):
    """Our events regarding the node, as the API server stand-in holds them: in the order
    they were created (its store keeps that order)."""
    from tests.emulator import constants as C
    held = emu.state()["kube_objects"].get(C.CLUSTER_ID.lower(), {}).get("events", {}).values()
    return [e for e in held
            if e["involvedObject"].get("name") == MACHINE_NAME and e.get("reportingComponent") == "aks-flex-node"]


def test_an_upgrade_is_an_event_when_it_starts_and_when_it_ends(joined):
    proc = joined.cli("upgrade", "--to", "1.30.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = [(e["reason"], e["type"]) for e in flex_events(joined.emu) if e["action"] == "Upgrade"]
    assert seen == [("KubeletUpgradeStarted", "Normal"), ("KubeletUpgraded", "Normal")], seen
    started = next(e for e in flex_events(joined.emu) if e["reason"] == "KubeletUpgradeStarted")
    assert started["involvedObject"]["uid"] == node_object(joined.emu)["metadata"]["uid"]
    # Sent when the upgrade is recorded as begun: before the cordon.
    asked = [("event" if r["method"] == "POST" and r["path"].endswith("/events") else "cordon")
             for r in joined.emu.requests(server="apiserver")
             if (r["method"] == "POST" and r["path"].endswith("/events"))
             or (r["method"] == "PATCH" and r["path"] == f"/api/v1/nodes/{MACHINE_NAME}")]
    assert asked[:2] == ["event", "cordon"], asked


def test_a_kubelet_that_does_not_come_ready_is_switched_back(joined):
    emu = joined.emu
    joined.env["FAKE_KUBELET_FAIL_VERSIONS"] = "1.30.5"
    proc = joined.cli("upgrade", "--to", "1.30.5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the kubelet upgrade from 1.30.4 to 1.30.5 failed" in proc.stderr
    assert "switched back to 1.30.4" in proc.stderr and "is Ready again; uncordoned" in proc.stderr
    assert link(joined, CURRENT) == "v1.30.4" and kubelet_version(joined) == "v1.30.4"
    assert "unschedulable" not in node_object(emu)["spec"]
    record = upgrade_record(joined)
    assert record["phase"] == "failed" and record["to"] == "1.30.5" and "was not Ready" in record["why"]
    assert json.loads(joined.read(LEDGER))["owed"] == [], "the restarts were paid"
    assert [e["reason"] for e in flex_events(emu) if e["action"] == "Upgrade"] == \
        ["KubeletUpgradeStarted", "KubeletUpgradeRolledBack"]
    shown = joined.cli("status", check=True).stdout
    assert "kubelet: 1.30.4; the upgrade to 1.30.5 failed: kubelet 1.30.5 was not Ready" in shown, shown
    status = json.loads(joined.cli("status", "--json", check=True).stdout)
    assert status["kubelet"]["active"] == "1.30.4" and status["kubelet"]["upgrade"]["phase"] == "failed"


def test_a_failed_version_is_not_tried_again_by_bootstrap_but_by_upgrade(joined):
    joined.env["FAKE_KUBELET_FAIL_VERSIONS"] = "1.30.5"
    reconfigure(joined, node_ready_timeout=15, kubernetes_version="1.30.5")  # as dpkg-reconfigure writes it
    proc, summary = joined.cli_json("bootstrap")
    assert proc.returncode == 1 and summary["error"]["error"] == "upgrade-failed", summary["error"]
    proc, summary = joined.cli_json("bootstrap")
    assert proc.returncode == 0, summary.get("error")
    phase = {p["name"]: p for p in summary["phases"]}["kubelet-upgrade"]
    assert phase["status"] == "unchanged" and "`aks-flex-node upgrade` tries again" in json.dumps(phase)
    assert kubelet_version(joined) == "v1.30.4"

    del joined.env["FAKE_KUBELET_FAIL_VERSIONS"]  # the cause is fixed
    proc = joined.cli("upgrade")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert kubelet_version(joined) == "v1.30.5" and upgrade_record(joined) is None


def test_a_drain_that_cannot_finish_stops_the_upgrade_before_the_switch(joined):
    emu = joined.emu
    reconfigure(joined, node_ready_timeout=15, upgrade_drain_timeout=2)
    workloads(emu, blocked=True)
    proc = joined.cli("upgrade", "--to", "1.30.5")
    assert proc.returncode == 75, proc.stdout + proc.stderr
    assert "did not start" in proc.stderr and "default/web-1" in proc.stderr
    assert link(joined, CURRENT) == "v1.30.4" and kubelet_version(joined) == "v1.30.4"
    assert "unschedulable" not in node_object(emu)["spec"], "our cordon was lifted"
    assert upgrade_record(joined) is None


def test_a_cordon_someone_else_made_is_left_in_place(joined):
    drain.cordon(client_of(joined), MACHINE_NAME)
    proc = joined.cli("upgrade", "--to", "1.30.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert node_object(joined.emu)["spec"].get("unschedulable") is True


def test_a_run_cut_short_after_the_switch_was_recorded_is_finished(joined):
    """The state kill -9 leaves between recording phase "switch" and the rename: cordoned,
    drained, the new version installed beside the old, `current` still at the old one."""
    reconfigure(joined, node_ready_timeout=15, kubernetes_version="1.30.5")
    joined.cli("bootstrap", "--skip-phase", "kubelet-upgrade", check=True)  # installs 1.30.5 beside 1.30.4
    assert link(joined, CURRENT) == "v1.30.4"
    drain.cordon(client_of(joined), MACHINE_NAME)
    ledger = json.loads(joined.read(LEDGER))
    ledger["entries"].append({"step": "kubelet-upgrade", "kind": "kubelet_upgrade", "id": "kubelet",
                              "from": "1.30.4", "to": "1.30.5", "phase": "switch", "cordoned": True})
    ledger["owed"].append({"kind": "restart", "unit": "kubelet", "reason": "kubelet 1.30.5 is switched to"})
    with open(joined.path(LEDGER), "w") as f:
        json.dump(ledger, f)

    plan = {p["name"]: p for p in joined.cli_json("bootstrap", "--dry-run")[1]["phases"]}
    assert "finish the kubelet upgrade from 1.30.4 to 1.30.5" in json.dumps(plan["kubelet-upgrade"])
    proc = joined.cli("bootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert link(joined, CURRENT) == "v1.30.5" and kubelet_version(joined) == "v1.30.5"
    assert "unschedulable" not in node_object(joined.emu)["spec"]
    assert upgrade_record(joined) is None and json.loads(joined.read(LEDGER))["owed"] == []


def closed_window():
    """A one-hour daily window starting twelve hours from now: closed now."""
    start = datetime.datetime.now() + datetime.timedelta(hours=12)
    end = start + datetime.timedelta(hours=1)
    return f"{start:%H:%M}-{end:%H:%M}"


def test_the_agent_waits_for_the_upgrade_window_and_bootstrap_does_not(joined):
    reconfigure(joined, node_ready_timeout=15, kubernetes_version="1.30.5", upgrade_window=closed_window())
    proc = joined.cli("agent", "--once")
    assert kubelet_version(joined) == "v1.30.4", proc.stderr[-3000:]
    assert "waits for the upgrade window" in joined.read("/var/lib/aks-flex-node/status.json").decode()
    assert link(joined, CURRENT) == "v1.30.4"
    assert os.path.isdir(joined.path(f"{KUBE_LIB}/v1.30.5")), "installed beside, ready for the window"
    joined.cli("bootstrap", check=True)
    assert kubelet_version(joined) == "v1.30.5"


def test_unbootstrap_removes_every_version_and_link(joined):
    before_lib = os.path.exists(joined.path("/usr/local/lib/aks-flex-node"))
    joined.cli("upgrade", "--to", "1.30.5", check=True)
    proc = joined.cli("unbootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not os.path.lexists(joined.path("/usr/local/lib/aks-flex-node")) and not before_lib is None
    for tool in ("kubelet", "kubectl", "kubeadm"):
        assert not os.path.lexists(joined.path(f"/usr/local/bin/{tool}"))


def test_a_binary_changed_behind_our_back_is_found_though_its_size_and_mtime_are_kept(joined):
    """Converged runs read each binary's fingerprint (inode, size, mtime, ctime) instead of
    hashing it; a change that keeps size and mtime still moves the ctime, so the file is hashed
    and installed again."""
    kubelet = joined.path(f"{KUBE_LIB}/v1.30.4/kubelet")
    st = os.stat(kubelet)
    with open(kubelet, "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(b"X" if first != b"X" else b"Y")
    os.utime(kubelet, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(kubelet).st_size == st.st_size and os.stat(kubelet).st_mtime_ns == st.st_mtime_ns
    plan = {p["name"]: p for p in joined.cli_json("bootstrap", "--dry-run")[1]["phases"]}
    assert "install kubernetes 1.30.4" in json.dumps(plan["kubernetes"])
    fingerprints = [e for e in json.loads(joined.read(LEDGER))["entries"]
                    if e["kind"] == "file" and e["id"].startswith(f"{KUBE_LIB}/v1.30.4/")]
    assert len(fingerprints) == 3 and all(len(e["fingerprint"]) == 4 for e in fingerprints)


def test_following_the_cluster_the_agent_upgrades_after_the_control_plane(joined):
    """kubernetes_version empty: after `az aks upgrade --control-plane-only` to 1.31.2 (the
    emulator's admin stands in for it), the agent's next full pass moves the node there."""
    from tests.emulator import constants as C

    joined.emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": "1.31.2"})
    proc, plan = joined.cli_json("upgrade", "--dry-run")
    assert plan["needed"] is True and plan["target"] == "1.31.2" and plan["kubelet"] == "1.30.4", plan
    proc = joined.cli("agent", "--once")
    assert kubelet_version(joined) == "v1.31.2", proc.stderr[-3000:]
    assert link(joined, CURRENT) == "v1.31.2"
    assert "unschedulable" not in node_object(joined.emu)["spec"]


def bootstrap_killed_when(node, reached, timeout=60):
    """Start `bootstrap`, kill -9 it once `reached()` is true; the exit status."""
    proc = subprocess.Popen([sys.executable, "-m", "aks_flex_node", "bootstrap", "--root", node.root],
                            env=node.env, cwd=harness.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if reached():
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def phase_recorded(node, phase):
    def reached():
        try:
            record = upgrade_record(node)
        except (OSError, ValueError):
            return False
        return record is not None and record.get("phase") == phase
    return reached


@pytest.mark.parametrize("phase", ["drain", "switch"])
def test_kill_9_during_an_upgrade_is_finished_by_the_next_run(joined, phase):
    workloads(joined.emu, blocked=False)
    reconfigure(joined, node_ready_timeout=15, kubernetes_version="1.30.5")
    if phase == "drain":
        # Evictions held until the kill: a drain of two ready pods is otherwise over before the
        # poll that waits for its phase gets to kill (seen under load in CI with a 1 s delay).
        joined.emu.faults([{"match": {"server": "apiserver", "method": "POST", "path_regex": "/pods/[^/]+/eviction"},
                            "hold": True}])
    try:
        assert bootstrap_killed_when(joined, phase_recorded(joined, phase)) == -9
    finally:
        joined.emu.clear_faults()  # the killed run's eviction goes on; the next run's are not held
    assert upgrade_record(joined)["phase"] == phase, "killed inside the upgrade"
    proc = joined.cli("bootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert kubelet_version(joined) == "v1.30.5" and link(joined, CURRENT) == "v1.30.5"
    assert "unschedulable" not in node_object(joined.emu)["spec"], "the cordon of the killed run was lifted"
    assert upgrade_record(joined) is None and json.loads(joined.read(LEDGER))["owed"] == []
    assert not {"default/web-1", "default/api-1"} & pods(joined.emu)
