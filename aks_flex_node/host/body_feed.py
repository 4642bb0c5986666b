"""A sink reading a download while it arrives (Downloader.fetch_into).

A caller that unpacks what it downloads reads the body while it arrives: its sink runs in
a thread of its own over the part file (part_file.py) as it grows, so an archive is
extracted while it downloads and never read a second time. A resumed download goes on
feeding the same read; one that starts over tells the sink to drop what it made and read
again from the first byte; a body that does not match its sha256 is never read to its end
(the sink is told to drop everything).
"""

import io
import os
import threading

# What the sink's reads are buffered by: as much as the Downloader appends at once.
_BUFFER = 1 << 20


class _StartedOver(Exception):
    """The body a sink was reading was thrown away: the download started over."""


class _Abandoned(Exception):
    """The fetch failed or did not match its sha256: nothing it sent is of use."""


class _Body(io.RawIOBase):
    """The bytes of a part file for a sink to read while they are written: a read waits
    for more until the fetch ends, and ends (b"") once the whole body has verified."""

    def __init__(self, part, generation):
        self._fd = None  # first: close() runs even when the open below fails
        super().__init__()
        self._part = part
        self.generation = generation
        self._fd = os.open(part.path, os.O_RDONLY | os.O_CLOEXEC)
        self._offset = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        part = self._part
        with part.changed:
            part.changed.wait_for(lambda: part.generation != self.generation
                                  or part.size > self._offset or part.outcome is not None)
            if part.generation != self.generation:
                raise _StartedOver()
            if part.outcome not in (None, "verified"):
                raise _Abandoned()
            if part.size <= self._offset:
                return 0  # the whole body, verified
            wanted = min(len(buffer), part.size - self._offset)
        data = os.pread(self._fd, wanted, self._offset)
        with part.changed:
            if part.generation != self.generation:  # truncated while we read
                raise _StartedOver()
        buffer[:len(data)] = data
        self._offset += len(data)
        return len(data)

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        super().close()


class Feed(threading.Thread):
    """A sink reading a part file while it is written (fetch_into): read_from again from
    the first byte whenever the download starts over, and, once the download has ended,
    what the read of its verified body returned (`result`) or raised (`error`)."""

    def __init__(self, part, sink):
        super().__init__(name=f"read {os.path.basename(part.path)}", daemon=True)
        self.part, self.sink = part, sink
        self.result = self.error = None
        self.start()

    def run(self):
        while True:
            generation = self.part.generation
            self.result = self.error = None
            try:
                with io.BufferedReader(_Body(self.part, generation), _BUFFER) as body:
                    self.result = self.sink.read_from(body)
            except (_StartedOver, _Abandoned):
                pass
            except BaseException as e:  # raised for the caller once the body is verified
                self.error = e
            if self.part.settled(generation) is not None:
                return  # verified (the result stands) or failed (the caller discards)
            self.sink.discard()


def read_cached(path, sink):
    """sink.read_from over a verified cached file; discarded when it raises."""
    try:
        with open(path, "rb") as body:
            return sink.read_from(body)
    except BaseException:
        sink.discard()
        raise
