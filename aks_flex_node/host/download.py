"""Downloads into a cache, verified by sha256 (stdlib urllib only).

The upstream agent downloads without any checksum or signature check (a plain GET:
github.com/Azure/AKSFlexNode, pkg/utils/utilio/download.go at tag v0.0.10); here every
artifact is fetched against a known sha256 and kept as `<cache_dir>/<sha256>-<basename>`,
so a file whose hash is known is fetched at most once and a re-run with a warm cache
needs no network at all.

The install steps run side by side (engine/runner.py) and share the run's Downloader, so
their artifacts download in parallel; at most `max_parallel` requests are open at once
(each attempt takes a slot, a retry's backoff does not hold one), which bounds what a join
asks of a mirror or a proxy however many artifacts the workflow grows.

A connection dropped mid-body resumes where it stopped: the next attempt asks for the rest
with a Range request (RFC 9110 §14.2), guarded by If-Range with the strong validator the
first response carried (ETag, else Last-Modified: §13.1.5), so a file changed on the
server in between comes whole instead of spliced. A server that answers 200 instead of 206
sends the whole body, and the download starts over; without a validator it always does.
The sha256 is computed as the bytes arrive, across attempts: one pass over the body.

A caller that unpacks what it downloads (fetch_into) reads the body while it arrives: its
sink runs in a thread of its own over the part file as it grows, so an archive is
extracted while it downloads and never read a second time. A resumed download goes on
feeding the same read; one that starts over tells the sink to drop what it made and read
again from the first byte; a body that does not match its sha256 is never read to its end
(the sink is told to drop everything).
"""

import errno
import hashlib
import http.client
import io
import logging
import os
import re
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from aks_flex_node import __version__
from aks_flex_node.errors import FlexNodeError, TemporaryError
from aks_flex_node.host import fs
from aks_flex_node.http_policy import HttpPolicy, redact

log = logging.getLogger(__name__)

USER_AGENT = f"aks-flex-node/{__version__}"
CHUNK = 1 << 20
# A release artifact (the kubernetes node tarball is ~100 MiB) never comes near this;
# it bounds what a misbehaving server can make us write.
MAX_DOWNLOAD_BYTES = 2 << 30
MAX_CHECKSUM_BYTES = 1 << 20
# Bounded retries for transient failures: 3 attempts, waiting 1 s then 2 s.
ATTEMPTS = 3
BACKOFF = 1.0
MAX_BACKOFF = 10.0
# Statuses worth another try: server errors, request timeout, throttling (RFC 9110 §15).
TRANSIENT_STATUS = {408, 429}
# Requests open at once per Downloader: one per artifact of the install branch (runc,
# containerd, kubernetes, CNI plugins) goes without waiting.
MAX_PARALLEL = 4

_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
# sha256sum output: "<hex>  <name>" (text mode) or "<hex> *<name>" (binary mode).
_GNU_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")
# BSD / `sha256sum --tag` output: "SHA256 (<name>) = <hex>".
_BSD_LINE = re.compile(r"SHA256 \((.+)\) = ([0-9a-fA-F]{64})")

# A download in progress: .download-<pid of the run>.<random>.part (see _download_to).
# What a 206's Content-Range says it holds: "bytes <first>-<last>/<length or *>".
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_PART = re.compile(r"\.download-(\d+)\.[A-Za-z0-9_]+\.part")


# One lock per cache file, so threads fetching the same artifact download it once.
_locks_guard = threading.Lock()
_locks = {}


def _lock_for(path):
    with _locks_guard:
        return _locks.setdefault(os.fspath(path), threading.Lock())


class DownloadError(FlexNodeError):
    """A download failed for a reason that another try will not fix."""

    code = "download"


class ChecksumMismatch(DownloadError):
    code = "checksum-mismatch"


class DownloadUnavailable(TemporaryError):
    """The server could not be reached or kept failing: try again later."""

    code = "download-unavailable"


class _Transient(Exception):
    """One attempt failed in a way that may pass; carries the reason for the last error."""


