"""Issue 9, defect 6: a run killed mid-way leaves "running" in status.json; once no process
holds the run lock, readers see "interrupted" and `status --wait` returns at once."""

import os
import signal
import subprocess
import sys
import threading

import pytest

from aks_flex_node import cli, lifecycle
from aks_flex_node.engine import lock, status as st
from aks_flex_node.errors import TemporaryError
from aks_flex_node.host import Host
from tests.waiting import pauses

HOLD = (
    "import sys; sys.path.insert(0, {repo!r})\n"
    "from aks_flex_node.host import Host\n"
    "from aks_flex_node.engine.lock import RunLock\n"
    "with RunLock(Host({root!r}), 'bootstrap'):\n"
    "    print('held', flush=True); sys.stdin.read()\n")  # until killed, or its stdin closed


@pytest.fixture
def host(tmp_path):
    return Host(str(tmp_path))


def write_running(host, **extra):
    status_file = st.StatusFile(host)
    status_file.write(dict({"state": st.RUNNING, "operation": "bootstrap", "pid": 4242,
                            "started": "2024-05-01T10:00:00Z", "phases": []}, **extra))
    status_file.begin()


def hold_lock(host):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(repo=os.getcwd(), root=str(host.root))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_running_record_whose_holder_was_killed_reads_as_interrupted(host):
    holder = hold_lock(host)
    try:
        write_running(host)
        assert st.StatusFile(host).current()["state"] == st.RUNNING  # its run is alive
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    status = st.StatusFile(host).current()
    assert status["state"] == st.INTERRUPTED and status["exit_code"] == 1
    assert status["error"]["error"] == "interrupted"
    assert "pid 4242" in status["error"]["message"] and "2024-05-01T10:00:00Z" in status["error"]["message"]
    assert "run `aks-flex-node bootstrap` again" in status["error"]["remedy"]
    assert "aks-flex-node-agent" in status["error"]["remedy"]
    # Derived on read, never written: the next run overwrites the record as usual.
    assert st.StatusFile(host).read()["state"] == st.RUNNING


def test_an_interrupted_unbootstrap_says_to_run_unbootstrap(host):
    write_running(host, operation="unbootstrap")
    error = st.StatusFile(host).current()["error"]
    assert error["remedy"] == "run `aks-flex-node unbootstrap` again"


def test_other_states_are_read_as_written(host):
    st.StatusFile(host).write({"state": st.FAILED, "exit_code": 1})
    assert st.StatusFile(host).current()["state"] == st.FAILED
    assert st.StatusFile(Host(str(host.root) + "/nothing")).current() is None


def test_wait_returns_an_interrupted_run_at_once(host, monkeypatch):
    # At once: on its first look, without a single poll (a wait that went on polling would
    # end, after its timeout, in "no run completed", or with polls recorded).
    write_running(host)
    polls = pauses(monkeypatch)
    status = lifecycle.wait_for_outcome(host, 30, poll=0.05)
    assert polls == []
    assert status["state"] == st.INTERRUPTED and status["exit_code"] == 1


def test_wait_keeps_waiting_while_the_run_is_alive(host):
    """"running" with a marker left by the run before (a run writes "running" before it
    drops the marker) is not an outcome, and a live holder is not interrupted."""
    st.StatusFile(host).complete()
    holder = hold_lock(host)
    try:
        write_running(host)
        st.StatusFile(host).complete()
        with pytest.raises(TemporaryError, match="no run completed within 0 s"):
            lifecycle.wait_for_outcome(host, 0.3, poll=0.05)
    finally:
        holder.kill()
        holder.wait()


def test_the_cli_shows_it_and_wait_exits_1(host, capsys):
    write_running(host)
    assert cli.main(["status", "--root", str(host.root)]) == 0
    out = capsys.readouterr().out
    assert "state: interrupted (bootstrap)" in out
    assert "what to do: run `aks-flex-node bootstrap` again" in out
    assert cli.main(["status", "--wait", "--timeout", "30", "--root", str(host.root)]) == 1


def test_a_probe_does_not_refuse_a_run_starting_meanwhile(host):
    """status probes the lock by taking it for an instant: a run that does not wait
    (the agent's passes, a plain `bootstrap`) must still get it."""
    write_running(host)
    probing, release = threading.Event(), threading.Event()

    def probe():
        with lock.probe(host) as free:
            assert free is True
            probing.set()
            release.wait(5)

    thread = threading.Thread(target=probe)
    thread.start()
    probing.wait(5)
    threading.Timer(0.2, release.set).start()
    try:
        with lock.RunLock(host, "bootstrap", wait=0.0):
            with lock.probe(host) as free:
                assert free is False
    finally:
        release.set()
        thread.join()
