"""Reading files out of real tar archives built in the test, in one pass from the front."""

import io
import os
import tarfile

import pytest

from aks_flex_node.host import ArchiveError
from aks_flex_node.host.archive import members
from tests.archive_fixtures import Counted


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


def every_file_below(prefix):
    """A selector as the artifact steps write one: the files below `prefix`, by base name."""
    return lambda name: name[len(prefix):] if name.startswith(prefix) else None


def read_all(archive, wanted, **kw):
    with open(archive, "rb") as body:
        return [(m, d, content.read()) for m, d, content in members(body, wanted, str(archive), **kw)]


KUBE_NODE = [
    ("kubernetes/", tarfile.DIRTYPE, ""),
    ("kubernetes/node/bin/", tarfile.DIRTYPE, ""),
    ("kubernetes/node/bin/kubelet", b"kubelet v1.30"),
    ("kubernetes/node/bin/kubeadm", b"kubeadm v1.30"),
    ("kubernetes/LICENSES", b"licenses"),
]


def test_selected_members_are_read_and_the_rest_skipped(tmp_path):
    archive = make_tar(tmp_path / "kubernetes-node.tar.gz", KUBE_NODE)
    assert read_all(archive, every_file_below("kubernetes/node/bin/")) == [
        ("kubernetes/node/bin/kubelet", "kubelet", b"kubelet v1.30"),
        ("kubernetes/node/bin/kubeadm", "kubeadm", b"kubeadm v1.30"),
    ]


def test_dot_slash_names_are_normalised(tmp_path):
    # cni-plugins tarballs name their members "./bridge", "./loopback", ...
    archive = make_tar(tmp_path / "cni.tgz", [
        ("./", tarfile.DIRTYPE, ""), ("./bridge", b"b"), ("./loopback", b"l")])
    assert read_all(archive, lambda name: name) == [("bridge", "bridge", b"b"),
                                                    ("loopback", "loopback", b"l")]


@pytest.mark.parametrize("fmt", ["w", "w:xz", "w:bz2"])
def test_other_compressions(tmp_path, fmt):
    archive = make_tar(tmp_path / "a.tar", [("bin/containerd", b"c")], mode=fmt)
    assert read_all(archive, every_file_below("bin/")) == [("bin/containerd", "containerd", b"c")]


@pytest.mark.parametrize("entries, code", [
    ([("/etc/passwd", b"x")], "member-absolute"),
    ([("bin/../../etc/cron.d/x", b"x")], "member-climbs-out"),
])
def test_unsafe_member_names_refuse_the_whole_archive(tmp_path, entries, code):
    archive = make_tar(tmp_path / "evil.tgz", [("bin/ok", b"ok")] + entries)
    with pytest.raises(ArchiveError) as err:
        read_all(archive, every_file_below("bin/"))
    # the archive and the member's name as it stands in it
    assert err.value.code == code
    assert str(archive) in err.value.message and repr(entries[0][0]) in err.value.message


@pytest.mark.parametrize("kind, link, expected", [
    (tarfile.SYMTYPE, "/usr/bin/sudo", "symlink to '/usr/bin/sudo'"),
    (tarfile.LNKTYPE, "bin/ok", "hard link to 'bin/ok'"),
    (tarfile.CHRTYPE, "", "device"),
    (tarfile.FIFOTYPE, "", "fifo"),
])
def test_selected_links_and_devices_are_errors(tmp_path, kind, link, expected):
    archive = make_tar(tmp_path / "a.tgz", [("bin/ok", b"ok"), ("bin/evil", kind, link)])
    with pytest.raises(ArchiveError, match=f"bin/evil.*{expected}") as err:  # the member and what it is
        read_all(archive, {"bin/evil": "evil"}.get)
    assert err.value.code == "member-not-regular"


def test_unselected_link_is_ignored(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("bin/ok", b"ok"), ("doc/link", tarfile.SYMTYPE, "/")])
    assert read_all(archive, every_file_below("bin/")) == [("bin/ok", "ok", b"ok")]


