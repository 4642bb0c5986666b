"""The emulator as a process: its one JSON line, files, SIGTERM, --resume,
--exit-with-parent, profiles, fixed ports, and no secret in its log."""

import json
import os
import pathlib
import random
import socket
import stat
import subprocess
import sys

import pytest

from tests.emulator import constants as C
from tests.emulator_fixtures import REPO_ROOT, EmulatorError, start_emulator
from tests.waiting import wait_for

KEYS = {"arm", "authority", "himds", "artifacts", "apiserver", "apiservers", "admin", "ca_bundle", "himds_key_dir",
        "state_dir", "pid"}


def _port_closed(url):
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


def test_json_line_files_and_clean_sigterm(tmp_path):
    emu = start_emulator(tmp_path)
    try:
        assert set(emu.endpoints) == KEYS and emu.pid == emu.process.pid
        assert emu.arm.startswith("https://127.0.0.1:") and emu.entra == emu.arm
        assert emu.himds.startswith("http://127.0.0.1:") and emu.himds.endswith("/metadata/identity/oauth2/token")
        assert emu.artifacts == f"{emu.arm}/artifacts" and emu.admin_url == f"{emu.arm}/_emulator"
        assert emu.apiservers[C.CLUSTER_ID] == emu.apiserver
        assert emu.ca_bundle == str(tmp_path / "ca.pem")
        for name, mode in (("ca-key.pem", 0o600), ("server-key.pem", 0o600), ("state.json", 0o600)):
            assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == mode, name
        assert stat.S_IMODE(os.stat(emu.himds_key_dir).st_mode) == 0o700
        status, _, _ = emu.arm_call("PUT", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}/providers/"
                                           "Microsoft.HybridCompute/machines/mirrored", "2024-07-10",
                                    {"location": C.LOCATION})
        assert status == 200
        mirrored = json.loads((tmp_path / "state.json").read_text())  # written before the answer
        assert any(m["name"] == "mirrored" for m in mirrored["machines"].values())
    finally:
        assert emu.stop() == 0
    assert _port_closed(emu.arm) and _port_closed(emu.himds) and _port_closed(emu.apiserver)


def test_restart_reuses_the_ca_and_resumes(tmp_path):
    first = start_emulator(tmp_path)
    ca, ca_key = (tmp_path / "ca.pem").read_bytes(), (tmp_path / "ca-key.pem").read_bytes()
    first.arm_call("PUT", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}/providers/"
                          "Microsoft.HybridCompute/machines/survivor", "2024-07-10", {"location": C.LOCATION})
    token = first.arm_token()
    assert first.stop() == 0

    # The CA is kept, not made again (which is also what makes a restart quick; how quick
    # is make bench's to judge, never a test's: a loaded machine makes it slower).
    second = start_emulator(tmp_path, extra_args=["--resume"])
    try:
        assert (tmp_path / "ca.pem").read_bytes() == ca
        assert (tmp_path / "ca-key.pem").read_bytes() == ca_key
        assert second.arm == first.arm and second.apiserver == first.apiserver  # same ports when free
        assert [m["name"] for m in second.state()["machines"]] == ["survivor"]
        status, _, _ = second.arm_call("GET", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}/providers/"
                                              "Microsoft.HybridCompute/machines/survivor", "2024-07-10", token=token)
        assert status == 200  # the token issued before the restart still works
    finally:
        second.stop()

    third = start_emulator(tmp_path)  # without --resume: a fresh world, same CA
    try:
        assert third.state()["machines"] == [] and (tmp_path / "ca.pem").read_bytes() == ca
    finally:
        third.stop()


def test_exits_when_its_parent_goes_away(tmp_path):
    parent = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-m', 'tests.emulator', '--state-dir', {str(tmp_path)!r},"
        " '--exit-with-parent'], stdout=subprocess.PIPE)\n"
        "print(p.stdout.readline().decode().strip(), flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", parent], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    pid = json.loads(out.stdout)["pid"]
    wait_for(lambda: not _running(pid), timeout=30, interval=0.05)
    assert not _running(pid), "the orphaned emulator is still running"


def _running(pid):
    """A process that is neither gone nor a zombie (one waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_profiles_change_the_world(tmp_path):
    emu = start_emulator(tmp_path, profile="no-azure-rbac")
    try:
        _, _, cluster = emu.arm_call("GET", C.CLUSTER_ID, "2026-08-01")
        assert cluster["properties"]["aadProfile"]["enableAzureRBAC"] is False
        assert emu.state()["profile"] == "no-azure-rbac"
    finally:
        emu.stop()
    with pytest.raises(EmulatorError) as err:
        start_emulator(tmp_path / "bad", profile="no-such-profile")
    assert "no-such-profile" in str(err.value)


def _free_port_block(size, taken=()):
    """A block of `size` loopback ports free now, below the kernel's ephemeral range (so no
    connection of a parallel test is given one of them between this look and the emulator's
    bind; bind(0) would pick from inside that range)."""
    low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = range(10000, low - size, size) if low - size > 10100 else range(1024, 65535 - size, size)
    for base in random.sample(candidates, 50):
        if base not in taken and all(_bindable(base + i) for i in range(size)):
            return base
    pytest.skip("no block of free loopback ports")


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_port_base_and_himds_port(tmp_path):
    # A port another process binds between the look and the emulator's bind is taken by
    # chance, not by the emulator: a new block is chosen (three tries).
    for attempt in range(3):
        base = _free_port_block(4)
        himds = _free_port_block(1, taken=range(base, base + 4))
        try:
            emu = start_emulator(tmp_path / f"try{attempt}",
                                 extra_args=["--port-base", str(base), "--himds-port", str(himds)])
            break
        except EmulatorError as err:
            if "Address already in use" not in str(err) or attempt == 2:
                raise
    try:
        assert emu.arm == f"https://127.0.0.1:{base}"
        assert emu.himds == f"http://127.0.0.1:{himds}/metadata/identity/oauth2/token"
        assert emu.apiservers[C.CLUSTER_ID] == f"https://127.0.0.1:{base + 2}"
        assert emu.apiservers[C.CLUSTER2_ID] == f"https://127.0.0.1:{base + 3}"
    finally:
        emu.stop()


def test_log_and_state_hold_no_secret_where_others_can_read(tmp_path):
    emu = start_emulator(tmp_path)
    try:
        token = emu.arm_token()
        emu.arm_call("PUT", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}/providers/"
                            "Microsoft.HybridCompute/machines/quiet", "2024-07-10", {"location": C.LOCATION}, token=token)
        emu.bind_himds(f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}/providers/"
                       "Microsoft.HybridCompute/machines/quiet")
        emu.http("GET", f"{emu.himds}?api-version=2020-06-01&resource={C.AKS_SERVER_APP_ID}",
                 headers={"Metadata": "true"})
        emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01", token=token)
        state_text = json.dumps(emu.state())
    finally:
        emu.stop()
    assert list((tmp_path / "himds-keys").iterdir()) == []  # the unanswered challenge's key is gone
    readable = [p for p in tmp_path.rglob("*") if p.is_file() and os.stat(p).st_mode & 0o044]
    assert {p.name for p in readable} >= {"ca.pem", "emulator.log"}
    for path in readable:
        text = path.read_text(errors="replace")
        for marker in C.SECRET_MARKERS:
            assert marker not in text, f"{marker} in {path.name}"
    for marker in C.SECRET_MARKERS:
        assert marker not in state_text  # the admin snapshot counts tokens, it does not list them
