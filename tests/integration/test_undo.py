"""Unbootstrap removes only what the ledger says we created (issue 8): what an operator put
in our directories stays, a dry run lists what would go and why, a pod volume still mounted
is never deleted through, and the undo phases are reported like bootstrap's."""

import contextlib
import json
import os
import subprocess

import pytest

from tests.emulator_fixtures import FAKES_BIN

KUBELET_VOLUME = "/var/lib/kubelet/pods/p1/volumes/kubernetes.io~empty-dir/data dir"


def test_dry_run_lists_what_would_go_and_changes_nothing(node):
    node.cli("bootstrap", check=True)
    before = {p: node.mode(p) for p in node.files()}
    proc, summary = node.cli_json("unbootstrap", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert summary["dry_run"] is True
    plans = {p["name"]: p["changes"] for p in summary["phases"]}
    assert list(plans)[:2] == ["node-ready", "services"], list(plans)
    assert list(plans)[-1] == "directories"
    whats = [c["what"] for cs in plans.values() for c in cs]
    assert "remove /usr/local/bin/kubelet" in whats
    assert "restore /etc/fstab" in whats
    assert "remove /var/lib/kubelet and its content" in whats
    assert any(w.startswith("delete role assignment ") for w in whats)
    assert all(c["why"] for cs in plans.values() for c in cs)
    assert {p: node.mode(p) for p in node.files()} == before
    assert node.emu.state()["machines"], "a dry run asks Azure to delete nothing"
    text = node.cli("unbootstrap", "--dry-run").stdout
    assert "would remove (dry run, nothing was changed)" in text and "remove /usr/local/bin/kubelet" in text


def test_what_an_operator_added_to_our_directories_stays(node):
    node.cli("bootstrap", check=True)
    notes = node.path("/etc/kubernetes/operator-notes.txt")
    with open(notes, "w") as f:
        f.write("keep me\n")
    cached = node.path("/var/cache/aks-flex-node/my-own.iso")
    with open(cached, "w") as f:
        f.write("mine\n")
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert open(notes).read() == "keep me\n"
    assert open(cached).read() == "mine\n"
    assert os.listdir(node.path("/var/cache/aks-flex-node")) == ["my-own.iso"], "our downloads went"
    assert os.listdir(node.path("/etc/kubernetes")) == ["operator-notes.txt"]
    kept = " ".join(summary["kept"])
    assert "/etc/kubernetes" in kept and "operator-notes.txt" in kept
    assert "/var/cache/aks-flex-node" in kept
    assert summary["leftovers"] == [] and summary["state"] == "unjoined"


def test_status_reports_the_undo_phases(node):
    node.cli("bootstrap", check=True)
    node.cli("unbootstrap", check=True)
    status = json.loads(node.read("/var/lib/aks-flex-node/status.json"))
    assert status["operation"] == "unbootstrap" and status["state"] == "unjoined"
    phases = {p["name"]: p for p in status["phases"]}
    assert phases["kubelet"]["status"] == "removed"
    assert any(c["what"] == "remove /var/lib/kubelet and its content" for c in phases["kubelet"]["changes"])
    assert all("duration_s" in p for p in status["phases"])


def _mount_tmpfs(path):
    os.makedirs(path, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", path], capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here (the tests run as root on a full system)")
    with open(os.path.join(path, "volume-data"), "w") as f:
        f.write("a pod's data\n")


def _umount_all(path):
    while subprocess.run(["mountpoint", "-q", path]).returncode == 0:
        subprocess.run(["umount", "-l", path], check=False)


@pytest.fixture
def failing_umount(node, tmp_path):
    """The stand-ins, plus an umount that fails as a busy mount does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for fake in FAKES_BIN.iterdir():  # links: the stand-ins find fakelib through realpath
        (bin_dir / fake.name).symlink_to(fake)
    script = bin_dir / "umount"
    script.write_text("#!/bin/sh\necho \"umount: $1: target is busy.\" >&2\nexit 32\n")
    script.chmod(0o755)
    node.env = dict(node.env, AKS_FLEX_NODE_HOST_BIN=str(bin_dir),
                    PATH=f"{bin_dir}:{node.env['PATH']}")
    return node


@contextlib.contextmanager
def joined_with_a_mounted_volume(node):
    """A joined node whose kubelet directory holds a mounted pod volume (a tmpfs whose mount
    point's name has a space: mountinfo writes it as \\040); unmounted afterwards whatever
    the test did."""
    node.cli("bootstrap", check=True)
    volume = node.path(KUBELET_VOLUME)
    _mount_tmpfs(volume)
    try:
        yield volume
    finally:
        if os.path.exists(volume):
            _umount_all(volume)


def test_a_volume_that_stays_mounted_is_never_deleted_through(failing_umount):
    node = failing_umount
    with joined_with_a_mounted_volume(node) as volume:
        proc, summary = node.cli_json("unbootstrap")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert open(os.path.join(volume, "volume-data")).read() == "a pod's data\n"
        leftovers = " ".join(summary["leftovers"])
        assert "/var/lib/kubelet" in leftovers and "mounted" in leftovers, leftovers
        assert os.path.isdir(node.path("/var/lib/kubelet"))
        # Everything else went all the same.
        assert not os.path.exists(node.path("/usr/local/bin/kubelet"))
    # Once the mount is gone, a second unbootstrap finishes the job.
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not os.path.exists(node.path("/var/lib/kubelet"))


def test_mounted_volumes_are_unmounted_then_removed(node):
    with joined_with_a_mounted_volume(node) as volume:
        proc, summary = node.cli_json("unbootstrap")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert subprocess.run(["mountpoint", "-q", volume]).returncode != 0
        assert not os.path.exists(node.path("/var/lib/kubelet"))
