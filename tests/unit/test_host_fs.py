"""Host paths and files: real files under a temp root."""

import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path, PurePosixPath

import pytest

from aks_flex_node.host import Host, HostFileError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    return Host(root=root, env={"PATH": "/usr/bin:/bin"})


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def leftovers(directory):
    return [n for n in os.listdir(directory) if n.startswith(".") and n.endswith(".tmp")]


# ---- path ----------------------------------------------------------------------------


def test_path_joins_node_paths_under_the_root(host):
    assert host.path("/etc/kubernetes/kubelet.conf") == host.root / "etc/kubernetes/kubelet.conf"
    assert host.path("//etc//./x/") == host.root / "etc/x"
    assert host.path("/") == host.root
    assert host.path(PurePosixPath("/opt/cni/bin")) == host.root / "opt/cni/bin"
    assert Host("/").path("/etc/hosts") == Path("/etc/hosts")
    assert host.paths.root == host.root and host.paths.real("/etc/x") == host.path("/etc/x")


@pytest.mark.parametrize("bad, expected", [
    ("etc/passwd", "expected an absolute node path"),
    ("", "expected an absolute node path"),
    ("/etc/../../outside", "'..' is not allowed"),
    ("/..", "'..' is not allowed"),
])
def test_path_rejects_relative_and_escaping_paths(host, bad, expected):
    with pytest.raises(ValueError, match=expected) as caught:
        host.path(bad)
    assert repr(bad) in str(caught.value)


def test_path_rejects_non_strings(host):
    with pytest.raises(TypeError, match="path = b'/etc': expected a str"):
        host.path(b"/etc")


def test_relative_root_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Host("img").root == tmp_path / "img"
    assert not Host("img").is_live and Host("/").is_live


# ---- write_file ----------------------------------------------------------------------


def test_write_creates_file_with_exact_mode_and_0755_parents(host):
    old_umask = os.umask(0o077)
    try:
        assert host.write_file("/etc/aks/sub/config.yaml", b"a: 1\n", 0o640) == "created"
    finally:
        os.umask(old_umask)
    real = host.path("/etc/aks/sub/config.yaml")
    assert real.read_bytes() == b"a: 1\n"
    assert mode_of(real) == 0o640
    assert mode_of(host.path("/etc/aks")) == 0o755
    assert mode_of(host.path("/etc/aks/sub")) == 0o755
    assert leftovers(real.parent) == []


def test_write_same_content_and_mode_changes_nothing(host):
    host.write_file("/etc/x", b"same", 0o600)
    before = os.stat(host.path("/etc/x"))
    assert host.write_file("/etc/x", b"same", 0o600) is None
    after = os.stat(host.path("/etc/x"))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_mode_drift_is_fixed_with_chmod_alone(host):
    host.write_file("/etc/x", b"content", 0o644)
    real = host.path("/etc/x")
    os.chmod(real, 0o666)
    inode = os.stat(real).st_ino
    assert host.write_file("/etc/x", b"content", 0o644) == "mode"
    assert mode_of(real) == 0o644
    assert os.stat(real).st_ino == inode  # not rewritten
    assert real.read_bytes() == b"content"


def test_content_change_replaces_file_atomically(host):
    host.write_file("/etc/x", b"old", 0o644)
    real = host.path("/etc/x")
    inode = os.stat(real).st_ino
    assert host.write_file("/etc/x", b"new", 0o600) == "content"
    assert real.read_bytes() == b"new"
    assert mode_of(real) == 0o600
    assert os.stat(real).st_ino != inode  # a new file renamed over the old one
    assert leftovers(real.parent) == []


def test_existing_owner_is_kept_and_given_owner_is_applied(host):
    host.write_file("/etc/x", b"old")
    real = host.path("/etc/x")
    os.chown(real, 1234, 2345)
    assert host.write_file("/etc/x", b"new") == "content"
    assert (os.stat(real).st_uid, os.stat(real).st_gid) == (1234, 2345)
    assert host.write_file("/etc/x", b"new", owner=(0, 0)) == "owner"
    assert (os.stat(real).st_uid, os.stat(real).st_gid) == (0, 0)
    os.chown(real, 1234, 2345)
    os.chmod(real, 0o600)
    assert host.write_file("/etc/x", b"new", 0o644, owner=(0, 0)) == "mode+owner"


