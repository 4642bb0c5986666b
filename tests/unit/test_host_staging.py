"""Staged files (host/staging.py): real files under a temp root."""

import hashlib
import io
import os
import stat
import subprocess

import pytest

from aks_flex_node.host import Host, HostFileError
from aks_flex_node.host.temps import stale_temps


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "root"
    (root / "usr/local/bin").mkdir(parents=True)
    return Host(root=root, env={"PATH": "/usr/bin:/bin"})


def temps(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".tmp"))


def test_nothing_changes_until_commit_then_the_file_is_replaced_whole(host):
    host.write_file("/usr/local/bin/runc", b"old runc", 0o755)
    real = host.path("/usr/local/bin/runc")
    inode = os.stat(real).st_ino
    staged = host.stage("/usr/local/bin/runc")
    staged.copy_from(io.BytesIO(b"new runc " * 100_000))
    staged.finish(0o755)
    assert real.read_bytes() == b"old runc", "staging leaves the destination alone"
    [temp] = temps(real.parent)
    assert temp.startswith(f".runc.{os.getpid()}."), "host/fs.py's temp name: a killed run's is known"
    assert staged.sha256 == hashlib.sha256(b"new runc " * 100_000).hexdigest()
    assert staged.commit() == "content"
    assert real.read_bytes() == b"new runc " * 100_000 and os.stat(real).st_ino != inode
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o755 and temps(real.parent) == []


def test_a_new_file_is_created_and_its_staged_copy_is_private_until_finished(host):
    staged = host.stage("/usr/local/bin/containerd")
    staged.write(b"secret-looking bytes")
    [temp] = temps(host.path("/usr/local/bin"))
    assert stat.S_IMODE(os.stat(host.path("/usr/local/bin") / temp).st_mode) == 0o600
    staged.finish(0o755)
    assert staged.commit() == "created"
    assert host.read_bytes("/usr/local/bin/containerd") == b"secret-looking bytes"


def test_the_same_bytes_and_mode_change_nothing(host):
    host.write_file("/usr/local/bin/kubelet", b"kubelet", 0o755)
    before = os.stat(host.path("/usr/local/bin/kubelet"))
    staged = host.stage("/usr/local/bin/kubelet")
    staged.write(b"kubelet")
    staged.finish(0o755)
    assert staged.commit() is None
    after = os.stat(host.path("/usr/local/bin/kubelet"))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert temps(host.path("/usr/local/bin")) == []
    # Same bytes, another mode: replaced (the mode is part of what is installed).
    os.chmod(host.path("/usr/local/bin/kubelet"), 0o700)
    staged = host.stage("/usr/local/bin/kubelet")
    staged.write(b"kubelet")
    staged.finish(0o755)
    assert staged.commit() == "content"
    assert stat.S_IMODE(os.stat(host.path("/usr/local/bin/kubelet")).st_mode) == 0o755


def test_a_replaced_file_keeps_its_owner(host):
    host.write_file("/usr/local/bin/runc", b"old", 0o755)
    os.chown(host.path("/usr/local/bin/runc"), 1234, 2345)
    staged = host.stage("/usr/local/bin/runc")
    staged.write(b"new")
    staged.finish(0o755)
    staged.commit()
    st = os.stat(host.path("/usr/local/bin/runc"))
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 2345, 0o755)


def test_discard_leaves_the_destination_and_no_temp(host):
    host.write_file("/usr/local/bin/runc", b"old", 0o755)
    staged = host.stage("/usr/local/bin/runc")
    staged.write(b"half of a new")
    staged.discard()
    staged.discard()  # twice is fine
    assert host.read_bytes("/usr/local/bin/runc") == b"old"
    assert temps(host.path("/usr/local/bin")) == []


def test_a_directory_in_the_way_is_an_error_and_nothing_moves(host):
    os.mkdir(host.path("/usr/local/bin/kubelet"))
    staged = host.stage("/usr/local/bin/kubelet")
    staged.write(b"k")
    staged.finish(0o755)
    with pytest.raises(HostFileError) as err:
        staged.commit()
    assert err.value.code == "is-a-directory"
    assert str(host.path("/usr/local/bin/kubelet")) in err.value.message
    staged.discard()
    assert temps(host.path("/usr/local/bin")) == []


def test_remove_temps_takes_a_recorded_runs_temps_only(host):
    """What clearing a staging record relies on: the temps of `path` written by the run
    the ledger names go, whether or not its pid was given to another process since;
    another writer's, and files that are not our temps, stay."""
    bin_dir = host.path("/usr/local/bin")
    mine = f".kubelet.{os.getpid()}.abc123_x.tmp"   # a live pid: taken when it is the one named
    other = ".kubelet.4194999.zz9_.tmp"              # another (dead) writer of kubelet
    unrelated = ".kubelet.notours.tmp"
    for name in (mine, other, unrelated):
        (bin_dir / name).write_bytes(b"half")
    removed = host.remove_temps("/usr/local/bin/kubelet", os.getpid())
    assert [os.path.basename(r) for r in removed] == [mine]
    assert temps(bin_dir) == sorted([other, unrelated])
    assert stale_temps(str(bin_dir / "kubelet")) == [str(bin_dir / other)], "by a dead pid, as before"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_a_full_file_system_is_an_error_naming_the_destination(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        staged = Host(root=tmp_path).stage("/full/kubelet")
        # the file, and the system's reason
        with pytest.raises(HostFileError, match=r"/full/kubelet\b.*No space left"):
            for _ in range(64):
                staged.write(b"x" * 4096)
            staged.finish(0o755)
        staged.discard()
        assert os.listdir(full) == []
    finally:
        subprocess.run(["umount", str(full)], check=True)
