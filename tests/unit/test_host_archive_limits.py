"""What a hostile archive may cost while it is read, before its sha256 is known: memory,
inflation, and the files handed over to be staged (issue 26, defects 1 and 2)."""

import io
import os
import subprocess
import sys
import tarfile
import textwrap

import pytest

from aks_flex_node.host import ArchiveError
from aks_flex_node.host import archive as archive_mod
from aks_flex_node.host.archive import members
from tests.archive_fixtures import Counted, Zeros, tar_gz

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1 << 20


def bin_files(name):
    """containerd's selector: bin/<tool>."""
    return name[4:] if name.startswith("bin/") and "/" not in name[4:] else None


def read_all(data, wanted=bin_files, **limits):
    return [(m, d, len(c.read())) for m, d, c in members(io.BytesIO(data), wanted, "hostile.tgz", **limits)]


# A child that reads an archive with its address space capped at what it already maps plus
# HEADROOM: an allocation beyond that is a MemoryError, not a slow machine.
HEADROOM = 96 * MIB
CHILD = textwrap.dedent("""
    import resource, sys
    from aks_flex_node.host.archive import members
    with open("/proc/self/status") as f:
        mapped = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (mapped + int(sys.argv[2]), resource.RLIM_INFINITY))
    with open(sys.argv[1], "rb") as body:
        got = [(m, len(c.read())) for m, _, c in members(body, lambda n: n if n.startswith("bin/") else None, sys.argv[1])]
    print(got)
""")


