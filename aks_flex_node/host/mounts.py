"""The mount table of this process, read from /proc/self/mountinfo.

The format is proc_pid_mountinfo(5) (man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html):

    36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    (1)(2) (3)   (4)   (5)    (6)      (7)   (8)  (9)    (10)        (11)

mount ID, parent ID, major:minor, root, mount point, mount options, zero or more optional
fields ended by "-", filesystem type, source, super options. The kernel writes a space,
tab, newline or backslash in a path as an octal escape (\\040, \\011, \\012, \\134: seq_file's
mangle set in fs/proc_namespace.c, torvalds/linux), so one line is one mount and fields
split on single spaces; every \\ooo is decoded here, not only \\040, or a directory named
"a b" or "a\\nb" would never match its mount.

The table is always this process's own (/proc/self), never the one under a Host's root:
mounts belong to the running kernel, and a root prefix is a directory on it.
Standard library only.
"""

import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

MOUNTINFO = "/proc/self/mountinfo"

# The kernel writes a byte as a backslash and three octal digits (\000 to \377).
_OCTAL_ESCAPE = re.compile(rb"\\([0-3][0-7]{2})")


class MountinfoError(ValueError):
    """A mountinfo line does not have the fields proc_pid_mountinfo(5) describes."""


@dataclass(frozen=True)
class Mount:
    mount_id: int
    parent_id: int
    point: str  # the real path, as this process sees it
    fstype: str
    source: str

    @property
    def depth(self):
        return len(PurePosixPath(self.point).parts)


def unescape(field):
    """A mountinfo field (bytes) with every \\ooo escape decoded, as a str that os functions
    turn back into the same bytes (os.fsdecode: undecodable bytes survive as surrogates)."""
    return os.fsdecode(_OCTAL_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), field))


def parse_line(line):
    fields = line.split(b" ")
    try:
        separator = fields.index(b"-", 6)  # the optional fields (7) end at "-"
        mount_id, parent_id = int(fields[0]), int(fields[1])
        fstype, source = fields[separator + 1], fields[separator + 2]
    except (ValueError, IndexError):
        raise MountinfoError(f"unexpected mountinfo line: {line!r}") from None
    return Mount(mount_id, parent_id, unescape(fields[4]), unescape(fstype), unescape(source))


def parse_mountinfo(data):
    """Every mount in mountinfo text `data` (bytes), in the kernel's order (parents first)."""
    return [parse_line(line) for line in data.split(b"\n") if line]


def read_mounts(path=MOUNTINFO):
    """The mounts listed in the mountinfo file at `path` (this process's by default).
    Raises OSError when it cannot be read, MountinfoError when a line is malformed."""
    with open(path, "rb") as f:
        return parse_mountinfo(f.read())


def is_at_or_below(point, top):
    """True when real path `point` is `top` or inside it, compared as path components
    (so /var/lib/kubelet2 is not inside /var/lib/kubelet)."""
    point_parts, top_parts = PurePosixPath(point).parts, PurePosixPath(top).parts
    return point_parts[:len(top_parts)] == top_parts


def mounts_below(mounts, top, include_self=True):
    """The mounts at (when `include_self`) or strictly below real path `top`."""
    return [m for m in mounts if is_at_or_below(m.point, top)
            and (include_self or PurePosixPath(m.point) != PurePosixPath(top))]


def unmount_order(mounts):
    """Children before their parents: deepest first, and of mounts stacked on one point
    the newest (highest mount ID, the one on top) first."""
    return sorted(mounts, key=lambda m: (m.depth, m.mount_id), reverse=True)