def test_owner_names_come_from_the_roots_account_files(host):
    host.write_file("/etc/passwd", b"root:x:0:0::/root:/bin/sh\nhimds:x:990:985::/x:/bin/false\n")
    host.write_file("/etc/group", b"root:x:0:\nhimds:x:985:\nkube:x:977:\n")
    host.write_file("/var/lib/a", b"x", 0o640, owner="himds")
    assert (os.stat(host.path("/var/lib/a")).st_uid, os.stat(host.path("/var/lib/a")).st_gid) \
        == (990, 985)
    host.write_file("/var/lib/b", b"x", 0o640, owner="root:kube")
    assert os.stat(host.path("/var/lib/b")).st_gid == 977
    # the field, its value, the name not found and the file it was looked up in
    with pytest.raises(ValueError, match=r"owner = 'nobody:x'.*'nobody'.*/etc/passwd"):
        host.write_file("/var/lib/c", b"x", owner="nobody:x")
    with pytest.raises(ValueError, match=r"owner = 'root:nogroup'.*'nogroup'.*/etc/group"):
        host.write_file("/var/lib/c", b"x", owner="root:nogroup")
    with pytest.raises(ValueError, match=r"owner = \(0, -1\)"):
        host.write_file("/var/lib/c", b"x", owner=(0, -1))
    assert not host.exists("/var/lib/c")


def test_write_rejects_bad_content_and_mode(host):
    with pytest.raises(TypeError, match=r"/etc/x.*\bstr\b"):  # the file and the type given
        host.write_file("/etc/x", "text")
    with pytest.raises(ValueError, match="mode = '644'"):
        host.write_file("/etc/x", b"x", "644")
    with pytest.raises(ValueError, match="mode = 4096"):
        host.write_file("/etc/x", b"x", 0o10000)
    assert not host.exists("/etc/x")


def test_write_onto_a_directory_is_an_error(host):
    host.ensure_dir("/etc/x")
    with pytest.raises(HostFileError) as err:
        host.write_file("/etc/x", b"x")
    assert err.value.code == "is-a-directory" and str(host.path("/etc/x")) in err.value.message


def test_symlink_is_replaced_not_written_through(host, tmp_path):
    outside = tmp_path / "outside.conf"
    outside.write_bytes(b"keep me")
    host.ensure_dir("/etc")
    os.symlink(outside, host.path("/etc/resolv.conf"))
    assert host.write_file("/etc/resolv.conf", b"nameserver 10.0.0.1\n") == "content"
    assert outside.read_bytes() == b"keep me"
    assert not os.path.islink(host.path("/etc/resolv.conf"))
    assert host.read_bytes("/etc/resolv.conf") == b"nameserver 10.0.0.1\n"


def test_parent_symlink_leading_out_of_the_root_is_refused(host, tmp_path):
    outside = tmp_path / "host-run"
    outside.mkdir()
    host.ensure_dir("/var")
    # Debian images have an absolute /var/run -> /run: followed from outside the
    # image it would land on the build machine.
    os.symlink(outside, host.path("/var/run"))
    for change, node_path in ((lambda p: host.write_file(p, b"1"), "/var/run/x.pid"),
                              (host.remove, "/var/run/x"), (host.remove_tree, "/var/run/x")):
        with pytest.raises(HostFileError) as err:
            change(node_path)
        # the path refused and where the symlink leads
        assert err.value.code == "outside-root"
        assert node_path in err.value.message and str(outside) in err.value.message
    assert list(outside.iterdir()) == []


def test_failed_write_leaves_no_temp_file_and_old_content(tmp_path):
    # A real failure in the middle of the write: the file-size limit (EFBIG), as a full
    # disk would be; in a child process so the limit does not touch the test run.
    target = tmp_path / "etc" / "big"
    target.parent.mkdir()
    target.write_bytes(b"old")
    child = textwrap.dedent(f"""
        import resource, signal
        from aks_flex_node.host import fs
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
        try:
            fs.write_file({str(target)!r}, b"x" * 4096)
        except fs.HostFileError as e:
            print("error:", e)
    """)
    out = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.startswith(f"error: cannot write {target}: File too large"), out
    assert target.read_bytes() == b"old"
    assert os.listdir(target.parent) == ["big"]


def _dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_killed_writers_temp_file_goes_with_the_next_write_or_removal(host):
    """kill -9 mid-write skips the writer's cleanup: its `.<name>.<pid>.<random>.tmp` stayed
    for good, and kept unbootstrap from removing the directory (issue 9's fault matrix)."""
    etc = host.path("/etc")
    os.makedirs(etc)
    dead = f".conf.{_dead_pid()}.k1ll3d_x.tmp"
    live = f".conf.{os.getpid()}.w0rk1ng_.tmp"  # a writer still at work keeps its temp
    other = ".conf.notours.tmp"                  # not our pattern: someone else's
    for name in (dead, live, other):
        Path(etc, name).write_bytes(b"half")
    host.write_file("/etc/conf", b"whole\n")
    assert sorted(leftovers(etc)) == sorted([live, other])
    assert host.read_bytes("/etc/conf") == b"whole\n"
    Path(etc, dead).write_bytes(b"half")
    assert host.remove("/etc/conf") is True
    assert sorted(leftovers(etc)) == sorted([live, other])
    # The file already gone (killed before its first rename): the removal still sweeps.
    Path(etc, dead).write_bytes(b"half")
    assert host.remove("/etc/conf") is False
    assert sorted(leftovers(etc)) == sorted([live, other])


