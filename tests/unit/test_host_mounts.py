"""Mounts: the mountinfo parser, and removing trees with real mounts under a temp root.

The tests with real mounts need root with CAP_SYS_ADMIN (they skip, saying so, where
mounting is not permitted). Every mount a test makes is lazily unmounted when it ends,
whatever happened, so a failing test never leaves a mount behind.
"""

import os
import re
import subprocess

import pytest

from aks_flex_node.host import HOST_BIN_ENV, Host, HostFileError, tree
from aks_flex_node.host.mounts import (Mount, MountinfoError, mounts_below, parse_mountinfo,
                                       read_mounts, unmount_order)

PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
KUBELET = "/var/lib/kubelet"
VOLUMES = KUBELET + "/pods/p1/volumes"
# Directory names the kernel escapes in mountinfo (\040 and \012).
SPACED, NEWLINED = "with space", "new\nline"


def _mount_command(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                          env={"PATH": PATH, "LANG": "C.UTF-8"})


@pytest.fixture
def mount(tmp_path):
    """mount(*options, target): mount(8) onto real directory `target` (made if missing)."""
    made = []

    def do_mount(*options, target):
        os.makedirs(target, exist_ok=True)
        out = _mount_command(["mount", *options, os.fspath(target)])
        if out.returncode != 0:
            if not made and ("permission denied" in out.stderr.lower()
                             or "must be superuser" in out.stderr.lower()):
                pytest.skip(f"mounting is not permitted here (needs root): {out.stderr.strip()}")
            raise AssertionError(f"mount {options} {target!r} failed: {out.stderr}")
        made.append(os.fspath(target))

    try:
        yield do_mount
    finally:
        for target in reversed(made):
            _mount_command(["umount", "-l", target])


