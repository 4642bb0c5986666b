"""Reading chosen files out of a tar archive, safely, in one pass from front to back.

Nothing is extracted with tarfile's extract: the caller gets each chosen member's content
as a file object to copy where it decides (steps/artifacts.py stages it next to its
destination and renames it into place only once the archive's sha256 has matched). The
archive is read in tarfile's stream mode ('r|'), so it is read once, never seeked, and
can be read while it downloads: a member is handed over as soon as its bytes are there.

Like the upstream agent's extractor (no absolute paths, no `..`, regular files only, 1 GiB
per file: github.com/Azure/AKSFlexNode, pkg/utils/utilio/download.go at tag v0.0.10), an
archive with an absolute or `..` member name is refused, and a chosen member that is not a
regular file (a link, a device, a fifo) is an error rather than something to follow. Read
in one pass, such a member may come after chosen members were already handed over: the
caller keeps what it got aside until the whole archive has been read, and drops it on an
error (nothing of a refused archive is installed).

The bytes are not trusted yet while they are read (the sha256 is checked at the end), so
what they can cost is bounded here, before any of it is known good:
- memory: the archive is decompressed here, never more than a read's worth at a time
  (gzip, bz2 and lzma's readers ask the decompressor for at most the bytes wanted).
  tarfile's own stream decompression inflates each buffer of input whole: with a 1 MiB
  buffer, one buffer of gzipped zeros is about 1 GiB in memory, and tarfile copies the
  rest of it on every read (cpython Lib/tarfile.py, _Stream._read);
- inflation: the tar stream, skipped members, headers and padding included, may be at most
  MAX_ARCHIVE_BYTES; a header whose member would end beyond that is refused as it is read,
  before its bytes are inflated, and so is an archive of more than MAX_MEMBERS entries;
- what is staged: at most MAX_FILES chosen files and MAX_FILES_BYTES in all, each
  checked on its header, before its bytes are handed over;
- headers: a pax or GNU long-name header is read into memory whole by tarfile, so one of
  more than MAX_HEADER_BYTES is refused before it is read.
Real releases stay far below: a kubernetes-node tarball (dl.k8s.io, kubernetes-node-linux-
amd64.tar.gz) is about 400 MB of tar in a handful of entries, of which we stage three
binaries (about 250 MB); containerd's (bin/: 4 to 6 files, about 150 MB) and the CNI
plugins' (about 25 files, about 100 MB) are smaller.
"""

import bz2
import gzip
import lzma
import tarfile
import zlib

from aks_flex_node.errors import FlexNodeError

MAX_MEMBER_BYTES = 1 << 30
MAX_FILES_BYTES = 1 << 30
MAX_FILES = 100
MAX_ARCHIVE_BYTES = 4 << 30
MAX_MEMBERS = 10_000
MAX_HEADER_BYTES = 1 << 20
# What tarfile's stream mode asks for at a time (its default, 10 KiB, would take ten
# thousand reads for a 100 MB archive): a bound on the memory a read holds, too.
STREAM_BUFFER = 1 << 16
# Magic numbers of the compressions tarfile's 'r|*' knows (cpython Lib/tarfile.py,
# _StreamProxy.getcomptype), with the reader that decompresses each.
_COMPRESSIONS = (
    (b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),  # RFC 1952 section 2.3.1
    (b"BZh", lambda f: bz2.BZ2File(f, mode="rb")),
    (b"\xfd7zXZ\x00", lambda f: lzma.LZMAFile(f, mode="rb")),  # the .xz format's header magic
    (b"\x5d\x00\x00\x80", lambda f: lzma.LZMAFile(f, mode="rb")),  # legacy .lzma
)
_MAGIC_BYTES = max(len(magic) for magic, _ in _COMPRESSIONS)
# EOFError: cut in a block; LZMAError is no OSError.
_DAMAGE = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError)
# Headers tarfile reads whole into memory before the member they describe.
_META_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
               tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


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


class _Limits:
    """The bounds of one read, with what was counted against them."""

    def __init__(self, archive, max_member_bytes, max_files_bytes, max_files,
                 max_archive_bytes, max_members, max_header_bytes):
        self.archive = archive
        self.max_member_bytes, self.max_files_bytes, self.max_files = \
            max_member_bytes, max_files_bytes, max_files
        self.max_archive_bytes, self.max_members, self.max_header_bytes = \
            max_archive_bytes, max_members, max_header_bytes
        self.members = self.files = self.files_bytes = 0

    def tar_bytes(self, count):
        """`count` bytes of tar (inflated) were read: the backstop of the header check, for
        what no header declares (a sparse member's map, padding, trailing blocks)."""
        if count > self.max_archive_bytes:
            raise ArchiveError(
                f"archive {self.archive} inflates to more than {self.max_archive_bytes} "
                "bytes of tar", code="archive-too-large")

    def member(self, member, name):
        self.members += 1
        if self.members > self.max_members:
            raise ArchiveError(f"archive {self.archive} has more than {self.max_members} members",
                               code="too-many-members")
        end = member.offset_data + member.size
        if end > self.max_archive_bytes:
            raise ArchiveError(
                f"archive {self.archive} member {name!r} is {member.size} bytes and would "
                f"inflate the archive to {end} bytes of tar: expected at most "
                f"{self.max_archive_bytes}", code="archive-too-large")

    def chosen(self, member, name):
        if member.size > self.max_member_bytes:
            raise ArchiveError(
                f"archive {self.archive} member {name} is {member.size} bytes: "
                f"expected at most {self.max_member_bytes}",
                code="member-too-large",
            )
        self.files += 1
        if self.files > self.max_files:
            raise ArchiveError(
                f"archive {self.archive} member {name} would be file {self.files} taken from it: "
                f"expected at most {self.max_files}", code="too-many-files")
        self.files_bytes += member.size
        if self.files_bytes > self.max_files_bytes:
            raise ArchiveError(
                f"archive {self.archive} member {name} ({member.size} bytes) would bring the "
                f"files taken from it to {self.files_bytes} bytes: expected at most "
                f"{self.max_files_bytes}", code="files-too-large")


