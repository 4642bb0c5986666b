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

This module holds the network side: requests, retries, and where the cache keeps what.
A body is received into a part file that a dropped connection resumes (part_file.py),
may be read by a sink while it arrives (body_feed.py), and is checked against a sha256
that the caller or a checksum file gives (checksums.py).
"""

import errno
import hashlib
import http.client
import logging
import os
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from aks_flex_node import __version__
from aks_flex_node.host import careful_read, fs, part_file
from aks_flex_node.host.archive import ArchiveError
from aks_flex_node.host.body_feed import Feed, read_cached
from aks_flex_node.host.checksums import UnverifiedChecksums, check_sha256, check_url, parse_checksums
from aks_flex_node.host.download_errors import ChecksumMismatch, DownloadError, DownloadUnavailable, LocalFileError
from aks_flex_node.http_policy import HttpPolicy

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


# One lock per cache file, so threads fetching the same artifact download it once.
_locks_guard = threading.Lock()
_locks = {}


def _lock_for(path):
    with _locks_guard:
        return _locks.setdefault(os.fspath(path), threading.Lock())


class _Transient(Exception):
    """One attempt failed in a way that may pass; carries the reason for the last error."""


def _cache_basename(url):
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", name).lstrip(".")
    return name[:128] or "download"


def _local_path(url, field):
    """The absolute path a file:///path URL names (percent-escapes decoded: RFC 8089)."""
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    path = urllib.parse.unquote(parts.path) if parts else ""
    if parts is None or parts.scheme != "file" or parts.netloc or not path.startswith("/") or "\0" in path:
        raise ValueError(f"{field} = {url!r}: expected file:///<absolute path>")
    return path