@pytest.fixture
def stand_ins(tmp_path):
    """The AKS_FLEX_NODE_HOST_BIN directory: empty, so the real umount runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return bin_dir


@pytest.fixture
def host(tmp_path, stand_ins):
    root = tmp_path / "root"
    root.mkdir()
    return Host(root=root, env={"PATH": PATH, HOST_BIN_ENV: str(stand_ins)})


@pytest.fixture
def pods(host, mount, tmp_path):
    """A kubelet directory with pod volumes still mounted, as a failed unmount leaves it:
    a tmpfs holding a file (with a second tmpfs stacked on it), a bind mount of a directory
    outside the root, and mount points named with a space and a newline."""
    host.write_file(KUBELET + "/config.yaml", b"kind: KubeletConfiguration\n")
    host.write_file(KUBELET + "/pods/p1/etc-hosts", b"127.0.0.1 localhost\n")
    mount("-t", "tmpfs", "tmpfs", target=host.path(VOLUMES + "/v"))
    host.path(VOLUMES + "/v/token").write_bytes(b"secret")
    mount("-t", "tmpfs", "tmpfs", target=host.path(VOLUMES + "/stacked"))
    mount("-t", "tmpfs", "tmpfs", target=host.path(VOLUMES + "/stacked"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "keep").write_bytes(b"volume data")
    mount("--bind", str(data), target=host.path(VOLUMES + "/b"))
    mount("-t", "tmpfs", "tmpfs", target=host.path(f"{VOLUMES}/{SPACED}"))
    mount("-t", "tmpfs", "tmpfs", target=host.path(f"{VOLUMES}/{NEWLINED}"))
    return data


def write_umount(stand_ins, script):
    umount = stand_ins / "umount"
    umount.write_text("#!/bin/sh\n" + script)
    umount.chmod(0o755)


# ---- the parser ----------------------------------------------------------------------

MOUNTINFO = b"""\
36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
100 36 0:50 / /pods/p1/volumes/with\\040space rw,relatime shared:7 master:2 - tmpfs tmpfs rw
101 36 0:51 / /tmp/tab\\011here rw - tmpfs my\\040source rw
102 36 0:52 / /tmp/new\\012line rw - tmpfs tmpfs rw
103 36 8:1 /sub /tmp/back\\134slash rw shared:9 - ext4 /dev/sda1 rw
104 36 0:53 / /tmp/not\\134040a\\040space rw - tmpfs tmpfs rw
105 36 0:54 / /tmp/latin1-\\377 rw - tmpfs tmpfs rw
"""


def test_every_field_and_escape_is_decoded():
    table = parse_mountinfo(MOUNTINFO)
    assert table[0] == Mount(36, 35, "/mnt2", "ext3", "/dev/root")
    assert [m.point for m in table[1:5]] == [
        "/pods/p1/volumes/with space", "/tmp/tab\there", "/tmp/new\nline",
        "/tmp/back\\slash"]
    assert table[2].source == "my source"
    assert table[1].fstype == "tmpfs" and table[4].fstype == "ext4"  # after optional fields
    # One pass: an escaped backslash followed by "040" is a backslash and "040".
    assert table[5].point == "/tmp/not\\040a space"
    # A byte that is not UTF-8 comes back to the same bytes for the os functions.
    assert os.fsencode(table[6].point) == b"/tmp/latin1-\xff"


@pytest.mark.parametrize("line", [b"36 35 98:0 / /mnt rw", b"x 35 98:0 / /mnt rw - ext4 /dev/a rw",
                                  b"36 35 98:0 / /mnt rw - ext4"])
def test_a_malformed_line_is_an_error(line):
    with pytest.raises(MountinfoError, match=re.escape(repr(line))):  # the line refused
        parse_mountinfo(line + b"\n")


def test_mountinfo_from_a_file(tmp_path):
    text = tmp_path / "mountinfo"
    text.write_bytes(MOUNTINFO)
    assert read_mounts(text) == parse_mountinfo(MOUNTINFO)
    assert any(m.point == "/" for m in read_mounts())  # this process's own table


def test_below_compares_path_components_and_orders_children_first():
    table = [Mount(1, 0, "/", "ext4", "/dev/a"), Mount(2, 1, "/var/lib/kubelet", "ext4", "/dev/b"),
             Mount(3, 2, "/var/lib/kubelet/pods/p/v", "tmpfs", "tmpfs"),
             Mount(9, 3, "/var/lib/kubelet/pods/p/v", "tmpfs", "tmpfs"),
             Mount(4, 1, "/var/lib/kubelet2", "tmpfs", "tmpfs"),
             Mount(5, 2, "/var/lib/kubelet/pods", "tmpfs", "tmpfs")]
    below = mounts_below(table, "/var/lib/kubelet/", include_self=False)
    assert [m.mount_id for m in below] == [3, 9, 5]
    assert [m.mount_id for m in mounts_below(table, "/var/lib/kubelet")] == [2, 3, 9, 5]
    # Deepest first; of two mounts on one point the newer (on top) first.
    assert [m.mount_id for m in unmount_order(below)] == [9, 3, 5]


# ---- removing trees with real mounts -------------------------------------------------


def test_mounts_below_finds_real_mounts_by_their_decoded_names(host, pods):
    points = sorted(m.point for m in host.mounts_below(VOLUMES, include_self=False))
    assert points == sorted(str(host.path(f"{VOLUMES}/{name}"))
                            for name in ("v", "stacked", "stacked", "b", SPACED, NEWLINED))


def test_remove_tree_unmounts_then_removes(host, pods, mount):
    mount("-t", "tmpfs", "tmpfs", target=host.path("/var/lib/kubelet2"))  # a neighbour
    assert host.remove_tree(KUBELET) == []
    assert not host.exists(KUBELET) and host.is_dir("/var/lib")
    assert host.mounts_below(KUBELET) == []
    assert (pods / "keep").read_bytes() == b"volume data"  # unmounted, not emptied
    assert len(host.mounts_below("/var/lib/kubelet2")) == 1


def test_a_failing_umount_leaves_the_whole_tree_and_names_each_mount(host, pods, stand_ins):
    write_umount(stand_ins, 'echo "umount: $1: target is busy." >&2\nexit 32\n')
    leftovers = host.remove_tree(KUBELET)
    assert len(leftovers) == 6
    assert any(line.startswith(f"{VOLUMES}/v is still mounted (tmpfs tmpfs): ")
               and "target is busy" in line for line in leftovers)
    assert any(line.startswith(f"{VOLUMES}/{NEWLINED} is still mounted") for line in leftovers)
    assert host.read_bytes(VOLUMES + "/v/token") == b"secret"
    assert host.read_bytes(KUBELET + "/config.yaml") is not None  # nothing removed at all
    assert (pods / "keep").read_bytes() == b"volume data"


def test_an_umount_that_exits_0_but_unmounts_nothing_is_still_reported(host, pods, stand_ins):
    write_umount(stand_ins, "exit 0\n")
    leftovers = host.remove_tree(KUBELET)
    assert [v for v in leftovers if v.startswith(f"{VOLUMES}/b ")]  # the mount left, by its path
    assert host.read_bytes(VOLUMES + "/v/token") == b"secret"


def test_under_a_root_prefix_without_stand_ins_nothing_is_unmounted_or_removed(host, pods):
    image = Host(root=host.root, env={"PATH": PATH})
    leftovers = image.remove_tree(KUBELET)
    # the mount left, by its path and what it is
    assert any(v.startswith(f"{VOLUMES}/v ") and "(tmpfs tmpfs)" in v for v in leftovers)
    assert os.path.ismount(image.path(VOLUMES + "/v"))
    assert image.read_bytes(VOLUMES + "/v/token") == b"secret"


def test_a_mount_point_itself_is_left_and_reported(host, mount):
    mount("-t", "tmpfs", "tmpfs", target=host.path(KUBELET))
    host.write_file(KUBELET + "/config.yaml", b"x")
    assert host.remove_tree(KUBELET) == [f"{KUBELET} is a mount point (tmpfs tmpfs): not removed"]
    assert host.read_bytes(KUBELET + "/config.yaml") == b"x"
    assert len(host.mounts_below(KUBELET)) == 1
    host.remove(KUBELET + "/config.yaml")
    with pytest.raises(HostFileError) as err:
        host.remove(KUBELET)  # an empty mount point
    # the path, and the system's reason
    assert str(host.path(KUBELET)) in err.value.message and "Device or resource busy" in err.value.message


def test_remove_refuses_a_directory_with_content_and_touches_nothing(host, pods):
    with pytest.raises(HostFileError) as err:
        host.remove(KUBELET)
    assert err.value.code == "directory-not-empty" and str(host.path(KUBELET)) in err.value.message
    assert host.read_bytes(VOLUMES + "/v/token") == b"secret"
    assert host.read_bytes(KUBELET + "/config.yaml") is not None


def test_the_walker_never_enters_another_mount(host, pods):
    # As if the volumes were mounted after the mount table was read: the walk itself
    # stops at each of them, the bind mount of the same filesystem (same st_dev) included.
    leftovers = tree.remove_tree(host.path(KUBELET), shown=KUBELET)
    assert sorted(leftovers) == sorted(
        f"{VOLUMES}/{name} is on another mount: not entered, not removed"
        for name in ("v", "stacked", "b", SPACED, NEWLINED))
    assert host.read_bytes(VOLUMES + "/v/token") == b"secret"
    assert (pods / "keep").read_bytes() == b"volume data"
    assert not host.exists(KUBELET + "/config.yaml")  # what was not mounted is gone
    assert not host.exists(KUBELET + "/pods/p1/etc-hosts")
    assert host.is_dir(VOLUMES)  # ancestors of what stays, stay