def test_a_writer_killed_mid_write_leaves_a_temp_the_next_write_removes(tmp_path):
    target = tmp_path / "etc" / "big"
    target.parent.mkdir()
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from aks_flex_node.host import fs
        fs.write_file({str(target)!r}, b"x" * (64 << 20))
    """)], cwd=REPO, env={"PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 30
    while not [n for n in os.listdir(target.parent) if n.endswith(".tmp")]:
        assert child.poll() is None and time.monotonic() < deadline, "the write ended before the kill"
        time.sleep(0.001)
    child.kill()
    child.wait()
    temps = [n for n in os.listdir(target.parent) if n.endswith(".tmp")]
    assert temps and temps[0].startswith(f".big.{child.pid}."), temps
    from aks_flex_node.host import fs
    assert fs.write_file(str(target), b"small") in ("created", "content")
    assert os.listdir(target.parent) == ["big"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_a_read_only_filesystem_is_an_error_naming_the_file(tmp_path):
    """The temp file's creation and the directory's fsync were outside the error handling:
    a read-only or full filesystem ended in "internal error: OSError"."""
    from aks_flex_node.host import fs

    target = tmp_path / "ro"
    target.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(target)], check=True)
    try:
        with pytest.raises(HostFileError) as err:
            fs.write_file(str(target / "f"), b"x")
        # the file, and the system's reason (strerror, not our words)
        assert err.value.code == "host-file"
        assert f"{target}/f" in err.value.message and "Read-only file system" in err.value.message
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_concurrent_writes_leave_one_whole_file(host):
    contents = [bytes([65 + i]) * 100_000 for i in range(8)]
    threads = [threading.Thread(target=host.write_file, args=("/etc/race", c)) for c in contents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert host.read_bytes("/etc/race") in contents
    assert leftovers(host.path("/etc")) == []


# ---- ensure_dir, remove, read ---------------------------------------------------------


def test_ensure_dir_creates_fixes_mode_and_is_idempotent(host):
    assert host.ensure_dir("/var/lib/aks-flex-node", 0o700) == "created"
    real = host.path("/var/lib/aks-flex-node")
    assert mode_of(real) == 0o700 and mode_of(real.parent) == 0o755
    assert host.ensure_dir("/var/lib/aks-flex-node", 0o700) is None
    os.chmod(real, 0o777)
    assert host.ensure_dir("/var/lib/aks-flex-node", 0o700) == "mode"
    assert mode_of(real) == 0o700


def test_ensure_dir_with_a_file_in_the_way(host):
    host.write_file("/opt/cni", b"")
    for wanted in ("/opt/cni/bin", "/opt/cni"):
        with pytest.raises(HostFileError) as err:
            host.ensure_dir(wanted)
        assert err.value.code == "file-in-the-way"
        assert str(host.path("/opt/cni")) in err.value.message  # the file in the way


def test_remove_takes_files_and_empty_directories(host):
    assert host.remove("/etc/absent") is False
    assert host.remove("/no/such/dir/file") is False
    host.write_file("/etc/x", b"1")
    assert host.remove("/etc/x") is True and not host.exists("/etc/x")
    host.ensure_dir("/opt/cni/bin")
    assert host.remove("/opt/cni/bin") is True
    assert not host.exists("/opt/cni/bin") and host.exists("/opt/cni")


def test_remove_refuses_a_directory_with_content(host):
    host.write_file("/opt/cni/bin/bridge", b"1")
    with pytest.raises(HostFileError) as err:
        host.remove("/opt/cni")
    assert err.value.code == "directory-not-empty" and str(host.path("/opt/cni")) in err.value.message
    assert host.read_bytes("/opt/cni/bin/bridge") == b"1"


def test_remove_tree_removes_a_tree_and_answers_leftovers(host):
    assert host.remove_tree("/opt/absent") == []
    host.write_file("/opt/cni/bin/bridge", b"1")
    host.write_file("/opt/cni/bin/sub/loopback", b"1")
    os.mkfifo(host.path("/opt/cni/bin/fifo"))  # opened by nobody: a fifo must not block
    assert host.remove_tree("/opt/cni") == []
    assert not host.exists("/opt/cni") and host.exists("/opt")
    host.write_file("/etc/single", b"1")
    assert host.remove_tree("/etc/single") == [] and not host.exists("/etc/single")


def test_remove_and_remove_tree_never_follow_symlinks(host, tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data").write_bytes(b"keep")
    host.ensure_dir("/etc/tree/sub")
    os.symlink(outside, host.path("/etc/tree/link"))  # a link inside a tree
    os.symlink(outside, host.path("/etc/tree/sub/link"))
    os.symlink(outside, host.path("/etc/link"))  # a link as the target itself
    os.symlink(outside, host.path("/etc/link2"))
    assert host.remove("/etc/link") is True
    assert host.remove_tree("/etc/link2") == []
    assert host.remove_tree("/etc/tree") == []
    assert not host.exists("/etc/tree") and not host.exists("/etc/link2")
    assert (outside / "data").read_bytes() == b"keep"


def test_remove_and_remove_tree_refuse_the_root(host):
    for root_spelling in ("/", "//", "/.", "/./"):
        named = re.escape(f"path = {root_spelling!r}")  # the field and the value refused
        with pytest.raises(ValueError, match=named):
            host.remove(root_spelling)
        with pytest.raises(ValueError, match=named):
            host.remove_tree(root_spelling)
    assert host.root.is_dir()


def test_read_and_exists(host):
    assert host.read_bytes("/etc/none") is None
    assert host.read_text("/etc/none") is None
    assert not host.exists("/etc/none")
    host.write_file("/etc/x", b"hello")
    assert host.read_bytes("/etc/x") == b"hello" and host.read_text("/etc/x") == "hello"
    os.symlink("/nonexistent", host.path("/etc/dangling"))
    assert host.exists("/etc/dangling")  # something is there, even if it leads nowhere
    assert host.is_dir("/etc") and not host.is_dir("/etc/x")
    with pytest.raises(HostFileError) as err:
        host.read_bytes("/etc")
    assert err.value.code == "host-file" and str(host.path("/etc")) in err.value.message


def test_under_umask_0_directories_and_files_get_exactly_their_modes(host):
    """Directories we create never inherit a loose umask: mkdir's mode is only ever masked
    down, and the chmod after it sets exactly what was asked."""
    old = os.umask(0)
    try:
        assert host.write_file("/etc/loose/a/secret", b"s\n", 0o600) == "created"
        assert host.write_file("/etc/loose/b/public", b"p\n", 0o644) == "created"
        assert host.ensure_dir("/var/lib/loose/private", 0o700) == "created"
        assert host.ensure_dir("/var/lib/loose/shared") == "created"
    finally:
        os.umask(old)
    expected = {"/etc/loose": 0o755, "/etc/loose/a": 0o755, "/etc/loose/a/secret": 0o600,
                "/etc/loose/b/public": 0o644, "/var/lib/loose": 0o755,
                "/var/lib/loose/private": 0o700, "/var/lib/loose/shared": 0o755}
    assert {p: mode_of(host.path(p)) for p in expected} == expected


# ---- links (the switch between two installed versions) ---------------------------------


def test_write_symlink_creates_replaces_and_leaves_a_right_link_alone(host):
    assert host.write_symlink("/opt/v/current", "v1") == "created"
    assert os.readlink(host.path("/opt/v/current")) == "v1" and host.read_link("/opt/v/current") == "v1"
    inode = os.lstat(host.path("/opt/v/current")).st_ino
    assert host.write_symlink("/opt/v/current", "v1") is None
    assert os.lstat(host.path("/opt/v/current")).st_ino == inode, "an unchanged link is not rewritten"
    assert host.write_symlink("/opt/v/current", "v2") == "target"
    assert host.read_link("/opt/v/current") == "v2"
    assert sorted(os.listdir(host.path("/opt/v"))) == ["current"], "no temp link left"


def test_write_symlink_replaces_a_file_and_refuses_a_directory_and_an_absolute_target(host):
    host.write_file("/usr/local/bin/kubelet", b"old binary", 0o755)
    assert host.write_symlink("/usr/local/bin/kubelet", "../lib/k/current/kubelet") == "target"
    assert os.path.islink(host.path("/usr/local/bin/kubelet"))
    host.ensure_dir("/opt/d")
    with pytest.raises(HostFileError) as err:
        host.write_symlink("/opt/d", "x")
    assert err.value.code == "is-a-directory" and str(host.path("/opt/d")) in err.value.message
    with pytest.raises(ValueError, match=re.escape("target = '/etc/passwd'")):
        host.write_symlink("/opt/x", "/etc/passwd")
    assert host.read_link("/usr/local/bin") is None and host.read_link("/nowhere/x") is None


def test_a_link_a_killed_writer_left_is_removed_by_the_next_write(host):
    host.ensure_dir("/opt/v")
    stale = host.path("/opt/v/.current.4194999.abcd.tmp")  # no such pid (above pid_max)
    os.symlink("v0", stale)
    host.write_symlink("/opt/v/current", "v1")
    assert not os.path.lexists(stale)
