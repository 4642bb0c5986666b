"""The booted-container harness itself: boot, run, copy in, power off, nothing left."""

import os

import pytest

from tests.e2e import container as ct

pytestmark = pytest.mark.e2e


def test_boots_runs_commands_and_leaves_nothing_behind(base_root, tmp_path):
    run_dir = ct.CACHE / "run" / f"smoke-{os.getpid()}"
    box = ct.Container(base_root, run_dir)
    try:
        box.start()
        # systemd is PID 1 of its own namespace and brought the system up, dbus included.
        assert box.run(["cat", "/proc/1/comm"]).stdout.strip() == "systemd"
        assert box.is_active("dbus") == "active"
        assert box.run(["hostname"]).stdout.strip() == "e2e-node"
        # cgroup v2 inside (the node's preflight needs it), and /proc/sys writable.
        assert box.run(["test", "-f", "/sys/fs/cgroup/cgroup.controllers"], check=False).returncode == 0
        assert box.run(["test", "-w", "/proc/sys/net/ipv4/ip_forward"], check=False).returncode == 0
        # Files go in through the overlay and are seen inside with their mode.
        source = tmp_path / "hello"
        source.write_text("hi\n")
        box.copy_in(source, "/root/hello", 0o600)
        assert box.run(["stat", "-c", "%a %U", "/root/hello"]).stdout.split() == ["600", "root"]
        # The container never writes to the cached base tree.
        assert not (base_root / "root/hello").exists()
        pids = box.processes()
        leader, nspawn = box.leader, box.process.pid
        assert leader in pids and len(pids) > 2
    finally:
        box.destroy()
    assert box.process.returncode is not None
    assert not any(ct.pid_alive(p) for p in pids + [nspawn]), "a process of the container outlived it"
    assert ct.mounts_under(run_dir) == []
    assert not run_dir.exists()


def test_a_failing_command_says_what_failed(booted):
    with pytest.raises(ct.E2EError) as raised:
        booted.run(["sh", "-c", "echo oops >&2; exit 3"])
    assert "exited 3" in str(raised.value) and "oops" in str(raised.value)
