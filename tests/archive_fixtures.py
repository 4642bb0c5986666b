"""Hostile release archives, built in a test in milliseconds: tar.gz streams written by
hand so a member of gigabytes of zeros costs a few kilobytes of deflate and no time.

A deflate stream flushed with Z_FULL_FLUSH forgets its history, so the compressed form of
one MiB of zeros is the same every time and may be repeated (zlib.h, deflate() and
Z_FULL_FLUSH; RFC 1951 section 3.2.4): a member of N MiB of zeros is that block N times.
The gzip trailer's CRC-32 and size are the real ones (RFC 1952 section 2.3.1), so the
archive is a valid one to its end.
"""

import io
import struct
import tarfile
import zlib

_MIB = 1 << 20
_ZEROS = bytes(_MIB)


class Counted(io.RawIOBase):
    """A body (a download, read as it arrives) that counts in `offset` what was read of it."""

    def __init__(self, data):
        self.data, self.offset = data, 0

    def readable(self):
        return True

    def readinto(self, buffer):
        chunk = self.data[self.offset:self.offset + len(buffer)]
        buffer[:len(chunk)] = chunk
        self.offset += len(chunk)
        return len(chunk)


class Zeros:
    """A member's content: `size` zero bytes."""

    def __init__(self, size):
        self.size = size


class _Gzip:
    def __init__(self):
        self._deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        self.parts = [b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"]  # RFC 1952: no name, mtime 0
        self.crc, self.size = 0, 0
        self._zero_block = None

    def write(self, data):
        self.parts.append(self._deflate.compress(data))
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)

    def zeros(self, count):
        whole, rest = divmod(count, _MIB)
        if whole:
            self.parts.append(self._deflate.flush(zlib.Z_FULL_FLUSH))
            if self._zero_block is None:
                self._zero_block = self._deflate.compress(_ZEROS) + self._deflate.flush(zlib.Z_FULL_FLUSH)
            self.parts.append(self._zero_block * whole)
            for _ in range(whole):
                self.crc = zlib.crc32(_ZEROS, self.crc)
            self.size += whole * _MIB
        if rest:
            self.write(bytes(rest))

    def close(self):
        self.parts.append(self._deflate.flush())
        self.parts.append(struct.pack("<II", self.crc & 0xFFFFFFFF, self.size & 0xFFFFFFFF))
        return b"".join(self.parts)


def tar_gz(entries):
    """The bytes of a tar.gz of `entries`: (name, bytes or Zeros) for regular files, or
    (name, tarfile type, linkname) for the rest. GNU format, so long names are allowed."""
    gz = _Gzip()
    for entry in entries:
        info = tarfile.TarInfo(entry[0])
        info.mode, info.mtime = 0o755, 1700000000
        content = None
        if len(entry) == 2:
            content = entry[1]
            info.size = content.size if isinstance(content, Zeros) else len(content)
        else:
            info.type, info.linkname = entry[1], entry[2]
        gz.write(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))
        if content is None:
            continue
        if isinstance(content, Zeros):
            gz.zeros(content.size)
        else:
            gz.write(content)
        pad = -info.size % tarfile.BLOCKSIZE
        if pad:
            gz.write(bytes(pad))
    gz.write(bytes(2 * tarfile.BLOCKSIZE))  # the end-of-archive marker
    return gz.close()


def read_back(data):
    """(name, size) of every member, as tarfile reads them: a check of the fixture itself."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return [(m.name, m.size) for m in tar]
