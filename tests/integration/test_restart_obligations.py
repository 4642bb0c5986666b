"""Restarts are obligations written down before the change that calls for them (issue 8,
defect 3): a dry run shows them, --phase and a failed or killed run cannot lose them, and a
change nothing reads (a mode) restarts nothing."""

import os
import signal
import subprocess
import sys
import time

from tests.harness import REPO

KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"


def kubelet_restarts(node):
    return [argv for argv in node.fake.calls("systemctl")
            if argv[1:2] in (["start"], ["restart"]) and "kubelet" in " ".join(argv[2:])]


def changes(summary):
    return {p["name"]: [c["what"] for c in p["changes"]] for p in summary["phases"] if p["changes"]}


def edit_kubelet_config(node):
    with open(node.path(KUBELET_CONFIG), "ab") as f:
        f.write(b"\n# an operator's edit\n")


def test_dry_run_shows_the_restart_a_changed_config_owes(node):
    node.cli("bootstrap", check=True)
    edit_kubelet_config(node)
    proc, summary = node.cli_json("bootstrap", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    planned = changes(summary)
    assert planned["kubelet"] == [f"write {KUBELET_CONFIG} (mode 0644)"]
    assert planned["services"] == ["restart kubelet"]
    [why] = [c["why"] for p in summary["phases"] if p["name"] == "services" for c in p["changes"]]
    assert KUBELET_CONFIG in why
    # A dry run writes nothing down: the ledger owes nothing afterwards.
    proc, summary = node.cli_json("bootstrap", "--dry-run")
    assert changes(summary)["services"] == ["restart kubelet"]
    assert b"# an operator's edit" in node.read(KUBELET_CONFIG)


def test_a_phase_run_leaves_the_restart_to_the_next_full_run(node):
    node.cli("bootstrap", check=True)
    restarts = len(kubelet_restarts(node))
    edit_kubelet_config(node)
    proc, summary = node.cli_json("bootstrap", "--phase", "kubelet")
    assert proc.returncode == 0, proc.stderr
    assert changes(summary) == {"kubelet": [f"write {KUBELET_CONFIG} (mode 0644)"]}
    assert summary["owed"] == [{"kind": "restart", "unit": "kubelet",
                                "reason": f"{KUBELET_CONFIG} changed"}]
    assert len(kubelet_restarts(node)) == restarts
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert changes(summary) == {"services": ["restart kubelet"]}
    assert len(kubelet_restarts(node)) == restarts + 1
    assert summary["owed"] == []
    # Paid once: a third run restarts nothing.
    proc, summary = node.cli_json("bootstrap")
    assert changes(summary) == {} and len(kubelet_restarts(node)) == restarts + 1


def test_a_failed_restart_is_still_owed_by_the_next_run(node):
    node.cli("bootstrap", check=True)
    restarts = len(kubelet_restarts(node))
    edit_kubelet_config(node)
    node.fake.fail("systemctl", "Job for kubelet.service failed", verb="restart")
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode != 0
    assert {p["name"]: p["status"] for p in summary["phases"]}["services"] == "failed"
    os.remove(os.path.join(node.state_dir, "fail-systemctl-restart"))
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert changes(summary) == {"services": ["restart kubelet"]}
    assert len(kubelet_restarts(node)) == restarts + 2  # the failed try, then the paid one


def test_kill_9_after_the_write_does_not_lose_the_restart(node):
    """A bootstrap killed while the services phase waits (a daemon-reload that hangs) has
    written the new configuration: the next run must still restart the kubelet."""
    node.cli("bootstrap", check=True)
    restarts = len(kubelet_restarts(node))
    with open(node.path("/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf"), "ab") as f:
        f.write(b"# drift\n")
    hang = os.path.join(node.state_dir, "hang-systemctl-daemon-reload")
    open(hang, "w").close()  # the stand-in waits until it is removed
    proc = subprocess.Popen([sys.executable, "-m", "aks_flex_node", "bootstrap", "--root", node.root],
                            env=node.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(hang + ".waiting"):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never reached the reload"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.remove(hang)
    assert b"# drift" not in node.read("/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf")
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert changes(summary) == {"services": ["reload systemd units", "restart kubelet"]}
    assert len(kubelet_restarts(node)) == restarts + 1


def test_a_mode_drift_restarts_nothing(node):
    node.cli("bootstrap", check=True)
    restarts = len(kubelet_restarts(node))
    kubeconfig = node.path("/var/lib/kubelet/kubeconfig")
    inode = os.stat(kubeconfig).st_ino
    os.chmod(kubeconfig, 0o644)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert changes(summary) == {"kubelet": ["write /var/lib/kubelet/kubeconfig (mode 0600)"]}
    assert node.mode("/var/lib/kubelet/kubeconfig") == 0o600
    assert os.stat(kubeconfig).st_ino == inode, "a mode drift is fixed by chmod, not a rewrite"
    assert len(kubelet_restarts(node)) == restarts