class Downloader:
    """Fetches URLs into `cache_dir` (a real path: the Host has added its root).

    `policy` (http_policy.HttpPolicy, the run's) decides the proxy per URL and the CA bundle;
    the process environment's proxy variables are never consulted (http_policy says why).
    Without one: direct connections, the system's CAs. `root`: what a file:// URL's path is
    below (the Host's root; copy_into).
    """

    def __init__(self, cache_dir, policy=None, timeout=60, attempts=ATTEMPTS, backoff=BACKOFF,
                 max_parallel=MAX_PARALLEL, root="/"):
        self.cache_dir = os.fspath(cache_dir)
        self.root = os.fspath(root)
        self.policy = policy = policy or HttpPolicy()
        ca_bundle = policy.ca_bundle
        self.timeout = timeout
        self._unverified = UnverifiedChecksums()
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
            part_file.remove_dead(self.cache_dir)
            if fs.file_sha256(final) == sha256:
                log.debug("cache hit for %s: %s", url, final)
                self._unverified.verified(sha256, True)
                try:
                    return Path(final), (read_cached(final, sink) if sink else None)
                except ArchiveError:
                    fs.remove(final)  # see below
                    raise
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
                    self._unverified.verified(sha256, False)
                raise
        self._unverified.verified(sha256, True)
        if read is not None and read.error is not None:
            sink.discard()
            if isinstance(read.error, ArchiveError):
                # Its digest matched, but the archive was refused (a bomb, a link, a path
                # that climbs out: host/archive.py): a cached copy would only be refused
                # again, and nothing of a refused archive stays on disk.
                with _lock_for(final):
                    fs.remove(final)
            raise read.error
        return Path(final), (read.result if read else None)

    def copy_into(self, url, trusted, sink, field="url"):
        """A local mirror's file (`url`: file:///path, a node path below `root`: a USB stick,
        an NFS mount) copied into the cache as a download is kept (<sha256>-<name>), then
        read by `sink` as fetch_into's sink reads a cached copy; what sink.read_from returned.

        The file is opened by the careful read (careful_read.open_file: no link followed, no
        FIFO waited on, a regular file, at most MAX_DOWNLOAD_BYTES) and hashed as it is
        copied; it counts once the whole of it matched `trusted` (artifact_digests.Digest:
        sha256 or sha512). Nothing beside it (its .sha256) is read: whoever filled the
        mirror does not say what its files must hash to. LocalFileError (naming `field`,
        the setting that gave the URL) when the file cannot be read so; ChecksumMismatch
        when its bytes are not the trusted ones. Either way nothing is kept in the cache.
        """
        path = _local_path(url, field)
        try:
            source = careful_read.open_file(os.path.join(self.root, path.lstrip("/")), MAX_DOWNLOAD_BYTES)
        except careful_read.Unsafe as unsafe:
            raise LocalFileError(field, url, path, unsafe.why, unsafe.code) from None
        with source:
            final = self._copy_verified(url, path, source, trusted)
        try:
            return read_cached(final, sink)
        except ArchiveError:
            with _lock_for(final):
                fs.remove(final)  # refused whatever its digest: as _fetch does
            raise

    def _copy_verified(self, url, path, source, trusted):
        """Copy the open `source` into a part file of the cache, hashing it, and rename it
        to its cache name once it matched `trusted`; the cache path."""
        sha256, check = hashlib.sha256(), hashlib.new(trusted.algorithm)
        fs.make_parents(self.cache_dir)
        part_file.remove_dead(self.cache_dir)
        try:
            fd, tmp = part_file.open_part(self.cache_dir)
        except OSError as e:
            raise self._cannot_save(url, self.cache_dir, e) from e
        try:
            size = 0
            with os.fdopen(fd, "wb") as out:
                while True:
                    try:
                        chunk = source.read(CHUNK)
                    except OSError as e:  # an I/O error of the stick, a dropped NFS server
                        raise DownloadError(f"cannot read {path} ({url}): {e.strerror or e}",
                                            code="mirror-read") from e
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > MAX_DOWNLOAD_BYTES:  # grown since the careful read's fstat
                        raise DownloadError(f"cannot copy {path}: larger than {MAX_DOWNLOAD_BYTES} bytes")
                    sha256.update(chunk)
                    check.update(chunk)
                    try:
                        out.write(chunk)
                    except OSError as e:
                        raise self._cannot_save(url, tmp, e) from e
                os.fchmod(out.fileno(), 0o644)
            actual = check.hexdigest()
            if actual != trusted.hex:
                raise ChecksumMismatch(
                    f"{trusted.algorithm} mismatch for {path} ({url}): expected {trusted.hex}, got {actual} "
                    f"({size} bytes); nothing was kept")
            final = self.cache_path(url, sha256.hexdigest())
            with _lock_for(final):
                os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        log.info("copied %s into the cache: %d bytes", path, size)
        return final

    def checksum(self, checksum_url, filename):
        """The sha256 that the checksum file at `checksum_url` gives for `filename`.

        A copy is kept in the cache once an artifact has verified against it (fetch, and
        checksums.UnverifiedChecksums says why only then); when the server cannot be
        reached the cached copy is used, so a re-run with a warm cache works offline.
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
                f"checksum file {checksum_url} is not text: expected sha256sum output",
                code="checksum-not-text",
            ) from None
        digest = parse_checksums(text, filename, checksum_url)
        self._unverified.add(digest, cached, body)
        return digest

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
                    code="tls-untrusted",
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
            raise DownloadError(f"checksum file {url} is larger than {MAX_CHECKSUM_BYTES} bytes",
                                code="checksum-too-large")
        return body

    def _download_to(self, url, final, sha256, sink):
        """Download `url` into a part file next to `final`, every attempt continuing the
        same part (part_file.Partial), verify the sha256 and rename it into place; the
        sink's reading of it (body_feed.Feed), or None."""
        started = time.monotonic()
        try:
            fd, tmp = part_file.open_part(self.cache_dir)
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
        return DownloadError(f"cannot save {url} as {path}: {reason}", remedy=remedy, code="cache-write")

    def _write_part(self, url, fd, tmp, final, sha256, sink):
        """Receive `url` into the part file `tmp` (open as `fd`), verify it and rename it to
        `final`: (its size, the sink's reading of it or None)."""
        try:
            with os.fdopen(fd, "wb") as out:
                part = part_file.Partial(out, tmp)
                read = Feed(part, sink) if sink is not None else None
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
                if part_file.range_start(response.headers.get("Content-Range", "")) != part.size:
                    part.restart()
                    raise _Transient(f"asked for the bytes from {part.size} on, the server sent "
                                     f"Content-Range {response.headers.get('Content-Range')!r}")
                log.info("%s: resuming after %d bytes", url, part.size)
            else:
                if part.size:
                    log.info("%s: the server sent the whole file again; starting over", url)
                part.restart()
                part.validator = part_file.validator(response.headers)
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
