"""What a download is checked against: the sha256 and URL a caller gives, the sha256 a
checksum file gives, and which checksum files the cache keeps.

Every artifact is fetched against a known sha256 (download.py says why). For a release
artifact the digest that counts is a trusted one (artifact_digests.py: shipped in the package
or pinned by the operator), never a checksum file from the server that serves the artifact.
When the trusted digest is a sha512, a checksum file published beside the artifact still
gives the sha256 the download is fetched and cached under, and verify_file then checks the
whole file against the sha512 before anything staged from it is put in place. This module
reads what such files say and decides which of them may be kept for an offline re-run,
while the Downloader does the network side.
"""

import hashlib
import logging
import re
import threading
import urllib.parse

from aks_flex_node.host import fs
from aks_flex_node.host.download_errors import ChecksumMismatch, DownloadError
from aks_flex_node.http_policy import redact

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
# sha256sum output: "<hex>  <name>" (text mode) or "<hex> *<name>" (binary mode).
_GNU_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")
# BSD / `sha256sum --tag` output: "SHA256 (<name>) = <hex>".
_BSD_LINE = re.compile(r"SHA256 \((.+)\) = ([0-9a-fA-F]{64})")


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



class UnverifiedChecksums:
    """The checksum files a Downloader has read and no artifact has matched yet.

    A checksum file is written to the cache only once an artifact has verified against
    it, so a re-run with a warm cache works offline; one an artifact did not match (a bad
    mirror, a wrong release) is never kept, and its cached copy goes, so it cannot outlive
    the server's fix while offline.
    """

    def __init__(self):
        # sha256 -> [(cache path, body)] of the checksum files that gave it.
        self._sources = {}
        self._lock = threading.Lock()

    def add(self, sha256, cached, body):
        with self._lock:
            self._sources.setdefault(sha256, []).append((cached, body))

    def verified(self, sha256, matched):
        """An artifact did (`matched`) or did not match `sha256`: keep the checksum files
        that gave it in the cache, or drop them (the cached copy too, when it gave it)."""
        with self._lock:
            sources = self._sources.pop(sha256, [])
        for cached, body in sources:
            if matched:
                fs.write_file(cached, body, 0o644)
            elif fs.read_bytes(cached) == body:
                log.warning("removing %s: the artifact did not match its sha256", cached)
                fs.remove(cached)


_CHUNK = 1 << 20


def verify_file(path, url, trusted):
    """Nothing when the file at `path` (the verified download of `url`) hashes to `trusted`
    (an artifact_digests.Digest); else it is removed, so no later run takes it from the
    cache, and ChecksumMismatch says so."""
    digest = hashlib.new(trusted.algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    actual = digest.hexdigest()
    if actual != trusted.hex:
        fs.remove(path)
        raise ChecksumMismatch(f"{trusted.algorithm} mismatch for {url}: expected {trusted.hex}, got {actual}; "
                               "the download was deleted")


def mismatch_from(err, trusted):
    """`err` (a ChecksumMismatch) naming where the digest it was checked against came from."""
    return ChecksumMismatch(
        f"{err.message} (the trusted {trusted.algorithm} is from {trusted.source})",
        remedy="the server sent other bytes than the release's: check the mirror (artifact_mirror, *_url); "
               "for a build of your own, pin its digest in artifact_digests_file (docs/configuration.md)")
