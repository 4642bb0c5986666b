"""The ledger (what we created), the run lock, and the status file."""

import os
import stat
import subprocess
import sys

import pytest

from aks_flex_node import lifecycle
from aks_flex_node.engine.ledger import Ledger
from aks_flex_node.engine.lock import RunLock, StateWriteError
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


def test_ledger_replace_drops_fields_not_given_and_keeps_the_undo_order(host):
    ledger = Ledger(host)
    ledger.record("kubernetes", "file", "/usr/local/bin/kubelet", artifact_url="u", sha256="a", backup="/b")
    ledger.record("kubernetes", "file", "/usr/local/bin/kubectl")
    ledger.replace("kubernetes", "file", "/usr/local/bin/kubelet", link="../lib/k/current/kubelet", backup="/b")
    entries = Ledger(host).entries()
    assert [e["id"] for e in entries] == ["/usr/local/bin/kubelet", "/usr/local/bin/kubectl"]
    assert entries[0] == {"step": "kubernetes", "kind": "file", "id": "/usr/local/bin/kubelet",
                          "link": "../lib/k/current/kubelet", "backup": "/b"}
    ledger.replace("kubelet-upgrade", "kubelet_upgrade", "kubelet", phase="drain", cordoned=True)
    assert Ledger(host).get("kubelet_upgrade", "kubelet")["cordoned"] is True


def test_lock_is_exclusive_and_names_the_holder(host, tmp_path):
    # A second process holds the lock; we must be refused with its pid.
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "from aks_flex_node.host import Host\n"
        "from aks_flex_node.engine.lock import RunLock\n"
        "with RunLock(Host(%r), 'bootstrap'):\n"
        "    print('held', flush=True); sys.stdin.read()\n" % (os.getcwd(), str(tmp_path)))
    # It holds the lock until it dies (no time bound: a slow test still meets it holding).
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
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
        holder.stdin.close()
        holder.stdout.close()
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


# ---- writes of the run's own state on a full or read-only disk ------------------------


@pytest.fixture
def state_mount(tmp_path):
    """mount(options): a small tmpfs at <root>/var/lib/aks-flex-node (0700, as runs make
    it); "full" fills it to the last byte. Unmounted at the end."""
    state = tmp_path / "var/lib/aks-flex-node"
    state.mkdir(parents=True)
    mounted = []

    def mount(options, full=False):
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64k,mode=0700,{options}", "tmpfs",
                               str(state)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.decode().strip()}")
        mounted.append(state)
        if full:
            with open(state / "filler", "wb") as f:
                try:
                    f.write(b"x" * (1 << 20))
                    f.flush()
                except OSError:
                    pass
        return state

    yield mount
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_a_full_disk_stops_the_lock_with_the_file_named(host, state_mount):
    # Fault matrix, "ENOSPC: /var/lib full": an unguarded pwrite ended in "internal error:
    # OSError: [Errno 28]" naming no file.
    state = state_mount("rw", full=True)
    with pytest.raises(StateWriteError) as caught:
        with RunLock(host, "bootstrap"):
            pass
    err = caught.value
    assert err.exit_code == 1
    assert err.message == f"cannot write {state}/lock: No space left on device"
    assert err.remedy.startswith(f"free space on the file system holding {state}")
    # Nothing holds the lock afterwards: a run can take it once there is room.
    os.remove(state / "filler")
    with RunLock(host, "bootstrap"):
        pass


@pytest.mark.parametrize("write", ["ledger", "status", "complete"])
def test_a_full_disk_names_the_state_file_and_what_to_do(host, state_mount, write):
    # (The pending mark is empty: it still fits on a full disk.)
    state = state_mount("rw", full=True)
    name = {"ledger": "ledger.json", "status": "status.json", "complete": "provision.complete"}[write]
    with pytest.raises(StateWriteError) as caught:
        if write == "ledger":
            Ledger(host).record("kubelet", "file", "/etc/x")
        elif write == "status":
            StatusFile(host).write({"state": "running"})
        else:
            StatusFile(host).complete()
    assert f"cannot write {state}/{name}: No space left on device" in caught.value.message
    assert caught.value.remedy.startswith(f"free space on the file system holding {state}")
    assert sorted(os.listdir(state)) == ["filler"]  # no half-written file, no temp file


@pytest.mark.parametrize("write", ["lock", "ledger", "status", "pending"])
def test_a_read_only_state_dir_is_named_with_what_to_do(host, state_mount, write):
    # On a read-only file system the temp file of an atomic write cannot even be created:
    # that OSError came out raw ("internal error") for the ledger, status.json and the mark.
    state = state_mount("ro")
    with pytest.raises(StateWriteError) as caught:
        if write == "lock":
            RunLock(host, "bootstrap").__enter__()
        elif write == "ledger":
            Ledger(host).set_joined(cluster_resource_id="/c/1")
        elif write == "status":
            StatusFile(host).write({"state": "running"})
        else:
            lifecycle.mark_pending(host)
    assert str(state) in caught.value.message and "Read-only file system" in caught.value.message
    assert "remount it read-write" in caught.value.remedy