class _Partial:
    """The body of one fetch so far, kept across its attempts: the file it is written to,
    how many bytes it holds, their running sha256, and the validator that lets the next
    attempt ask for the rest (None: it cannot, it starts over).

    A sink's reader (_Body) follows it from another thread: `size` only counts bytes that
    are in the file, `generation` changes when the body starts over, and `outcome` says
    how the fetch ended ("verified", "mismatch" or "failed"; None while it runs)."""

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
        self.out.write(chunk)  # an OSError here is the file's: _write_part names it
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


def check_sha256(value, field="sha256"):
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValueError(f"{field} = {value!r}: expected 64 hexadecimal characters")
    return value.lower()


def check_url(url, field="url"):
    try:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        shown = redact(url) if isinstance(url, str) else url  # a proxy's password stays out
        raise ValueError(f"{field} = {shown!r}: expected an http:// or https:// URL")
    return url


def _cache_basename(url):
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", name).lstrip(".")
    return name[:128] or "download"


def parse_checksums(text, filename, source):
    """The sha256 for `filename` in a checksum file's text.

    Accepts sha256sum lines (`<hex>  <name>`, `<hex> *<name>`), BSD lines
    (`SHA256 (<name>) = <hex>`) and a bare hex digest. Picks the entry whose name's
    basename is `filename`; failing that, the only entry there is.
    """
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        gnu, bsd = _GNU_LINE.fullmatch(line), _BSD_LINE.fullmatch(line)
        if gnu:
            entries.append((gnu.group(1).lower(), gnu.group(2).strip()))
        elif bsd:
            entries.append((bsd.group(2).lower(), bsd.group(1).strip()))
        elif _SHA256.fullmatch(line):
            entries.append((line.lower(), None))
        else:
            raise DownloadError(
                f"checksum file {source} line {number} is {raw[:80]!r}: expected "
                "'<sha256>  <file name>', '<sha256> *<file name>' or a bare sha256"
            )
    if not entries:
        raise DownloadError(f"checksum file {source} is empty: expected at least one sha256")
    for digest, name in entries:
        if name is not None and name.rsplit("/", 1)[-1] == filename:
            return digest
    if len(entries) == 1:
        digest, name = entries[0]
        if name is not None:
            log.warning("checksum file %s names %s, not %s; using its only sha256",
                        source, name, filename)
        return digest
    names = ", ".join(name or "<unnamed>" for _, name in entries)
    raise DownloadError(f"checksum file {source} has no entry for {filename} (it lists {names})")


