"""A download's part file: where the body of one fetch grows, across all of its attempts,
until it has matched its sha256 and is renamed into the cache.

A connection dropped mid-body resumes where it stopped: the next attempt asks for the rest
with a Range request (RFC 9110 §14.2), guarded by If-Range with the strong validator the
first response carried (ETag, else Last-Modified: §13.1.5), so a file changed on the
server in between comes whole instead of spliced. A server that answers 200 instead of 206
sends the whole body, and the download starts over; without a validator it always does.
The sha256 is computed as the bytes arrive, across attempts: one pass over the body.

A part file is named `.download-<pid of the run>.<random>.part`, so the one a killed run
left (its `finally` never ran) is told from a live run's and removed by the next fetch.
"""

import hashlib
import logging
import os
import re
import tempfile
import threading

from aks_flex_node.host import temps

log = logging.getLogger(__name__)

_PART = re.compile(r"\.download-(\d+)\.[A-Za-z0-9_]+\.part")
# What a 206's Content-Range says it holds: "bytes <first>-<last>/<length or *>".
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def open_part(cache_dir):
    """(fd, path) of a new empty part file in `cache_dir`; an OSError is the caller's to
    name (it knows what it was saving)."""
    return tempfile.mkstemp(prefix=f".download-{os.getpid()}.", suffix=".part", dir=cache_dir)


def remove_dead(cache_dir):
    """Remove the partial downloads of runs that were killed (their `finally` never
    ran): the pid in a part's name is gone. A live run's, this one's included, stays."""
    try:
        names = os.listdir(cache_dir)
    except OSError:
        return
    for name in names:
        match = _PART.fullmatch(name)
        if match is None or temps.pid_alive(int(match.group(1))):
            continue
        try:
            os.unlink(os.path.join(cache_dir, name))
            log.info("removed %s, a partial download a killed run left", name)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("cannot remove %s, a partial download a killed run left: %s", name, e)


class Partial:
    """The body of one fetch so far, kept across its attempts: the file it is written to,
    how many bytes it holds, their running sha256, and the validator that lets the next
    attempt ask for the rest (None: it cannot, it starts over).

    A sink's reader (body_feed.py) follows it from another thread: `size` only counts
    bytes that are in the file, `generation` changes when the body starts over, and
    `outcome` says how the fetch ended ("verified", "mismatch" or "failed"; None while it runs)."""

    def __init__(self, out, path):
        self.out = out
        self.path = path
        self.size = 0
        self.digest = hashlib.sha256()
        self.validator = None
        self.generation = 0
        self.outcome = None
        self.changed = threading.Condition()

    def restart(self):
        if not self.size:
            return  # nothing was written, nor read by a sink
        with self.changed:
            self.out.seek(0)
            self.out.truncate()
            self.size = 0
            self.digest = hashlib.sha256()
            self.generation += 1
            self.changed.notify_all()

    def append(self, chunk):
        self.digest.update(chunk)
        self.out.write(chunk)  # an OSError here is the file's: the Downloader names it
        self.out.flush()  # in the file before a reader is told it is there
        with self.changed:
            self.size += len(chunk)
            self.changed.notify_all()

    def end(self, outcome):
        with self.changed:
            self.outcome = outcome
            self.changed.notify_all()

    def settled(self, generation):
        """Wait until the fetch has ended or started over: its outcome when it ended on the
        body of `generation`, None when it started over since."""
        with self.changed:
            self.changed.wait_for(lambda: self.outcome is not None or self.generation != generation)
            return self.outcome if self.generation == generation else None

    def resume_headers(self):
        if not self.size or self.validator is None:
            return {}
        return {"Range": f"bytes={self.size}-", "If-Range": self.validator}


def range_start(content_range):
    """The first byte a 206 response's Content-Range says it holds; None when it does not
    say in the form asked for."""
    match = _CONTENT_RANGE.fullmatch(content_range)
    return int(match.group(1)) if match else None


def validator(headers):
    """What If-Range may carry for this response: a strong ETag, else Last-Modified, else
    None (a weak ETag cannot guard a range: RFC 9110 §13.1.5)."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("Last-Modified")
