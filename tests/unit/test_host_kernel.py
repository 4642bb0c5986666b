"""Kernel: /proc files under a temp root, modprobe/sysctl/swapoff stand-ins, fstab editing."""

import os
import re

import pytest

from aks_flex_node.host import HOST_BIN_ENV, CommandError, Host, comment_out_swap
from aks_flex_node.host.kernel import Unknown

RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$CALLS"\n'


@pytest.fixture
def node(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("modprobe", "sysctl", "swapoff"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    host = Host(root=tmp_path / "root", env={
        "PATH": "/usr/bin:/bin", HOST_BIN_ENV: str(bin_dir), "CALLS": str(calls)})
    host.calls = lambda: calls.read_text().splitlines()
    host.bin_dir = bin_dir
    return host


def test_commands_go_to_the_live_system_tools(node):
    node.kernel.load_module("br_netfilter")
    node.kernel.apply_sysctl()
    node.kernel.swapoff()
    assert node.calls() == ["modprobe br_netfilter", "sysctl --system", "swapoff -a"]


@pytest.mark.parametrize("bad", ["", "-r", "br netfilter", "../overlay", None])
def test_bad_module_names_are_rejected_before_running(node, bad):
    with pytest.raises(ValueError, match=re.escape(f"module name = {bad!r}")):
        node.kernel.load_module(bad)
    assert node.calls() == []


def test_modprobe_failure_is_an_error(node):
    (node.bin_dir / "modprobe").write_text(
        "#!/bin/sh\necho \"modprobe: FATAL: Module $1 not found\" >&2\nexit 1\n")
    with pytest.raises(CommandError, match="FATAL: Module nosuch not found"):
        node.kernel.load_module("nosuch")


def test_loaded_modules_reads_proc_modules_under_the_root(node):
    node.write_file("/proc/modules", (
        b"br_netfilter 32768 0 - Live 0x0000000000000000\n"
        b"bridge 307200 1 br_netfilter, Live 0x0000000000000000\n"
        b"overlay 151552 0 - Live 0x0000000000000000\n"))
    assert node.kernel.loaded_modules() == {"br_netfilter", "bridge", "overlay"}
    assert node.kernel.module_loaded("br-netfilter") is True
    assert node.kernel.module_loaded("nf_conntrack") is False


def test_no_proc_modules_is_unknown_not_unloaded(node):
    """Issue 9, defect 9: with no /proc/modules every module read as "not loaded", so the
    agent loaded br_netfilter and reported a repair once a minute for good."""
    loaded = node.kernel.module_loaded("br_netfilter")
    assert isinstance(loaded, Unknown)
    # both places looked at, neither there
    assert "/proc/modules" in loaded.reason and "/sys/module/br_netfilter" in loaded.reason
    assert isinstance(node.kernel.loaded_modules(), Unknown)
    with pytest.raises(TypeError, match=re.escape(loaded.reason)):  # and why it is unknown
        bool(loaded)  # no caller can take it for "not loaded"
    # An empty /proc/modules is known: nothing loadable is loaded (all built in).
    node.write_file("/proc/modules", b"")
    assert node.kernel.loaded_modules() == set()
    assert node.kernel.module_loaded("br_netfilter") is False


def test_a_module_seen_in_sys_module_or_modules_builtin_is_loaded(node):
    node.ensure_dir("/sys/module/overlay")
    assert node.kernel.module_loaded("overlay") is True  # no /proc/modules needed
    release = os.uname().release
    node.ensure_dir(f"/lib/modules/{release}")
    node.write_file(f"/lib/modules/{release}/modules.builtin",
                    b"kernel/net/bridge/br_netfilter.ko\nkernel/fs/fuse/fuse.ko\n")
    node.write_file("/proc/modules", b"ext4 999424 1 - Live 0x0000000000000000\n")
    assert node.kernel.module_loaded("br_netfilter") is True  # built in: no /sys/module entry
    assert node.kernel.module_loaded("ip_vs") is False


def test_sysctl_reads_proc_sys_or_says_why_it_cannot(node):
    image = node.kernel.sysctl("net.ipv4.ip_forward")
    assert isinstance(image, Unknown) and image.reason.startswith("/proc/sys is absent")
    node.write_file("/proc/sys/net/ipv4/ip_forward", b"1\n")
    assert node.kernel.sysctl("net.ipv4.ip_forward") == "1"
    missing = node.kernel.sysctl("net.bridge.bridge-nf-call-iptables")
    assert isinstance(missing, Unknown)
    assert missing.reason.startswith("/proc/sys/net/bridge/bridge-nf-call-iptables does not exist")
    with pytest.raises(ValueError, match=re.escape("sysctl key = '../x'")):
        node.kernel.sysctl("../x")


@pytest.mark.parametrize("content, on", [
    (None, None),
    (b"Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n", False),
    (b"Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\n", False),
    (b"Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
     b"/swap.img                               file\t\t4194300\t\t0\t\t-2\n", True),
])
def test_swap_reads_proc_swaps(node, content, on):
    if content is not None:
        node.write_file("/proc/swaps", content)
    state = node.kernel.swap_on()
    if on is None:
        assert isinstance(state, Unknown) and "/proc/swaps" in state.reason
    else:
        assert state is on


UBUNTU_FSTAB = """\
# /etc/fstab: static file system information.
#
# <file system> <mount point>   <type>  <options>       <dump>  <pass>
/dev/disk/by-uuid/0b5e0c6f-1c8a-4b3e-a7a1-7ce8a0b2e5c1 / ext4 defaults 0 1
/swap.img\tnone\tswap\tsw\t0\t0
"""


def test_comment_out_swap_on_an_ubuntu_fstab():
    new, changed = comment_out_swap(UBUNTU_FSTAB)
    assert changed == ["/swap.img\tnone\tswap\tsw\t0\t0"]
    assert new == UBUNTU_FSTAB.replace("/swap.img", "#/swap.img")
    assert comment_out_swap(new) == (new, [])  # idempotent


@pytest.mark.parametrize("fstab, expected_new, expected_changed", [
    # Several swap entries, UUID and LABEL forms, leading whitespace.
    ("UUID=a / ext4 defaults 0 1\nUUID=b none swap sw 0 0\n  LABEL=sw none swap defaults 0 0\n",
     "UUID=a / ext4 defaults 0 1\n#UUID=b none swap sw 0 0\n#  LABEL=sw none swap defaults 0 0\n",
     ["UUID=b none swap sw 0 0", "  LABEL=sw none swap defaults 0 0"]),
    # Already commented swap (with or without a space) stays as it is.
    ("# /swapfile none swap sw 0 0\n#/dev/sda2 none swap sw 0 0\n",
     "# /swapfile none swap sw 0 0\n#/dev/sda2 none swap sw 0 0\n", []),
    # "swap" elsewhere than the type field is not a swap entry.
    ("/dev/sdb1 /swap ext4 defaults 0 2\nswap /mnt/x xfs sw 0 0\n",
     "/dev/sdb1 /swap ext4 defaults 0 2\nswap /mnt/x xfs sw 0 0\n", []),
    # CRLF line ends, no final newline, a three-field entry.
    ("/a / ext4 d 0 1\r\n/dev/zram0 none swap\r\n/swapfile none swap sw",
     "/a / ext4 d 0 1\r\n#/dev/zram0 none swap\r\n#/swapfile none swap sw",
     ["/dev/zram0 none swap", "/swapfile none swap sw"]),
    # Blank lines, a form feed kept byte for byte, an empty file.
    ("\n\n/x / ext4 d 0 1\x0c\n\n", "\n\n/x / ext4 d 0 1\x0c\n\n", []),
    ("", "", []),
    # Mixed case is not "swap" for the kernel either (fstab types are case-sensitive).
    ("/s none SWAP sw 0 0\n", "/s none SWAP sw 0 0\n", []),
])
def test_comment_out_swap_shapes(fstab, expected_new, expected_changed):
    new, changed = comment_out_swap(fstab)
    assert new == expected_new
    assert changed == expected_changed
    assert comment_out_swap(new)[1] == []
    # Everything else is untouched: dropping the added "#"s restores the original.
    restored = "\n".join(line[1:] if line.rstrip("\r") in {"#" + c for c in changed} else line
                         for line in new.split("\n"))
    assert restored == fstab


def test_comment_out_swap_wants_text():
    with pytest.raises(TypeError, match=r"^fstab_text\b.*\bbytes\b"):  # the argument and the type given
        comment_out_swap(b"/swap none swap sw 0 0\n")