def test_a_skipped_member_of_zeros_is_inflated_a_read_at_a_time(tmp_path):
    # Defect 1: tarfile's stream mode with a 1 MiB buffer inflated a whole buffer of input
    # at once; 256 KiB of gzip here is 256 MiB of zeros, more than the child may map.
    path = tmp_path / "containerd.tar.gz"
    path.write_bytes(tar_gz([("bin/containerd", b"c" * 5000), ("doc/zeros", Zeros(256 * MIB)),
                             ("bin/ctr", b"ctr")]))
    child = subprocess.run([sys.executable, "-c", CHILD, str(path), str(HEADROOM)], cwd=REPO,
                           env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "[('bin/containerd', 5000), ('bin/ctr', 3)]"


def test_an_archive_that_inflates_past_the_cap_is_refused_at_the_header(tmp_path):
    # A member declaring more than MAX_ARCHIVE_BYTES is refused as its header is read: the
    # body was read no further than that header's neighbourhood, nothing was inflated.
    data = tar_gz([("bin/containerd", b"c"), ("doc/zeros", Zeros(archive_mod.MAX_ARCHIVE_BYTES))])
    body = Counted(data)
    with pytest.raises(ArchiveError) as err:
        for _m, _d, content in members(io.BufferedReader(body), bin_files, "bomb.tgz"):
            content.read()
    assert err.value.code == "archive-too-large"
    assert "bomb.tgz" in err.value.message and "'doc/zeros'" in err.value.message
    assert body.offset < 1 * MIB, body.offset


def test_inflation_counts_skipped_members_and_headers(tmp_path):
    data = tar_gz([("doc/a", Zeros(3 * MIB)), ("doc/b", Zeros(3 * MIB)), ("bin/x", b"x")])
    assert read_all(data, max_archive_bytes=7 * MIB) == [("bin/x", "x", 1)]
    with pytest.raises(ArchiveError) as err:
        read_all(data, max_archive_bytes=5 * MIB)
    assert err.value.code == "archive-too-large" and "'doc/b'" in err.value.message


def test_too_many_members_are_refused(tmp_path):
    data = tar_gz([(f"doc/{i}", b"") for i in range(archive_mod.MAX_MEMBERS)] + [("bin/x", b"x")])
    with pytest.raises(ArchiveError) as err:
        read_all(data)
    assert err.value.code == "too-many-members"
    assert read_all(data, max_members=archive_mod.MAX_MEMBERS + 1) == [("bin/x", "x", 1)]


def test_too_many_files_taken_are_refused_before_the_one_over(tmp_path):
    # Defect 2: CNI takes any top-level name; the count of files staged is bounded.
    data = tar_gz([(f"plugin-{i}", b"p") for i in range(archive_mod.MAX_FILES + 1)])
    handed = []
    with pytest.raises(ArchiveError) as err:
        for name, _d, content in members(io.BytesIO(data), lambda n: n, "cni.tgz"):
            handed.append(name)
            content.read()
    assert err.value.code == "too-many-files"
    assert f"plugin-{archive_mod.MAX_FILES}" in err.value.message
    assert len(handed) == archive_mod.MAX_FILES


def test_the_bytes_taken_in_all_are_capped_on_the_header(tmp_path):
    # Defect 2: each member within the per-file cap, together over the total: the one that
    # would pass the total is refused on its header, before its bytes are handed over.
    data = tar_gz([("bin/a", b"a" * 1000), ("bin/b", Zeros(archive_mod.MAX_FILES_BYTES)), ("bin/c", b"c")])
    assert archive_mod.MAX_FILES_BYTES <= archive_mod.MAX_MEMBER_BYTES
    handed = []
    with pytest.raises(ArchiveError) as err:
        for name, _d, content in members(io.BytesIO(data), bin_files, "cni.tgz"):
            handed.append((name, len(content.read())))
    assert err.value.code == "files-too-large"
    assert "bin/b" in err.value.message and str(archive_mod.MAX_FILES_BYTES) in err.value.message
    assert handed == [("bin/a", 1000)]


def test_the_bytes_taken_are_capped_at_the_member_that_passes_the_total(tmp_path):
    data = tar_gz([("bin/a", b"a" * 600), ("bin/b", b"b" * 600)])
    with pytest.raises(ArchiveError) as err:
        read_all(data, max_files_bytes=1000)
    assert err.value.code == "files-too-large" and "bin/b" in err.value.message
    assert read_all(data, max_files_bytes=1200) == [("bin/a", "a", 600), ("bin/b", "b", 600)]


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE])
def test_an_extended_header_larger_than_the_cap_is_refused_before_it_is_read(kind):
    # tarfile reads a GNU long name or a pax header into memory whole (Lib/tarfile.py,
    # _proc_gnulong, _proc_pax): one of a GiB of zeros would be a GiB in memory.
    info = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "pax")
    info.type, info.size = kind, archive_mod.MAX_HEADER_BYTES + 1
    header = info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
    raw = header + bytes(info.size + (-info.size % 512)) + bytes(1024)
    body = Counted(raw)
    with pytest.raises(ArchiveError) as err:
        list(members(io.BufferedReader(body), bin_files, "header.tar"))
    assert err.value.code == "header-too-large" and "header.tar" in err.value.message
    assert body.offset < archive_mod.MAX_HEADER_BYTES, body.offset


def test_a_real_release_shape_fits_the_caps(tmp_path):
    # The shape of a kubernetes-node tarball (kubelet, kubeadm, kubectl: about 250 MB) and
    # of the CNI plugins' (about 25 files): all read, nothing refused.
    kube = tar_gz([("kubernetes/", tarfile.DIRTYPE, ""), ("kubernetes/node/bin/kubelet", Zeros(120 * MIB)),
                   ("kubernetes/node/bin/kubeadm", Zeros(70 * MIB)), ("kubernetes/node/bin/kubectl", Zeros(60 * MIB)),
                   ("kubernetes/LICENSES", Zeros(MIB))])
    got = read_all(kube, lambda n: n.rsplit("/", 1)[1] if "/bin/kube" in n else None)
    assert [d for _m, d, _n in got] == ["kubelet", "kubeadm", "kubectl"]
    cni = tar_gz([("./", tarfile.DIRTYPE, "")] + [(f"./plugin-{i}", Zeros(4 * MIB)) for i in range(25)])
    assert len(read_all(cni, lambda n: n)) == 25


@pytest.mark.parametrize("cut", [600, 4096, 30_000])
def test_a_truncated_archive_is_damaged_not_a_hang(cut):
    data = tar_gz([("bin/a", os.urandom(50_000)), ("bin/b", b"b")])
    with pytest.raises(ArchiveError) as err:
        read_all(data[:cut])
    assert err.value.code in ("damaged", "not-an-archive")
