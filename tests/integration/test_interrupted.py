"""Issue 9, defect 6: after kill -9 mid-run, status.json said "running" forever and
`status --wait` waited out its whole timeout although the run lock was free. A running
record whose run is gone reads as "interrupted": `status` shows it with what to do,
`status --wait` and the maintainer scripts' wait return at once with exit 1, and the next
run overwrites it."""

import json
import os
import signal
import subprocess
import sys
import time

from aks_flex_node import lifecycle
from aks_flex_node.host import Host
from tests.harness import REPO
from tests.waiting import pauses


def start_and_kill_at(node, command, hang):
    """Run `aks-flex-node <command>` until it waits on the stand-in named by `hang`
    (tests/fakes/fakelib.py), check what `status` says while it runs, then kill -9 it."""
    hang = os.path.join(node.state_dir, hang)
    open(hang, "w").close()  # the stand-in waits until it is removed
    proc = subprocess.Popen([sys.executable, "-m", "aks_flex_node", command, "--root", node.root],
                            env=node.env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(hang + ".waiting"):
            assert proc.poll() is None and time.monotonic() < deadline, f"{command} never got there"
            time.sleep(0.05)
        # Alive: it is running, and waiting for it waits.
        _proc, running = node.cli_json("status")
        assert running["state"] == "running", running
        waited = node.cli("status", "--wait", "--timeout", "1")
        assert waited.returncode == 75 and "no run completed within 1 s" in waited.stderr
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.remove(hang)
    return proc.pid, running


def test_a_killed_bootstrap_reads_as_interrupted(node, monkeypatch):
    pid, running = start_and_kill_at(node, "bootstrap", "hang-swapoff")  # the system phase
    recorded = json.loads(node.read("/var/lib/aks-flex-node/status.json"))
    assert recorded["state"] == "running", "the record stays as the killed run left it"

    # At once: waiting out this timeout would outlast node.cli's ceiling (300 s) and fail
    # there; exit 1 with the record, not 75 "no run completed", is the outcome it gives.
    waited = node.cli("status", "--wait", "--timeout", "3600")
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert "state: interrupted" in waited.stdout and "what to do:" in waited.stdout

    shown = node.cli("status")
    assert shown.returncode == 0, shown.stderr
    assert "state: interrupted (bootstrap)" in shown.stdout
    assert running.get("pid") == pid and f"pid {pid} ended" in shown.stdout
    assert "what to do: run `aks-flex-node bootstrap` again" in shown.stdout
    proc, status = node.cli_json("status")
    assert status["state"] == "interrupted" and status["exit_code"] == 1
    assert status["error"]["error"] == "interrupted" and "aks-flex-node-agent" in status["error"]["remedy"]

    # The maintainer scripts' glue waits through the same function: it returns on its first
    # look, without a single poll.
    polls = pauses(monkeypatch)
    status = lifecycle.wait_for_outcome(Host(node.root), 30)
    assert status["state"] == "interrupted" and polls == []

    # The next run overwrites it as usual.
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert node.cli_json("status")[1]["state"] == "succeeded"
    assert node.cli("status", "--wait", "--timeout", "30").returncode == 0


def test_a_killed_unbootstrap_reads_as_interrupted(node):
    node.cli("bootstrap", check=True)
    start_and_kill_at(node, "unbootstrap", "hang-systemctl-disable")
    proc, status = node.cli_json("status", "--wait", "--timeout", "30")
    assert proc.returncode == 1
    assert status["state"] == "interrupted" and status["operation"] == "unbootstrap"
    assert status["error"]["remedy"] == "run `aks-flex-node unbootstrap` again"
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stderr
    assert node.cli_json("status")[1]["state"] == "unjoined"
