"""Reading chosen files out of a tar archive, safely, in one pass from front to back.

Nothing is extracted with tarfile's extract: the caller gets each chosen member's content
as a file object to copy where it decides (steps/artifacts.py stages it next to its
destination and renames it into place only once the archive's sha256 has matched). The
archive is read in tarfile's stream mode ('r|*'), so it is read once, never seeked, and
can be read while it downloads: a member is handed over as soon as its bytes are there.

Like the upstream agent's extractor (no absolute paths, no `..`, regular files only, 1 GiB
per file: github.com/Azure/AKSFlexNode, pkg/utils/utilio/download.go at tag v0.0.10), an
archive with an absolute or `..` member name is refused, and a chosen member that is not a
regular file (a link, a device, a fifo) is an error rather than something to follow. Read
in one pass, such a member may come after chosen members were already handed over: the
caller keeps what it got aside until the whole archive has been read, and drops it on an
error (nothing of a refused archive is installed).
"""

import tarfile
import zlib

from aks_flex_node.errors import FlexNodeError

MAX_MEMBER_BYTES = 1 << 30
# What tarfile's stream mode reads at a time (its default is 10 KiB: a 100 MB archive
# would take ten thousand reads).
STREAM_BUFFER = 1 << 20
_DAMAGE = (tarfile.TarError, EOFError, zlib.error, OSError)  # EOFError: cut in a block


class ArchiveError(FlexNodeError):
    code = "archive"


def _normal_name(raw, archive):
    if raw.startswith("/"):
        raise ArchiveError(f"archive {archive} has a member with an absolute path: {raw!r}",
                           code="member-absolute")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"archive {archive} has a member that climbs out with '..': {raw!r}",
                           code="member-climbs-out")
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


def members(body, wanted, archive, max_member_bytes=MAX_MEMBER_BYTES):
    """Yield (member_name, dest_name, content) for each regular file `wanted` maps to a
    name, in the archive's order, reading `body` (a binary file object) once.

    `wanted(member_name)` returns the destination name relative to the target directory,
    or None to skip the member. Member names are normalised ("./x" -> "x"). `content` is
    a file object of the member's bytes, to be read before the next member is asked for.
    `archive` names the archive in messages. Every member, chosen or not, is checked as
    it comes; the generator ends after the archive's last member.
    """
    try:
        tar = tarfile.open(fileobj=body, mode="r|*", bufsize=STREAM_BUFFER)
    except _DAMAGE as e:
        raise ArchiveError(f"cannot read archive {archive}: {e}", code="not-an-archive") from e
    with tar:
        try:
            for member in tar:
                name = _normal_name(member.name, archive)
                if member.isdir() or not name:
                    continue
                dest = wanted(name)
                if dest is None:
                    continue
                dest = _check_dest(dest, name, archive)
                if not member.isreg():
                    raise ArchiveError(
                        f"archive {archive} member {name} is a {_kind(member)}: "
                        "expected a regular file",
                        code="member-not-regular",
                    )
                if member.size > max_member_bytes:
                    raise ArchiveError(
                        f"archive {archive} member {name} is {member.size} bytes: "
                        f"expected at most {max_member_bytes}",
                        code="member-too-large",
                    )
                yield name, dest, _Content(tar.extractfile(member), f"archive {archive} member {name}")
        except _DAMAGE as e:
            raise ArchiveError(f"archive {archive} is damaged: {e}", code="damaged") from e


class _Content:
    """A member's bytes; damage met while reading them is an ArchiveError too."""

    def __init__(self, f, shown):
        self._f, self._shown = f, shown

    def read(self, size=-1):
        try:
            return self._f.read(size)
        except _DAMAGE as e:
            raise ArchiveError(f"{self._shown} is damaged: {e}", code="damaged") from e
