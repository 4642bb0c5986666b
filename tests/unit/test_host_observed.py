"""The drift probe's record and its look again (host/observed.py): each kind of observation a
pass makes, changed after it, makes the probe say what changed; untouched, it says nothing;
what it cannot look at again makes the pass not probe-able. Real files, real commands (a
stand-in `systemctl` script), a real socket: nothing is faked but the host under a root."""

import os
import socket

import pytest

from aks_flex_node import strictmodes
from aks_flex_node.host import Host, observed
from aks_flex_node.host.azcmagent import SHOW_KEYS, Azcmagent
from aks_flex_node.host.run import run_command


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "root"
    for d in ("etc/x", "proc/sys/net", "run/units"):
        (root / d).mkdir(parents=True)
    (root / "etc/x/managed.conf").write_bytes(b"wanted=1\n")
    (root / "proc/sys/net/ip_forward").write_bytes(b"1\n")
    (root / "proc/modules").write_bytes(b"overlay 151552 0 - Live 0x0\nbr_netfilter 32768 0 - Live 0x0\n")
    return Host(str(root))


def recorded(host, look):
    """What `look(host)` observed, as a finished pass's record."""
    with observed.recording(host.root) as recorder:
        look(host)
    return recorder.finish()


def read_managed(host):
    host.read_bytes("/etc/x/managed.conf")


def ask(argv, env, timeout):
    result = run_command(argv, env=env, timeout=timeout, ok_codes=range(256))
    return result.returncode, result.stdout


def test_an_untouched_record_is_the_same(host):
    seen = recorded(host, lambda h: (read_managed(h), h.kind("/etc/x/missing"), h.listdir("/etc/x"),
                                     h.read_bytes("/proc/sys/net/ip_forward")))
    assert seen["unprobeable"] is None
    assert observed.same(seen, ask) is None


def test_content_edited_with_its_size_and_mtime_put_back_differs_by_ctime(host):
    seen = recorded(host, read_managed)
    path = host.path("/etc/x/managed.conf")
    before = os.lstat(path)
    path.write_bytes(b"wanted=2\n")  # same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.lstat(path).st_size == before.st_size and os.lstat(path).st_mtime_ns == before.st_mtime_ns
    assert "ctime" in observed.same(seen, ask)


def test_a_mode_change_differs(host):
    seen = recorded(host, read_managed)
    os.chmod(host.path("/etc/x/managed.conf"), 0o600)
    assert "mode" in observed.same(seen, ask)


def test_an_owner_change_differs(host):
    if os.geteuid() != 0:
        pytest.skip("chown to another owner needs root")
    seen = recorded(host, read_managed)
    os.chown(host.path("/etc/x/managed.conf"), 4321, 4321)
    assert "owner" in observed.same(seen, ask)


def test_a_link_replaced_by_one_to_elsewhere_differs(host):
    (host.path("/etc/x/other.conf")).write_bytes(b"wanted=1\n")
    os.symlink("managed.conf", host.path("/etc/x/current"))
    seen = recorded(host, lambda h: h.read_link("/etc/x/current"))
    os.remove(host.path("/etc/x/current"))
    os.symlink("other.conf", host.path("/etc/x/current"))
    assert observed.same(seen, ask) is not None


def test_a_removed_file_and_an_appearing_one_differ(host):
    seen = recorded(host, lambda h: (read_managed(h), h.exists("/etc/x/new.conf")))
    (host.path("/etc/x/new.conf")).write_bytes(b"")
    assert "appeared" in observed.same(seen, ask)
    seen = recorded(host, read_managed)
    os.remove(host.path("/etc/x/managed.conf"))
    assert "gone" in observed.same(seen, ask)


def test_a_pseudo_file_is_judged_by_its_content_not_its_stat(host):
    seen = recorded(host, lambda h: h.read_bytes("/proc/sys/net/ip_forward"))
    os.utime(host.path("/proc/sys/net/ip_forward"))  # /proc's stat moves without a change
    assert observed.same(seen, ask) is None
    host.path("/proc/sys/net/ip_forward").write_bytes(b"0\n")
    assert "content" in observed.same(seen, ask)


def test_proc_modules_is_judged_by_the_names_alone(host):
    seen = recorded(host, lambda h: h.read_bytes("/proc/modules"))
    host.path("/proc/modules").write_bytes(b"overlay 151552 7 - Live 0x0\nbr_netfilter 32768 1 - Live 0x0\n")
    assert observed.same(seen, ask) is None  # use counts move with the node's load
    host.path("/proc/modules").write_bytes(b"overlay 151552 7 - Live 0x0\n")
    assert "content" in observed.same(seen, ask)


