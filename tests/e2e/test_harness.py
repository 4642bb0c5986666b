"""The booted-container harness itself: boot, run, copy in, power off, nothing left."""

import os
import socket
import subprocess
import urllib.parse

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


def test_private_networks_run_side_by_side_and_reach_only_what_is_forwarded(base_root, emulator):
    """Two nodes with a network namespace each: both hold their own 127.0.0.1:40342 (as two
    machines' Arc agents would), reach the emulator through the forwarded port, expose
    their sshd to the host on a port of its own, and leave no namespace behind."""
    arm_port = urllib.parse.urlsplit(emulator.arm).port
    boxes = []

    def unmask_ssh(box):
        for unit in ("ssh.service", "ssh.socket"):
            box.path(f"/etc/systemd/system/{unit}").unlink()

    try:
        for i in range(2):
            box = ct.Container(base_root, ct.CACHE / "run" / f"netns-{os.getpid()}-{i}", hostname=f"netns-{i}",
                               private_network=True, forward_ports=[arm_port], before_boot=unmask_ssh)
            boxes.append(box)
            box.start()
        # Each holds its port until the test closes its stdin (no time bound to outlive).
        listen = ("import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',40342)); s.listen(); "
                  "print('bound', flush=True); sys.stdin.read()")
        holders = [subprocess.Popen(box.command(["python3", "-c", listen]), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
                   for box in boxes]
        assert [h.stdout.readline().strip() for h in holders] == ["bound", "bound"]
        assert not ct.port_in_use(40342), "a node's port showed on the host's loopback"
        reach = f"import socket; socket.create_connection(('127.0.0.1', {arm_port}), 5); print('ok')"
        for box in boxes:
            assert box.run(["python3", "-c", reach]).stdout.strip() == "ok"
            assert box.is_active("ssh") == "active"
            with socket.create_connection(("127.0.0.1", box.expose(22)), 10) as conn:
                conn.settimeout(10)
                assert conn.recv(64).startswith(b"SSH-2.0-OpenSSH")
        for h in holders:
            h.stdin.close()
            h.wait(timeout=60)
            h.stdout.close()
        names = [box.netns.path for box in boxes]
    finally:
        for box in boxes:
            box.destroy()
    assert not any(os.path.exists(path) for path in names)


def test_the_base_keeps_cloud_init_and_sshd_off(booted):
    # Installed for the fleet scenarios, off for every other node (container.BASE_HOOKS).
    assert booted.run(["test", "-x", "/usr/bin/cloud-init"], check=False).returncode == 0
    assert booted.is_active("cloud-init") != "active"
    assert booted.is_enabled("ssh") == "masked"


def test_a_reboot_keeps_the_disk_and_nothing_that_ran(booted):
    """What the release upgrade relies on: a reboot is a poweroff and a boot of the same
    overlay, so files on disk stay, and /run, the processes and the boot id do not."""
    booted.run("echo kept > /root/on-disk; echo gone > /run/in-memory")
    boot_id = booted.run(["cat", "/proc/sys/kernel/random/boot_id"]).stdout
    first_pids = set(booted.processes())
    before = booted.leader
    booted.reboot()
    assert booted.leader != before and not ct.pid_alive(before)
    assert booted.run(["cat", "/root/on-disk"]).stdout == "kept\n"
    assert booted.run(["test", "-e", "/run/in-memory"], check=False).returncode == 1
    assert booted.is_active("dbus") == "active"
    assert not first_pids & set(booted.processes())
    # A boot of its own to systemd and the journal (nspawn gives each boot a fresh boot id).
    assert booted.run(["cat", "/proc/sys/kernel/random/boot_id"]).stdout != boot_id


def test_the_archive_proxy_relays_to_debian_only():
    """The release upgrade's way to Debian's archive (tests/e2e/archive_proxy.py) refuses
    any other host, and CONNECT, without reaching out."""
    import http.client

    from tests.e2e.archive_proxy import ArchiveProxy

    proxy = ArchiveProxy(["http://deb.debian.org/debian"])
    try:
        for method, target in (("GET", "http://example.org/x"), ("GET", "https://deb.debian.org/debian/"),
                               ("CONNECT", "deb.debian.org:443")):
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
            conn.request(method, target)
            response = conn.getresponse()
            assert response.status == 403, (method, target)
            response.read()
            conn.close()
        assert proxy.requests == []
        assert proxy.refused == ["GET http://example.org/x", "GET https://deb.debian.org/debian/",
                                 "CONNECT deb.debian.org:443"]
    finally:
        proxy.stop()