class Downloader:
    """Fetches URLs into `cache_dir` (a real path: the Host has added its root).

    `policy` (http_policy.HttpPolicy, the run's) decides the proxy per URL and the CA bundle;
    the process environment's proxy variables are never consulted (http_policy says why).
    Without one: direct connections, the system's CAs.
    """

    def __init__(self, cache_dir, policy=None, timeout=60, attempts=ATTEMPTS, backoff=BACKOFF,
                 max_parallel=MAX_PARALLEL):
        self.cache_dir = os.fspath(cache_dir)
        self.policy = policy = policy or HttpPolicy()
        ca_bundle = policy.ca_bundle
        self.timeout = timeout
        # sha256 -> [(cache path, body)] of checksum files read but not yet verified by a
        # fetch: written to the cache only once an artifact matches them.
        self._unverified = {}
        self._unverified_lock = threading.Lock()
        self.attempts = max(1, int(attempts))
        self.backoff = backoff
        if not isinstance(max_parallel, int) or max_parallel < 1:
            raise ValueError(f"max_parallel = {max_parallel!r}: expected a whole number of at least 1")
        self._slots = threading.BoundedSemaphore(max_parallel)
        if policy.https_proxy is not None:
            check_url(policy.https_proxy, "https_proxy")
        if ca_bundle is not None and not os.path.isfile(ca_bundle):
            raise ValueError(f"ca_bundle = {ca_bundle!r}: expected a PEM file that exists")
        try:
            self._ssl = policy.ssl_context()
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"ca_bundle = {ca_bundle!r}: not a usable PEM bundle ({e})") from e

    # ---- public -------------------------------------------------------------------

    def cache_path(self, url, sha256):
        return os.path.join(self.cache_dir, f"{check_sha256(sha256)}-{_cache_basename(url)}")

    def fetch(self, url, sha256):
        """Path of a verified local copy of `url`, downloading it only when the cache
        does not already hold a file with this sha256."""
        return self._fetch(url, sha256, None)[0]

    def fetch_into(self, url, sha256, sink):
        """Fetch `url` as fetch does while `sink` reads it; what sink.read_from returned.

        `sink.read_from(body)` gets the body as a binary file object: the cached copy when
        there is one, else the download as it arrives (a read waits for the next bytes), in
        a thread of its own. Its result is returned once the body has matched `sha256`.
        `sink.discard()` is called whenever what it made from a body must go: the download
        started over (read_from is then called again, from the first byte), the body did
        not match, the download failed, or read_from raised. An error read_from raised is
        raised once the body is verified: a body that does not match is reported as that,
        not as whatever it made the reader trip over.
        """
        return self._fetch(url, sha256, sink)[1]

    def _fetch(self, url, sha256, sink):
        check_url(url)
        sha256 = check_sha256(sha256)
        final = self.cache_path(url, sha256)
        with _lock_for(final):
            self._remove_dead_parts()
            if fs.file_sha256(final) == sha256:
                log.debug("cache hit for %s: %s", url, final)
                self._checksums_verified(sha256, True)
                return Path(final), (_read_cached(final, sink) if sink else None)
            if fs.exists(final):
                log.warning("cached %s does not match its sha256; downloading it again", final)
                fs.remove(final)
            fs.make_parents(self.cache_dir)
            try:
                read = self._download_to(url, final, sha256, sink)  # with retries, each attempt resuming
            except BaseException as e:
                if sink is not None:
                    sink.discard()
                if isinstance(e, ChecksumMismatch):
                    self._checksums_verified(sha256, False)
                raise
        self._checksums_verified(sha256, True)
        if read is not None and read.error is not None:
            sink.discard()
            raise read.error
        return Path(final), (read.result if read else None)

    def checksum(self, checksum_url, filename):
        """The sha256 that the checksum file at `checksum_url` gives for `filename`.

        A copy is kept in the cache once an artifact has verified against it (fetch);
        when the server cannot be reached the cached copy is used, so a re-run with a warm
        cache works offline. A checksum file an artifact did not match (a bad mirror, a
        wrong release) is never kept, so it cannot outlive the server's fix while offline.
        """
        check_url(checksum_url, "checksum_url")
        key = hashlib.sha256(checksum_url.encode()).hexdigest()[:16]
        cached = os.path.join(self.cache_dir, f"checksums-{key}-{_cache_basename(checksum_url)}")
        try:
            body = self._with_retries(checksum_url, lambda: self._read_small(checksum_url))
        except DownloadUnavailable:
            body = fs.read_bytes(cached)
            if body is None:
                raise
            log.warning("%s unreachable; using the copy cached in %s", checksum_url, cached)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise DownloadError(
                f"checksum file {checksum_url} is not text: expected sha256sum output"
            ) from None
        digest = parse_checksums(text, filename, checksum_url)
        with self._unverified_lock:
            self._unverified.setdefault(digest, []).append((cached, body))
        return digest

    def _checksums_verified(self, sha256, matched):
        """An artifact did (`matched`) or did not match `sha256`: keep the checksum files
        that gave it in the cache, or drop them (the cached copy too, when it gave it)."""
        with self._unverified_lock:
            sources = self._unverified.pop(sha256, [])
        for cached, body in sources:
            if matched:
                fs.write_file(cached, body, 0o644)
            elif fs.read_bytes(cached) == body:
                log.warning("removing %s: the artifact did not match its sha256", cached)
                fs.remove(cached)

    def _remove_dead_parts(self):
        """Remove the partial downloads of runs that were killed (their `finally` never
        ran): the pid in a part's name is gone. A live run's, this one's included, stays."""
        try:
            names = os.listdir(self.cache_dir)
        except OSError:
            return
        for name in names:
            match = _PART.fullmatch(name)
            if match is None or fs.pid_alive(int(match.group(1))):
                continue
            try:
                os.unlink(os.path.join(self.cache_dir, name))
                log.info("removed %s, a partial download a killed run left", name)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("cannot remove %s, a partial download a killed run left: %s", name, e)

    # ---- one attempt ----------------------------------------------------------------

    def _with_retries(self, url, attempt):
        last = None
        for number in range(1, self.attempts + 1):
            try:
                with self._slots:  # released before the backoff below
                    return attempt()
            except _Transient as e:
                last = e
                if number < self.attempts:
                    delay = min(self.backoff * 2 ** (number - 1), MAX_BACKOFF)
                    log.info("%s: %s; attempt %d of %d, retrying in %.1fs",
                             url, e, number, self.attempts, delay)
                    time.sleep(delay)
        raise DownloadUnavailable(
            f"cannot download {url}: {last} (after {self.attempts} attempts)",
            remedy="check the network (and https_proxy/no_proxy), then run again",
        )

    def _open(self, url, headers=None):
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler(self.policy.proxies_for(url)),
            urllib.request.HTTPSHandler(context=self._ssl),
        )
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
        try:
            return opener.open(request, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            e.close()
            if e.code >= 500 or e.code in TRANSIENT_STATUS:
                raise _Transient(f"HTTP {e.code} {e.reason}") from e
            raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}") from e
        except urllib.error.URLError as e:
            if isinstance(e.reason, ssl.SSLCertVerificationError):
                raise DownloadError(
                    f"cannot download {url}: its TLS certificate does not verify against "
                    f"{self.policy.trusted()}: {e.reason.verify_message}",
                    remedy="check ca_bundle, or the proxy's certificate",
                ) from e
            raise _Transient(str(e.reason)) from e
        except (OSError, http.client.HTTPException) as e:
            raise _Transient(str(e) or type(e).__name__) from e

    def _read_small(self, url):
        with self._open(url) as response:
            try:
                body = response.read(MAX_CHECKSUM_BYTES + 1)
            except (OSError, http.client.HTTPException) as e:
                raise _Transient(str(e) or type(e).__name__) from e
        if len(body) > MAX_CHECKSUM_BYTES:
            raise DownloadError(f"checksum file {url} is larger than {MAX_CHECKSUM_BYTES} bytes")
        return body

    def _download_to(self, url, final, sha256, sink):
        """Download `url` into a part file next to `final`, every attempt continuing the
        same part (_Partial), verify the sha256 and rename it into place; the sink's
        reading of it (_Feed), or None."""
        started = time.monotonic()
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".download-{os.getpid()}.", suffix=".part",
                                       dir=self.cache_dir)
        except OSError as e:
            raise self._cannot_save(url, self.cache_dir, e) from e
        try:
            size, read = self._write_part(url, fd, tmp, final, sha256, sink)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        log.info("downloaded %s: %d bytes in %.1fs", url, size, time.monotonic() - started)
        return read

    def _cannot_save(self, url, path, err):
        """The error for a local write that failed (a full or read-only file system),
        naming the file it was writing."""
        reason = err.strerror or str(err)
        remedy = (f"free space on the file system of {self.cache_dir}, or set cache_dir to one with room "
                  "(docs/configuration.md)") if err.errno in (errno.ENOSPC, errno.EDQUOT) else None
        return DownloadError(f"cannot save {url} as {path}: {reason}", remedy=remedy)

    def _write_part(self, url, fd, tmp, final, sha256, sink):
        """Receive `url` into the part file `tmp` (open as `fd`), verify it and rename it to
        `final`: (its size, the sink's reading of it or None)."""
        try:
            with os.fdopen(fd, "wb") as out:
                part = _Partial(out, tmp)
                read = _Feed(part, sink) if sink is not None else None
                try:
                    self._with_retries(url, lambda: self._receive(url, part))
                    actual = part.digest.hexdigest()
                    if actual != sha256:
                        part.end("mismatch")
                        raise ChecksumMismatch(
                            f"sha256 mismatch for {url}: expected {sha256}, got {actual} "
                            f"({part.size} bytes); the download was deleted",
                            remedy="check that the version, architecture and checksum belong together",
                        )
                    part.end("verified")
                finally:
                    if part.outcome is None:
                        part.end("failed")
                    if read is not None:
                        read.join()
                os.fchmod(out.fileno(), 0o644)
            # Not fsynced: a cached file is hashed again before every use (fetch), so one a
            # power cut left short is downloaded again, and a 100 MB fsync is not paid twice.
            os.replace(tmp, final)
        except OSError as e:
            # The part file's buffered writes, close and rename: the network side's errors
            # arrive as DownloadError (_receive).
            raise self._cannot_save(url, tmp, e) from e
        return part.size, read

    def _receive(self, url, part):
        """One attempt: the rest of the body after `part.size` bytes (all of it when the
        server cannot or will not resume), appended to `part`."""
        resume = part.resume_headers()
        try:
            response = self._open(url, resume)
        except DownloadError as e:
            if resume and isinstance(e.__cause__, urllib.error.HTTPError) and e.__cause__.code == 416:
                part.restart()  # it cannot give the range after all: the next try takes it whole
                raise _Transient("the server refused to resume (HTTP 416)") from e
            raise
        with response:
            if resume and response.status == 206:
                match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", ""))
                if match is None or int(match.group(1)) != part.size:
                    part.restart()
                    raise _Transient(f"asked for the bytes from {part.size} on, the server sent "
                                     f"Content-Range {response.headers.get('Content-Range')!r}")
                log.info("%s: resuming after %d bytes", url, part.size)
            else:
                if part.size:
                    log.info("%s: the server sent the whole file again; starting over", url)
                part.restart()
                part.validator = _validator(response.headers)
            received = 0
            while True:
                try:
                    # What has arrived, up to CHUNK (read() would wait for a whole CHUNK):
                    # a sink reading along (fetch_into) gets the bytes as they come.
                    chunk = response.read1(CHUNK)
                except (OSError, http.client.HTTPException) as e:
                    # The connection dropped mid-body (IncompleteRead, reset, timeout).
                    reason = str(e) or type(e).__name__
                    raise _Transient(f"interrupted after {part.size} bytes: {reason}") from e
                if not chunk:
                    break
                received += len(chunk)
                if part.size + len(chunk) > MAX_DOWNLOAD_BYTES:
                    raise DownloadError(f"cannot download {url}: larger than {MAX_DOWNLOAD_BYTES} bytes")
                part.append(chunk)
            # http.client does not raise IncompleteRead for a body cut short when it is
            # read in pieces (see HTTPResponse.read1): compare with Content-Length.
            expected = response.headers.get("Content-Length")
            if expected and expected.isdigit() and received < int(expected):
                raise _Transient(f"connection closed after {part.size} bytes, {int(expected) - received} short")


class _Feed(threading.Thread):
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
                with io.BufferedReader(_Body(self.part, generation), CHUNK) as body:
                    self.result = self.sink.read_from(body)
            except (_StartedOver, _Abandoned):
                pass
            except BaseException as e:  # raised for the caller once the body is verified
                self.error = e
            if self.part.settled(generation) is not None:
                return  # verified (the result stands) or failed (the caller discards)
            self.sink.discard()


def _read_cached(path, sink):
    """sink.read_from over a verified cached file; discarded when it raises."""
    try:
        with open(path, "rb") as body:
            return sink.read_from(body)
    except BaseException:
        sink.discard()
        raise


def _validator(headers):
    """What If-Range may carry for this response: a strong ETag, else Last-Modified, else
    None (a weak ETag cannot guard a range: RFC 9110 §13.1.5)."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("Last-Modified")
