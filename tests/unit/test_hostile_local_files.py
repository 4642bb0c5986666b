"""Hostile local file types (issue 26, defects 3, 4 and 5): what is at a path we lock, manage
or back up may be a symlink, a FIFO, a device or a directory. None is followed, waited on
or read without bound; a managed file's odd original is replaced and put back exactly."""

import os
import stat
import subprocess
import sys
import textwrap
import types

import pytest

from aks_flex_node.engine.lock import RunLock, probe
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import Host
from aks_flex_node.paths import LOCK, STATE_DIR
from aks_flex_node.steps import tracked
from aks_flex_node.steps.kinds import Kind, open_ledger

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A liveness bound, not a duration: a case that blocks (a FIFO opened for reading waits for
# a writer for ever) is killed at this bound and reported, instead of hanging the suite.
LIVENESS_S = 120


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    return Host(str(root))


def _ctx(host):
    # What tracked.py reads of a step's context: the host and the ledger (no config needed).
    return types.SimpleNamespace(host=host, ledger=open_ledger(host), config=None)


def _place(host, node_path, make):
    real = host.path(node_path)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    make(str(real))
    return str(real)


def _in_a_child(root, body):
    """Run `body` (Python, with `host` a Host of `root`) in a child, killed at LIVENESS_S;
    returns (finished, returncode, output)."""
    script = textwrap.dedent("""\
        import sys
        sys.path.insert(0, {repo!r})
        from aks_flex_node.host import Host
        host = Host({root!r})
    """).format(repo=REPO, root=str(root)) + textwrap.dedent(body)
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=LIVENESS_S)
    except subprocess.TimeoutExpired as err:
        return False, None, (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
    return True, proc.returncode, proc.stdout + proc.stderr


# ---- defect 3: the run lock -----------------------------------------------------------


def test_the_lock_never_follows_a_symlink_out_of_the_root(host, tmp_path):
    target = tmp_path / "outside" / "precious"
    target.parent.mkdir()
    target.write_bytes(b"the operator's data\n")
    _place(host, LOCK, lambda real: os.symlink(str(target), real))
    with pytest.raises(FlexNodeError) as err:
        with RunLock(host, "bootstrap"):
            pass
    assert err.value.code == "lock-not-a-file"
    assert LOCK in err.value.message and err.value.remedy
    assert target.read_bytes() == b"the operator's data\n"
    assert os.path.islink(host.path(LOCK)), "left as it was"


def test_status_probe_never_creates_through_a_dangling_lock_link(host, tmp_path):
    target = tmp_path / "outside" / "made-by-us"
    target.parent.mkdir()
    _place(host, LOCK, lambda real: os.symlink(str(target), real))
    with probe(host) as free:
        assert free is None  # cannot tell: something other than our lock file is there
    assert not target.exists()


@pytest.mark.parametrize("make", [os.mkfifo, lambda real: os.symlink("/dev/null", real)],
                         ids=["fifo", "link-to-a-device"])
def test_the_lock_refuses_what_is_no_regular_file(host, make):
    _place(host, LOCK, make)
    before = os.lstat(host.path(LOCK))
    finished, code, out = _in_a_child(host.root, """
        from aks_flex_node.engine.lock import RunLock
        from aks_flex_node.errors import FlexNodeError
        try:
            with RunLock(host, "bootstrap"):
                print("taken")
        except FlexNodeError as err:
            print("refused", err.code)
    """)
    assert finished, "the lock must not wait on what is at its path"
    assert code == 0 and out.split() == ["refused", "lock-not-a-file"], out
    after = os.lstat(host.path(LOCK))
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_a_state_dir_that_is_a_symlink_out_of_the_root_is_refused(host, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.makedirs(os.path.dirname(host.path(STATE_DIR)))
    os.symlink(str(elsewhere), host.path(STATE_DIR))
    with pytest.raises(FlexNodeError) as err:
        with RunLock(host, "bootstrap"):
            pass
    assert err.value.code == "outside-root"
    assert os.listdir(elsewhere) == []


# ---- defect 4: the drift check of a managed file -----------------------------------------

CONFIG = "/etc/containerd/config.toml"
WANTED = b"version = 2\n"


# A read without bound (of /dev/zero, of a sparse terabyte) meets this limit on the child's
# memory long before the liveness bound, and fails there instead of in the machine's.
_BOUNDED = """
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from aks_flex_node.steps import tracked
"""


def test_a_fifo_at_a_managed_path_is_drift_not_a_wait(host):
    _place(host, CONFIG, os.mkfifo)
    finished, code, out = _in_a_child(host.root, f"""
        from aks_flex_node.steps import tracked
        print(tracked.file_drift(host, {CONFIG!r}, {WANTED!r}, 0o644))
    """)
    assert finished, "the drift check must not wait for a writer on the FIFO"
    assert code == 0, out
    assert out.strip().endswith("True)"), out  # a content drift: the file is written


def test_a_link_to_an_endless_device_is_drift_not_a_read(host):
    _place(host, CONFIG, lambda real: os.symlink("/dev/zero", real))
    finished, code, out = _in_a_child(host.root, _BOUNDED + f"""
        print(tracked.file_drift(host, {CONFIG!r}, {WANTED!r}, 0o644))
    """)
    assert finished and code == 0, out
    assert out.strip().endswith("True)"), out


def test_a_directory_at_a_managed_file_path_is_refused_by_the_check(host):
    real = _place(host, CONFIG, os.mkdir)
    with pytest.raises(FlexNodeError) as err:
        tracked.file_drift(host, CONFIG, WANTED, 0o644)
    assert err.value.code == "directory-in-the-way"
    assert CONFIG in err.value.message and err.value.remedy
    assert os.path.isdir(real)


def test_a_regular_file_far_larger_than_wanted_is_not_read(host):
    real = _place(host, CONFIG, lambda r: open(r, "wb").close())
    os.truncate(real, 1 << 40)  # sparse: a terabyte that costs no disk
    finished, code, out = _in_a_child(host.root, _BOUNDED + f"""
        print(tracked.file_drift(host, {CONFIG!r}, {WANTED!r}, 0o644))
    """)
    assert finished and code == 0, out
    assert out.strip() == "('its content differs', True)", out


# ---- defect 5: what was there before is kept as it was, and put back ---------------------


def test_a_symlinked_original_comes_back_as_the_same_link(host, tmp_path):
    mine = tmp_path / "mytools-config.toml"
    mine.write_bytes(b"operator's = true\n")
    real = _place(host, CONFIG, lambda r: os.symlink(str(mine), r))
    ctx = _ctx(host)
    tracked.write_tracked(ctx, "containerd", CONFIG, WANTED, 0o644)
    assert not os.path.islink(real) and open(real, "rb").read() == WANTED
    assert mine.read_bytes() == b"operator's = true\n", "never written through the link"
    assert tracked.forget_file(_ctx(host), CONFIG) == []
    assert os.readlink(real) == str(mine)
    assert mine.read_bytes() == b"operator's = true\n"
    assert not os.path.lexists(host.path("/var/lib/aks-flex-node/backup" + CONFIG))


def test_a_link_we_replace_with_our_own_comes_back(host):
    kubectl = "/usr/local/bin/kubectl"
    real = _place(host, kubectl, lambda r: os.symlink("/opt/mytools/kubectl", r))
    tracked.link_tracked(_ctx(host), "kubernetes", kubectl, "../lib/kubernetes/current/kubectl")
    assert os.readlink(real) == "../lib/kubernetes/current/kubectl"
    tracked.forget_file(_ctx(host), kubectl)
    assert os.readlink(real) == "/opt/mytools/kubectl"


def test_a_fifo_original_comes_back_as_a_fifo_with_its_mode(host):
    real = _place(host, CONFIG, os.mkfifo)
    os.chmod(real, 0o640)
    finished, code, out = _in_a_child(host.root, f"""
        import types
        from aks_flex_node.steps import tracked
        from aks_flex_node.steps.kinds import open_ledger
        ctx = types.SimpleNamespace(host=host, ledger=open_ledger(host), config=None)
        tracked.write_tracked(ctx, "containerd", {CONFIG!r}, {WANTED!r}, 0o644)
        print("written")
    """)
    assert finished, "keeping the original must not wait for a writer on the FIFO"
    assert code == 0 and out.split() == ["written"], out
    assert stat.S_ISREG(os.lstat(real).st_mode)
    tracked.forget_file(_ctx(host), CONFIG)
    st = os.lstat(real)
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640


def test_a_regular_original_keeps_its_owner(host):
    real = _place(host, CONFIG, lambda r: open(r, "wb").write(b"old\n"))
    os.chmod(real, 0o600)
    if os.geteuid() == 0:
        os.chown(real, 4321, 4322)
    owner = os.lstat(real)[stat.ST_UID], os.lstat(real)[stat.ST_GID]
    tracked.write_tracked(_ctx(host), "containerd", CONFIG, WANTED, 0o644)
    tracked.forget_file(_ctx(host), CONFIG)
    st = os.lstat(real)
    assert open(real, "rb").read() == b"old\n" and stat.S_IMODE(st.st_mode) == 0o600
    assert (st.st_uid, st.st_gid) == owner


def test_a_ledger_an_older_release_wrote_restores_as_before(host):
    # Before issue 26 an entry with an original held only `backup` and `mode`.
    real = _place(host, CONFIG, lambda r: open(r, "wb").write(WANTED))
    backup = "/var/lib/aks-flex-node/backup" + CONFIG
    _place(host, backup, lambda r: open(r, "wb").write(b"old\n"))
    ledger = open_ledger(host)
    ledger.record("containerd", Kind.FILE, CONFIG, backup=backup, mode=0o640)
    assert tracked.forget_file(_ctx(host), CONFIG) == []
    assert open(real, "rb").read() == b"old\n" and stat.S_IMODE(os.lstat(real).st_mode) == 0o640


# ---- the rest of the door: every read of a file of ours --------------------------------


@pytest.mark.parametrize("make", [os.mkfifo, lambda real: os.symlink("/dev/zero", real)],
                         ids=["fifo", "link-to-dev-zero"])
def test_a_read_of_a_path_we_manage_neither_waits_nor_reads_without_end(host, make):
    # /etc/fstab is read whole by the system phase; any path read through the host is.
    _place(host, "/etc/fstab", make)
    finished, code, out = _in_a_child(host.root, _BOUNDED + """
        from aks_flex_node.errors import FlexNodeError
        try:
            host.read_bytes("/etc/fstab")
        except FlexNodeError as err:
            print("refused", err.code, "/etc/fstab" in err.message)
    """)
    assert finished, "a read must not wait for a writer on the FIFO"
    assert code == 0 and out.split() == ["refused", "not-a-regular-file", "True"], out


@pytest.mark.parametrize("make, code", [
    (os.mkfifo, "ledger-not-regular"),
    (lambda real: os.symlink("/tmp/someone-elses-list.json", real), "ledger-symlink"),
], ids=["fifo", "symlink"])
def test_a_ledger_that_is_no_regular_file_is_refused_and_kept(host, make, code):
    from aks_flex_node.paths import LEDGER
    _place(host, LEDGER, make)
    before = os.lstat(host.path(LEDGER))
    finished, rc, out = _in_a_child(host.root, """
        from aks_flex_node.errors import FlexNodeError
        from aks_flex_node.steps.kinds import open_ledger
        try:
            open_ledger(host)
        except FlexNodeError as err:
            print("refused", err.code, "ledger.json" in err.message, bool(err.remedy))
    """)
    assert finished, "the ledger's read must not wait for a writer on the FIFO"
    assert rc == 0 and out.split() == ["refused", code, "True", "True"], out
    after = os.lstat(host.path(LEDGER))
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_a_staged_install_meeting_a_fifo_where_its_file_goes_neither_waits_nor_keeps_it(host):
    # The digest compare of what is installed (host/staging.py, host/download.py) opened
    # the path plainly: a FIFO there waited for a writer.
    _place(host, "/usr/local/bin/runc", os.mkfifo)
    finished, code, out = _in_a_child(host.root, """
        from aks_flex_node.host import fs
        print(fs.file_sha256(str(host.path("/usr/local/bin/runc"))))
    """)
    assert finished, "the digest of a FIFO must not wait for a writer"
    assert code == 0 and out.split() == ["None"], out


def test_a_mount_point_at_a_managed_file_that_must_change_is_refused(host, tmp_path):
    # A file bind-mounted over a path we manage (a container's /etc/resolv.conf is one):
    # rename(2) over it fails with EBUSY, and what is mounted is not ours to replace.
    source = tmp_path / "mounted-config"
    source.write_bytes(b"someone else's\n")
    real = _place(host, CONFIG, lambda r: open(r, "wb").close())
    if subprocess.run(["mount", "--bind", str(source), real], capture_output=True).returncode != 0:
        pytest.skip("bind mounts are not permitted here")
    try:
        with pytest.raises(FlexNodeError) as err:
            tracked.file_drift(host, CONFIG, WANTED, 0o644)
        assert err.value.code == "mount-point-in-the-way" and CONFIG in err.value.message
        assert source.read_bytes() == b"someone else's\n"
    finally:
        subprocess.run(["umount", real], check=False)
