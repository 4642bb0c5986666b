"""Installing files out of real tar archives built in the test."""

import io
import os
import stat
import tarfile

import pytest

from aks_flex_node.host import ArchiveError, Host, members_under, read_members


def make_tar(path, entries, mode="w:gz"):
    """entries: (name, bytes) for regular files, or (name, TarInfo-type, linkname)."""
    with tarfile.open(path, mode) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry[0])
            if len(entry) == 2:
                info.size = len(entry[1])
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(entry[1]))
            else:
                info.type = entry[1]
                info.linkname = entry[2]
                tar.addfile(info)
    return path


@pytest.fixture
def host(tmp_path):
    return Host(root=tmp_path / "root", env={})


KUBE_NODE = [
    ("kubernetes/", tarfile.DIRTYPE, ""),
    ("kubernetes/node/bin/", tarfile.DIRTYPE, ""),
    ("kubernetes/node/bin/kubelet", b"kubelet v1.30"),
    ("kubernetes/node/bin/kubeadm", b"kubeadm v1.30"),
    ("kubernetes/node/bin/kube-proxy", b"kube-proxy v1.30"),
    ("kubernetes/LICENSES", b"licenses"),
]


def test_named_members_are_installed_0755_and_a_rerun_is_a_no_op(host, tmp_path):
    archive = make_tar(tmp_path / "kubernetes-node.tar.gz", KUBE_NODE)
    wanted = {"kubernetes/node/bin/kubelet": "kubelet", "./kubernetes/node/bin/kubeadm": "kubeadm"}
    changes = host.extract_members(archive, wanted, "/usr/local/bin")
    assert changes == {"/usr/local/bin/kubelet": "created", "/usr/local/bin/kubeadm": "created"}
    kubelet = host.path("/usr/local/bin/kubelet")
    assert kubelet.read_bytes() == b"kubelet v1.30"
    assert stat.S_IMODE(kubelet.stat().st_mode) == 0o755
    assert not host.exists("/usr/local/bin/kube-proxy")
    inode = kubelet.stat().st_ino
    again = host.extract_members(archive, wanted, "/usr/local/bin")
    assert again == {"/usr/local/bin/kubelet": None, "/usr/local/bin/kubeadm": None}
    assert kubelet.stat().st_ino == inode


def test_changed_member_is_replaced(host, tmp_path):
    old = make_tar(tmp_path / "old.tgz", [("runc", b"v1")])
    new = make_tar(tmp_path / "new.tgz", [("runc", b"v2")])
    host.extract_members(old, {"runc": "runc"}, "/usr/bin")
    assert host.extract_members(new, {"runc": "runc"}, "/usr/bin") == {"/usr/bin/runc": "content"}
    assert host.read_bytes("/usr/bin/runc") == b"v2"


def test_prefix_selector_takes_every_file_below_it(host, tmp_path):
    archive = make_tar(tmp_path / "k.tar.gz", KUBE_NODE)
    changes = host.extract_members(archive, members_under("kubernetes/node/bin/"), "/usr/local/bin")
    assert sorted(changes) == ["/usr/local/bin/kube-proxy", "/usr/local/bin/kubeadm",
                               "/usr/local/bin/kubelet"]


def test_empty_prefix_takes_a_flat_dot_slash_archive(host, tmp_path):
    # cni-plugins tarballs name their members "./bridge", "./loopback", ...
    archive = make_tar(tmp_path / "cni.tgz", [
        ("./", tarfile.DIRTYPE, ""), ("./bridge", b"b"), ("./loopback", b"l"),
        ("./host-local", b"h")])
    changes = host.extract_members(archive, members_under(""), "/opt/cni/bin", mode=0o750)
    assert sorted(changes) == ["/opt/cni/bin/bridge", "/opt/cni/bin/host-local",
                               "/opt/cni/bin/loopback"]
    assert stat.S_IMODE(host.path("/opt/cni/bin/bridge").stat().st_mode) == 0o750


@pytest.mark.parametrize("fmt", ["w", "w:xz", "w:bz2"])
def test_other_compressions(host, tmp_path, fmt):
    archive = make_tar(tmp_path / "a.tar", [("bin/containerd", b"c")], mode=fmt)
    host.extract_members(archive, members_under("bin"), "/usr/local/bin")
    assert host.read_bytes("/usr/local/bin/containerd") == b"c"