class _HeaderTooLarge(Exception):
    """Raised from inside tarfile's header parsing (its TarInfo class is ours), turned into
    an ArchiveError that names the archive by members()."""

    def __init__(self, kind, size):
        super().__init__(kind, size)
        self.kind, self.size = kind, size


def _header_class(max_header_bytes):
    class BoundedHeader(tarfile.TarInfo):
        # _proc_member is where tarfile (3.10 to 3.13) dispatches on a header's type, before
        # _proc_gnulong or _proc_pax read the extended header's data into memory whole.
        def _proc_member(self, tar):
            if self.type in _META_TYPES and self.size > max_header_bytes:
                raise _HeaderTooLarge(self.type, self.size)
            return super()._proc_member(tar)
    return BoundedHeader


class _Inflated:
    """The tar stream of `body`: `magic` (its first bytes, already read) then the rest,
    decompressed by `reader` when it is compressed; every byte read is counted against the
    limits."""

    def __init__(self, magic, body, limits):
        self._magic, self._body, self._limits = magic, body, limits
        self._reader = None
        for prefix, reader in _COMPRESSIONS:
            if magic.startswith(prefix):
                self._reader = reader(_Prefixed(magic, body))
                break
        # read1: what one read of the compressed input gives, no more; read() would read on
        # to fill the size and meet a cut archive's end before the member it cuts is asked for.
        self._read = self._reader.read1 if self._reader is not None else _Prefixed(magic, body).read
        self.count = 0

    def read(self, size=-1):
        if size is None or size < 0:
            size = STREAM_BUFFER  # tarfile asks for sizes; never for "all"
        data = self._read(size)
        self.count += len(data)
        self._limits.tar_bytes(self.count)
        return data

    def close(self):
        if self._reader is not None:
            self._reader.close()  # the body stays open: it is the caller's


class _Prefixed:
    """`prefix`, then what `body` reads."""

    def __init__(self, prefix, body):
        self._prefix, self._body = prefix, body

    def read(self, size=-1):
        if not self._prefix:
            return self._body.read(size)
        if size is None or size < 0:
            data, self._prefix = self._prefix + self._body.read(), b""
            return data
        data, self._prefix = self._prefix[:size], self._prefix[size:]
        return data


def _read_magic(body):
    magic = b""
    while len(magic) < _MAGIC_BYTES:
        chunk = body.read(_MAGIC_BYTES - len(magic))
        if not chunk:
            break
        magic += chunk
    return magic


def members(body, wanted, archive, max_member_bytes=MAX_MEMBER_BYTES,
            max_files_bytes=MAX_FILES_BYTES, max_files=MAX_FILES,
            max_archive_bytes=MAX_ARCHIVE_BYTES, max_members=MAX_MEMBERS,
            max_header_bytes=MAX_HEADER_BYTES):
    """Yield (member_name, dest_name, content) for each regular file `wanted` maps to a
    name, in the archive's order, reading `body` (a binary file object) once.

    `wanted(member_name)` returns the destination name relative to the target directory,
    or None to skip the member. Member names are normalised ("./x" -> "x"). `content` is
    a file object of the member's bytes, to be read before the next member is asked for.
    `archive` names the archive in messages. Every member, chosen or not, is checked as
    it comes, and so are the bounds (module docstring); the generator ends after the
    archive's last member.
    """
    limits = _Limits(archive, max_member_bytes, max_files_bytes, max_files,
                     max_archive_bytes, max_members, max_header_bytes)
    try:
        stream = _Inflated(_read_magic(body), body, limits)
    except _DAMAGE as e:
        raise ArchiveError(f"cannot read archive {archive}: {e}", code="not-an-archive") from e
    try:
        yield from _read(stream, wanted, archive, limits)
    finally:
        stream.close()


def _read(stream, wanted, archive, limits):
    try:
        tar = tarfile.open(fileobj=stream, mode="r|", bufsize=STREAM_BUFFER,
                           tarinfo=_header_class(limits.max_header_bytes))
    except ArchiveError:
        raise
    except _HeaderTooLarge as e:
        raise _header_error(archive, e, limits) from None
    except _DAMAGE as e:
        raise ArchiveError(f"cannot read archive {archive}: {e}", code="not-an-archive") from e
    with tar:
        try:
            for member in tar:
                name = _normal_name(member.name, archive)
                limits.member(member, name)
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
                limits.chosen(member, name)
                yield name, dest, _Content(tar.extractfile(member), f"archive {archive} member {name}")
        except ArchiveError:
            raise
        except _HeaderTooLarge as e:
            raise _header_error(archive, e, limits) from None
        except _DAMAGE as e:
            raise ArchiveError(f"archive {archive} is damaged: {e}", code="damaged") from e


def _header_error(archive, e, limits):
    return ArchiveError(
        f"archive {archive} has an extended header (type {e.kind!r}) of {e.size} bytes: "
        f"expected at most {limits.max_header_bytes}", code="header-too-large")


class _Content:
    """A member's bytes; damage met while reading them is an ArchiveError too."""

    def __init__(self, f, shown):
        self._f, self._shown = f, shown

    def read(self, size=-1):
        try:
            return self._f.read(size)
        except ArchiveError:
            raise
        except _DAMAGE as e:
            raise ArchiveError(f"{self._shown} is damaged: {e}", code="damaged") from e
