"""Hostile local file types through the CLI (issue 26, defects 4 and 5): a bootstrap meets a
FIFO, a link to /dev/zero and an operator's symlinks at paths it manages; it is never
blocked, converges, and unbootstrap puts every original back as it was."""

import os
import stat
import subprocess

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
KUBECTL = "/usr/local/bin/kubectl"
FSTAB = "/etc/fstab"
# A liveness bound, not a duration: a bootstrap blocked on a FIFO for ever is stopped here
# and reported as such, instead of hanging the suite.
LIVENESS_S = 600


def _bootstrap(node):
    try:
        return node.cli("bootstrap", timeout=LIVENESS_S)
    except subprocess.TimeoutExpired:
        raise AssertionError("bootstrap was still running at the liveness bound: blocked on a FIFO?") from None


def test_a_fifo_and_the_operators_links_are_replaced_then_put_back(node, tmp_path):
    mytools = tmp_path / "opt-mytools-kubectl"
    mytools.write_bytes(b"#!/bin/sh\necho the operator's kubectl\n")
    os.makedirs(os.path.dirname(node.path(KUBECTL)), exist_ok=True)
    os.symlink(str(mytools), node.path(KUBECTL))
    os.makedirs(os.path.dirname(node.path(CONTAINERD_CONFIG)), exist_ok=True)
    os.mkfifo(node.path(CONTAINERD_CONFIG), 0o640)

    proc = _bootstrap(node)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stat.S_ISREG(os.lstat(node.path(CONTAINERD_CONFIG)).st_mode)
    assert os.readlink(node.path(KUBECTL)).startswith("../lib/"), "ours while joined"
    assert mytools.read_bytes().startswith(b"#!/bin/sh"), "never written through"
    again = node.cli("bootstrap", timeout=LIVENESS_S)
    assert again.returncode == 0, again.stdout + again.stderr

    proc = node.cli("unbootstrap", timeout=LIVENESS_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.readlink(node.path(KUBECTL)) == str(mytools)
    st = os.lstat(node.path(CONTAINERD_CONFIG))
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640


def test_a_managed_file_linked_to_an_endless_device_converges_and_comes_back(node):
    os.makedirs(os.path.dirname(node.path(CONTAINERD_CONFIG)), exist_ok=True)
    os.symlink("/dev/zero", node.path(CONTAINERD_CONFIG))
    proc = _bootstrap(node)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stat.S_ISREG(os.lstat(node.path(CONTAINERD_CONFIG)).st_mode)
    proc = node.cli("unbootstrap", timeout=LIVENESS_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.readlink(node.path(CONTAINERD_CONFIG)) == "/dev/zero"


def test_a_symlinked_config_comes_back_as_the_link_not_a_copy(node, tmp_path):
    # The operator keeps the real file elsewhere (a config-management checkout).
    theirs = tmp_path / "checkout-fstab"
    theirs.write_bytes(b"# theirs\n/swapfile none swap sw 0 0\n")
    os.makedirs(os.path.dirname(node.path(FSTAB)), exist_ok=True)
    if os.path.lexists(node.path(FSTAB)):
        os.unlink(node.path(FSTAB))
    os.symlink(str(theirs), node.path(FSTAB))
    proc = _bootstrap(node)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert theirs.read_bytes() == b"# theirs\n/swapfile none swap sw 0 0\n", "never written through"
    proc = node.cli("unbootstrap", timeout=LIVENESS_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.readlink(node.path(FSTAB)) == str(theirs)


def test_a_directory_at_a_managed_file_path_is_refused_and_kept(node):
    os.makedirs(node.path(CONTAINERD_CONFIG) + "/inside")
    proc, summary = node.cli_json("bootstrap", timeout=LIVENESS_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert summary["error"]["error"] == "directory-in-the-way", summary["error"]
    assert CONTAINERD_CONFIG in summary["error"]["message"]
    assert os.listdir(node.path(CONTAINERD_CONFIG)) == ["inside"]
