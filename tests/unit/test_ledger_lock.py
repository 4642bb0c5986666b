"""The ledger (what we created), the run lock, and the status file."""

import os
import stat
import subprocess
import sys

import pytest

from aks_flex_node.engine.ledger import Ledger
from aks_flex_node.engine.lock import RunLock
from aks_flex_node.engine.status import StatusFile
from aks_flex_node.errors import FlexNodeError, LockHeldError
from aks_flex_node.host import Host
from aks_flex_node.paths import COMPLETE_MARKER, LEDGER as LEDGER_PATH, STATUS as STATUS_PATH


@pytest.fixture
def host(tmp_path):
    return Host(str(tmp_path))


def test_ledger_records_once_persists_and_is_private(host):
    ledger = Ledger(host)
    ledger.record("kubelet", "file", "/var/lib/kubelet/kubeconfig")
    ledger.record("kubelet", "file", "/var/lib/kubelet/kubeconfig")
    ledger.record("roles", "role_assignment", "/sub/x/roleAssignments/1")
    ledger.set_joined(cluster_resource_id="/c/1")
    path = host.path(LEDGER_PATH)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = Ledger(host)
    assert [e["id"] for e in again.entries()] == ["/var/lib/kubelet/kubeconfig", "/sub/x/roleAssignments/1"]
    assert again.entries(step="roles")[0]["kind"] == "role_assignment"
    assert again.joined == {"cluster_resource_id": "/c/1"}


def test_ledger_record_updates_extras_and_forget(host):
    ledger = Ledger(host)
    ledger.record("runc", "file", "/usr/local/bin/runc", sha256="a")
    ledger.record("runc", "file", "/usr/local/bin/runc", sha256="b")
    assert Ledger(host).get("file", "/usr/local/bin/runc")["sha256"] == "b"
    ledger.forget("file", "/usr/local/bin/runc")
    assert Ledger(host).entries() == []
    ledger.remove_file()
    assert not os.path.exists(host.path(LEDGER_PATH))


def test_lock_is_exclusive_and_names_the_holder(host, tmp_path):
    # A second process holds the lock; we must be refused with its pid.
    script = (
        "import sys,time; sys.path.insert(0, %r)\n"
        "from aks_flex_node.host import Host\n"
        "from aks_flex_node.engine.lock import RunLock\n"
        "with RunLock(Host(%r), 'bootstrap'):\n"
        "    print('held', flush=True); time.sleep(30)\n" % (os.getcwd(), str(tmp_path)))
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeldError) as err:
            with RunLock(host, "unbootstrap", wait=0.3):
                pass
        assert f"pid {holder.pid}" in err.value.message
        assert "bootstrap" in err.value.message
        assert err.value.exit_code == 75
    finally:
        holder.kill()
        holder.wait()
    with RunLock(host, "bootstrap"):  # released when the holder died
        pass


def test_status_file_and_marker(host):
    status = StatusFile(host)
    assert status.read() is None and not status.is_complete()
    status.begin()
    status.write({"state": "running"})
    assert status.read()["state"] == "running"
    assert stat.S_IMODE(os.stat(host.path(STATUS_PATH)).st_mode) == 0o644
    status.complete()
    assert status.is_complete()
    status.begin()
    assert not os.path.exists(host.path(COMPLETE_MARKER))


@pytest.mark.parametrize("content, why", [(b"[1, 2]\n", "a JSON list"), (b"{not json", "not JSON")])
def test_a_status_file_that_is_not_an_object_is_named(tmp_path, content, why):
    """Issue 9, defect 7: a status.json holding a list gave an internal AttributeError."""
    from aks_flex_node import cli

    host = Host(tmp_path)
    host.ensure_dir("/var/lib/aks-flex-node", 0o700)
    host.write_file(STATUS_PATH, content, 0o644)
    with pytest.raises(FlexNodeError) as err:
        StatusFile(host).read()
    assert STATUS_PATH in err.value.message and why in err.value.message
    assert cli.main(["status", "--root", str(tmp_path)]) == 1


def test_a_ledger_that_does_not_parse_is_named(tmp_path):
    host = Host(tmp_path)
    host.ensure_dir("/var/lib/aks-flex-node", 0o700)
    host.write_file(LEDGER_PATH, b"{truncated", 0o600)
    with pytest.raises(FlexNodeError) as err:
        Ledger(host)
    assert LEDGER_PATH in err.value.message and "mv" in err.value.remedy