def test_member_size_cap(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("big", b"x" * 100)])
    with pytest.raises(ArchiveError, match=r"\bbig\b.*\b100\b.*\b10\b") as err:  # the member, its size, the cap
        read_all(archive, lambda name: name, max_member_bytes=10)
    assert err.value.code == "member-too-large"


def test_members_yields_names_and_content(tmp_path):
    archive = make_tar(tmp_path / "a.tgz", [("./a/x", b"1"), ("a/y", b"2"), ("b/z", b"3")])
    got = read_all(archive, lambda n: n.upper() if n.startswith("a/") else None)
    assert got == [("a/x", "A/X", b"1"), ("a/y", "A/Y", b"2")]


def test_a_member_is_handed_over_before_the_archive_is_read_to_its_end(tmp_path):
    # What lets an install unpack while it downloads: the first member's content is there
    # while most of the archive has not been read yet (the stream is read front to back).
    first, rest = os.urandom(1 << 20), os.urandom(8 << 20)
    data = make_tar(tmp_path / "a.tgz", [("first", first), ("rest", rest)]).read_bytes()
    body = Counted(data)
    got = members(io.BufferedReader(body), lambda name: name, "a.tgz")
    name, _, content = next(got)
    assert (name, content.read()) == ("first", first)
    assert body.offset < len(data) // 2, (body.offset, len(data))
    assert [(n, c.read()) for n, _, c in got] == [("rest", rest)]


def test_an_unsafe_member_after_a_chosen_one_fails_the_read(tmp_path):
    # Read in one pass, a refused member may come after a chosen one was handed over: the
    # caller learns it before the end, and installs nothing (steps/artifacts.py stages).
    archive = make_tar(tmp_path / "evil.tgz", [("bin/ok", b"ok"), ("bin/link", tarfile.SYMTYPE, "/etc")])
    handed = []
    with open(archive, "rb") as body, pytest.raises(ArchiveError, match="bin/link.*symlink"):
        for name, _, content in members(body, every_file_below("bin/"), "evil.tgz"):
            handed.append((name, content.read()))
    assert handed == [("bin/ok", b"ok")]


@pytest.mark.parametrize("dest", ["../escape", "/abs", "", "a/../b"])
def test_selector_giving_an_unsafe_destination_is_rejected(tmp_path, dest):
    archive = make_tar(tmp_path / "a.tgz", [("x", b"1")])
    expected = f"destination for x in .* = {dest!r}: expected a relative"
    with pytest.raises(ValueError, match=expected):
        read_all(archive, lambda name: dest)


def test_not_an_archive_or_damaged(tmp_path):
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"<html>404 page</html>")
    with pytest.raises(ArchiveError, match="junk.tgz") as err:
        read_all(junk, lambda name: name)
    assert err.value.code == "not-an-archive"
    good = make_tar(tmp_path / "good.tgz", [("a", os.urandom(200_000)), ("b", b"2")])
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(good.read_bytes()[:50_000])
    # Cut inside member a: the damage shows while a's content is read.
    with pytest.raises(ArchiveError, match=r"cut\.tgz member a\b") as err:  # the archive and the member
        read_all(cut, lambda name: name)
    assert err.value.code == "damaged"
    with pytest.raises(ArchiveError, match=r"cut\.tgz") as err:  # a skipped, then b's header
        read_all(cut, {"b": "b"}.get)
    assert err.value.code == "damaged"
    whole = make_tar(tmp_path / "whole.tgz", [("a", b"x" * 4096), ("b", b"y" * 4096)])
    damaged = tmp_path / "damaged.tgz"
    damaged.write_bytes(whole.read_bytes()[:40])
    with pytest.raises(ArchiveError, match="damaged.tgz"):  # not a bare EOFError
        read_all(damaged, lambda name: name)