def test_a_directory_judged_by_its_mode_and_owner_is_watched_for_those_alone(host):
    seen = recorded(host, lambda h: strictmodes.directory_problems("k", "/etc/x", str(h.path("/etc/x")), str(h.root)))
    (host.path("/etc/x/unrelated")).write_bytes(b"")  # moves the directory's times, not its mode
    assert observed.same(seen, ask) is None
    os.chmod(host.path("/etc/x"), 0o777)
    assert "mode or owner" in observed.same(seen, ask)


def test_a_listing_differs_when_an_entry_comes(host):
    seen = recorded(host, lambda h: h.listdir("/run/units"))
    (host.path("/run/units/extra")).write_bytes(b"")
    assert observed.same(seen, ask) is not None


def test_what_the_pass_wrote_is_signed_after_its_write(host):
    seen = recorded(host, lambda h: (read_managed(h), h.write_file("/etc/x/state.json", b"{}", 0o644)))
    assert observed.same(seen, ask) is None  # its own write is not drift
    host.path("/etc/x/state.json").write_bytes(b"{ }")
    assert "state.json" in observed.same(seen, ask)


def shell_stand_in(tmp_path, name, body):
    """The path of an executable shell script `name` in tmp_path/bin that runs `body`."""
    script = tmp_path / "bin" / name
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def systemctl(tmp_path):
    """A stand-in `systemctl` that answers what its state file says, with its exit code."""
    state = tmp_path / "unit-state"
    state.write_text("0 active\n")
    return shell_stand_in(tmp_path, "systemctl", f"read code word < {state}\necho ActiveState=$word\nexit $code"), state


def show(host, script):
    run_command([script, "show", "--property=ActiveState", "kubelet.service"], env=dict(os.environ),
                ok_codes=(0, 3))


@pytest.mark.parametrize("after", ["0 inactive\n", "3 active\n"], ids=["output", "exit code"])
def test_a_commands_answer_differs_by_its_output_or_exit_code(host, systemctl, after):
    script, state = systemctl
    seen = recorded(host, lambda h: show(h, script))
    assert seen["unprobeable"] is None and len(seen["commands"]) == 1
    assert observed.same(seen, ask) is None
    state.write_text(after)
    assert "answers differently" in observed.same(seen, ask)


def test_a_command_that_may_change_something_is_not_probeable(host, systemctl):
    script, _state = systemctl
    seen = recorded(host, lambda h: run_command([script, "restart", "kubelet.service"], env=dict(os.environ)))
    assert seen["unprobeable"]
    assert observed.same(seen, ask) == "nothing to probe"


def test_a_network_request_is_not_probeable_unless_deferred(host):
    server = socket.create_server(("127.0.0.1", 0))
    try:
        def connect(_host):
            with socket.create_connection(server.getsockname(), timeout=5):
                pass

        seen = recorded(host, connect)
        assert seen["unprobeable"]
        assert observed.same(seen, ask) == "nothing to probe"

        def deferred(h):
            with observed.deferred("the API server"):
                connect(h)
            read_managed(h)

        seen = recorded(host, deferred)
        assert seen["unprobeable"] is None and seen["deferred"] == ["the API server"]
        assert observed.same(seen, ask) is None
    finally:
        server.close()


def test_nothing_is_noted_once_the_recording_is_over(host):
    with observed.recording(host.root) as recorder:
        pass
    read_managed(host)
    host.write_file("/etc/x/later", b"", 0o644)
    seen = recorder.finish()
    assert seen["files"] == {} and seen["unprobeable"] is None


def test_azcmagent_show_is_watched_at_the_keys_we_read_alone(host, tmp_path):
    """Its answer holds the agent's last heartbeat, which moves every few minutes."""
    answer = tmp_path / "shown.json"
    answer.write_text('{"status": "Connected", "resourceName": "n1", "lastHeartbeat": "10:00"}')
    script = shell_stand_in(tmp_path, "azcmagent", f"cat {answer}")
    seen = recorded(host, lambda h: Azcmagent(h, script).show())
    assert seen["unprobeable"] is None and seen["commands"][0]["keys"] == list(SHOW_KEYS)
    answer.write_text('{"status": "Connected", "resourceName": "n1", "lastHeartbeat": "10:05"}')
    assert observed.same(seen, ask) is None
    answer.write_text('{"status": "Disconnected", "resourceName": "n1", "lastHeartbeat": "10:05"}')
    assert "answers differently" in observed.same(seen, ask)
    answer.write_text("not JSON")
    assert "answers differently" in observed.same(seen, ask)
