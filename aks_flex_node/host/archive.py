"""Reading chosen files out of a tar archive, safely.

Nothing is extracted with tarfile's extract: members are read into memory one at a time
for the caller to install with Host.write_file, so an unchanged binary is a no-op and
every install is atomic. Like the upstream agent's extractor (no absolute paths, no `..`,
regular files only, 1 GiB per file: github.com/Azure/AKSFlexNode,
pkg/utils/utilio/download.go at tag v0.0.10), an archive with an absolute or `..` member
name is refused outright, and a chosen member that is not a regular file (a link, a
device, a fifo) is an error rather than something to follow.
"""

import tarfile
import zlib

from aks_flex_node.errors import FlexNodeError

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


def _chosen(archive_path, wanted, max_member_bytes, read):
    """Yield (member_name, dest_name, data or None) for each member `wanted` maps to a
    name, checked as read_members says; the data is read only when `read`."""
    try:
        tar = tarfile.open(archive_path, "r:*")
    except FileNotFoundError:
        raise ArchiveError(f"archive {archive_path} does not exist") from None
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:  # EOFError: cut in its first block
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
                yield name, dest, (tar.extractfile(member).read() if read else None)
        except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
            raise ArchiveError(f"archive {archive_path} is damaged: {e}") from e


def read_members(archive_path, wanted, max_member_bytes=MAX_MEMBER_BYTES):
    """Yield (member_name, dest_name, data) for each regular file `wanted` maps to a name.

    `wanted(member_name)` returns the destination name relative to the target directory,
    or None to skip the member. Member names are normalised ("./x" -> "x").
    """
    yield from _chosen(archive_path, wanted, max_member_bytes, read=True)


def list_members(archive_path, wanted, max_member_bytes=MAX_MEMBER_BYTES):
    """[(member_name, dest_name)] that read_members would yield, with the same checks, read
    through the whole archive (so a damaged one fails here) without keeping any content:
    what an install will write, known before it writes anything."""
    return [(name, dest) for name, dest, _ in _chosen(archive_path, wanted, max_member_bytes, read=False)]
