"""Installing chosen files out of a tar archive, safely.

Nothing is extracted with tarfile's extract: members are read into memory one at a time
and installed with Host.write_file, so an unchanged binary is a no-op and every install
is atomic. Like the upstream agent's extractor (upstream-go-agent.md §3: "no absolute
paths, no `..`, regular files only, 1 GiB per-file cap"), an archive with an absolute or
`..` member name is refused outright, and a chosen member that is not a regular file
(a link, a device, a fifo) is an error rather than something to follow.
"""

import logging
import posixpath
import tarfile
import zlib

from aks_flex_node.errors import FlexNodeError

log = logging.getLogger(__name__)

MAX_MEMBER_BYTES = 1 << 30


class ArchiveError(FlexNodeError):
    code = "archive"


def _normal_name(raw, archive):
    if raw.startswith("/"):
        raise ArchiveError(f"archive {archive} has a member with an absolute path: {raw!r}")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"archive {archive} has a member that climbs out with '..': {raw!r}")
    return "/".join(parts)


def _check_dest(dest, member, archive):
    if not isinstance(dest, str) or not dest or dest.startswith("/") \
            or any(p in ("", ".", "..") for p in dest.split("/")):
        raise ValueError(
            f"destination for {member} in {archive} = {dest!r}: expected a relative file "
            "name without '.' or '..' parts"
        )
    return dest


def _kind(member):
    if member.issym():
        return f"symlink to {member.linkname!r}"
    if member.islnk():
        return f"hard link to {member.linkname!r}"
    if member.ischr() or member.isblk():
        return "device"
    if member.isfifo():
        return "fifo"
    return "special file"


def members_under(prefix):
    """A selector taking every file below `prefix` ("kubernetes/node/bin/"), named by the
    rest of its path ("kubelet"). An empty prefix takes every file."""
    prefix = _normal_name(prefix, "<selector>")
    start = prefix + "/" if prefix else ""

    def wanted(name):
        if name.startswith(start) and len(name) > len(start):
            return name[len(start):]
        return None

    return wanted


def read_members(archive_path, wanted, max_member_bytes=MAX_MEMBER_BYTES):
    """Yield (member_name, dest_name, data) for each regular file `wanted` maps to a name.

    `wanted(member_name)` returns the destination name relative to the target directory,
    or None to skip the member. Member names are normalised ("./x" -> "x").
    """
    try:
        tar = tarfile.open(archive_path, "r:*")
    except FileNotFoundError:
        raise ArchiveError(f"archive {archive_path} does not exist") from None
    except (tarfile.TarError, OSError) as e:
        raise ArchiveError(f"cannot read archive {archive_path}: {e}") from e
    with tar:
        try:
            for member in tar:
                name = _normal_name(member.name, archive_path)
                if member.isdir() or not name:
                    continue
                dest = wanted(name)
                if dest is None:
                    continue
                dest = _check_dest(dest, name, archive_path)
                if not member.isreg():
                    raise ArchiveError(
                        f"archive {archive_path} member {name} is a {_kind(member)}: "
                        "expected a regular file"
                    )
                if member.size > max_member_bytes:
                    raise ArchiveError(
                        f"archive {archive_path} member {name} is {member.size} bytes: "
                        f"expected at most {max_member_bytes}"
                    )
                data = tar.extractfile(member).read()
                yield name, dest, data
        except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
            raise ArchiveError(f"archive {archive_path} is damaged: {e}") from e


def install_members(host, archive_path, members, dest_dir, mode=0o755):
    """Install files from a tar archive into `dest_dir` (a node path).

    `members` is a dict {member name: destination name} (every one must be present) or
    a selector function (see members_under). Returns {node path: what changed} with
    write_file's answers: None for a file that was already installed and identical.
    """
    if isinstance(members, dict):
        mapping = {_normal_name(k, "<members>"): v for k, v in members.items()}
        wanted, required = mapping.get, set(mapping)
    elif callable(members):
        wanted, required = members, set()
    else:
        raise TypeError(
            f"members = {members!r}: expected a dict of member -> file name, or a selector "
            "such as members_under('kubernetes/node/bin/')"
        )
    changes = {}
    found = set()
    for name, dest, data in read_members(archive_path, wanted):
        node_path = posixpath.join(dest_dir, dest)
        changes[node_path] = host.write_file(node_path, data, mode)
        found.add(name)
        if changes[node_path]:
            log.info("installed %s from %s (%s)", node_path, posixpath.basename(str(archive_path)),
                     changes[node_path])
    missing = sorted(required - found)
    if missing:
        raise ArchiveError(f"archive {archive_path} lacks {', '.join(missing)}")
    return changes
