"""A full /var/lib: `bootstrap` stops at the run lock, before changing anything, with an error
naming the file and what to do (fault matrix cell "ENOSPC: /var/lib full"; it used to end in
"internal error: OSError: [Errno 28]" naming no file); once there is room it joins."""

import os
import subprocess

import pytest


@pytest.fixture
def full_var_lib(node):
    target = node.path("/var/lib")
    os.makedirs(target, exist_ok=True)
    if os.listdir(target):
        pytest.skip(f"{target} is not empty: a tmpfs would hide its content")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", target],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.decode().strip()}")
    filler = os.path.join(target, "filler")
    try:
        with open(filler, "wb") as f:
            f.write(b"\0" * (os.statvfs(target).f_bavail * os.statvfs(target).f_frsize))
        yield filler
    finally:
        subprocess.run(["umount", "-l", target], check=False)


def test_a_full_var_lib_names_the_lock_file_and_what_to_do(node, full_var_lib):
    before = node.files()
    proc, error = node.cli_json("bootstrap")
    assert proc.returncode == 1, proc.stderr
    lock = node.path("/var/lib/aks-flex-node/lock")
    assert error["error"] == "state-write"
    assert error["message"] == f"cannot write {lock}: No space left on device"
    assert error["remedy"].startswith("free space on the file system holding")
    assert "internal error" not in proc.stderr
    # Only the empty lock file and its directory were made: nothing else changed.
    assert node.files() - before == {"/var/lib/aks-flex-node", "/var/lib/aks-flex-node/lock"}
    assert os.path.getsize(lock) == 0

    os.remove(full_var_lib)  # the operator frees space
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0 and summary["state"] == "succeeded", proc.stderr