def test_missing_named_member_is_an_error(host, tmp_path):
    archive = make_tar(tmp_path / "a.tgz", KUBE_NODE)
    with pytest.raises(ArchiveError, match=r"a\.tgz lacks kubernetes/node/bin/kubectl"):
        host.extract_members(archive, {"kubernetes/node/bin/kubectl": "kubectl"}, "/usr/local/bin")


@pytest.mark.parametrize("entries, expected", [
    ([("/etc/passwd", b"x")], "member with an absolute path: '/etc/passwd'"),
    ([("bin/../../etc/cron.d/x", b"x")], "climbs out with '..': 'bin/../../etc/cron.d/x'"),
])
def test_unsafe_member_names_refuse_the_whole_archive(host, tmp_path, entries, expected):
    archive = make_tar(tmp_path / "evil.tgz", [("bin/ok", b"ok")] + entries)
    with pytest.raises(ArchiveError, match=expected):
        host.extract_members(archive, members_under("bin"), "/usr/local/bin")
    assert not host.exists("/etc/passwd") and not host.exists("/etc/cron.d/x")


@pytest.mark.parametrize("kind, link, expected", [
    (tarfile.SYMTYPE, "/usr/bin/sudo", "symlink to '/usr/bin/sudo'"),
    (tarfile.LNKTYPE, "bin/ok", "hard link to 'bin/ok'"),
    (tarfile.CHRTYPE, "", "device"),
    (tarfile.FIFOTYPE, "", "fifo"),
])
def test_selected_links_and_devices_are_errors(host, tmp_path, kind, link, expected):
    archive = make_tar(tmp_path / "a.tgz", [("bin/ok", b"ok"), ("bin/evil", kind, link)])
    with pytest.raises(ArchiveError, match=f"member bin/evil is a {expected}: expected a regular"):
        host.extract_members(archive, {"bin/evil": "evil"}, "/usr/local/bin")
    assert not os.path.lexists(host.path("/usr/local/bin/evil"))


def test_unselected_link_is_ignored(host, tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("bin/ok", b"ok"), ("doc/link", tarfile.SYMTYPE, "/")])
    assert host.extract_members(archive, members_under("bin"), "/x") == {"/x/ok": "created"}


def test_member_size_cap(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("big", b"x" * 100)])
    with pytest.raises(ArchiveError, match="member big is 100 bytes: expected at most 10"):
        list(read_members(archive, lambda name: name, max_member_bytes=10))


def test_read_members_yields_names_and_data(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("./a/x", b"1"), ("a/y", b"2"), ("b/z", b"3")])
    got = list(read_members(archive, lambda n: n.upper() if n.startswith("a/") else None))
    assert got == [("a/x", "A/X", b"1"), ("a/y", "A/Y", b"2")]


@pytest.mark.parametrize("dest", ["../escape", "/abs", "", "a/../b"])
def test_selector_giving_an_unsafe_destination_is_rejected(host, tmp_path, dest):
    archive = make_tar(tmp_path / "a.tgz", [("x", b"1")])
    expected = f"destination for x in .* = {dest!r}: expected a relative"
    with pytest.raises(ValueError, match=expected):
        host.extract_members(archive, lambda name: dest, "/usr/bin")


def test_not_an_archive_missing_or_damaged(host, tmp_path):
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"<html>404 page</html>")
    with pytest.raises(ArchiveError, match="cannot read archive .*junk.tgz"):
        host.extract_members(junk, members_under(""), "/x")
    with pytest.raises(ArchiveError, match="missing.tgz does not exist"):
        host.extract_members(tmp_path / "missing.tgz", members_under(""), "/x")
    good = make_tar(tmp_path / "good.tgz", [("a", os.urandom(200_000)), ("b", b"2")])
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(good.read_bytes()[:50_000])
    with pytest.raises(ArchiveError, match="cut.tgz is damaged"):
        host.extract_members(cut, members_under(""), "/x")


def test_bad_members_argument(host, tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("x", b"1")])
    with pytest.raises(TypeError, match="members = 'x': expected a dict"):
        host.extract_members(archive, "x", "/usr/bin")
    with pytest.raises(ValueError, match="expected an absolute path"):
        host.extract_members(archive, {"x": "x"}, "usr/bin")
