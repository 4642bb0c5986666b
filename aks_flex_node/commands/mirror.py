"""`aks-flex-node mirror sync DIR`: fill a directory that `artifact_mirror` can name.

On a machine that reaches the release servers (docs/air-gapped.md, "Fill a mirror"), every
artifact a join of the given Kubernetes versions and architectures installs (the Kubernetes
node binaries, and the configuration's containerd, runc and CNI plugins) is fetched from
its upstream URL (the *_url templates, whatever artifact_mirror says), checked against the
digest this package ships or the operator pins (artifact_digests.py), and put in DIR under
the flat name artifact_mirror asks for (config/model.py MIRROR_FILENAMES), with a
"<name>.sha256" beside it (so a plain web server serving DIR is an https mirror) and
manifest.json saying what each file is and where it came from. A version nobody vouches
for is refused before anything is fetched. A file already there whose digest is the
trusted one is not fetched again; one that is not is fetched again and replaced.

Downloads go through the run's Downloader and HTTP policy (the configuration's proxy and CA
bundle), into a work directory inside DIR (the same file system, so the verified file is
renamed into place: a reader of DIR never sees half a file), which is emptied of what the
Downloader wrote and removed at the end. Root is not needed: only DIR is written.
"""

import dataclasses
import datetime
import json
import logging
import os
import re
import urllib.parse

from aks_flex_node import __version__
from aks_flex_node.artifact_digests import ArtifactDigestUnknown
from aks_flex_node.config import MIRROR_FILENAMES
from aks_flex_node.errors import FlexNodeError, UsageError
from aks_flex_node.host import careful_read, checksums
from aks_flex_node.host.download import Downloader
from aks_flex_node.host.download_errors import ChecksumMismatch
from aks_flex_node.host.fs import HostFileError
from aks_flex_node.http_policy import HttpPolicy

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 4 << 20
WORK_DIR = ".aks-flex-node-sync"
# What the Downloader writes in its cache directory (host/download.py): <sha256>-<name>,
# checksums-<key>-<name>, and .download-*.part while a download runs.
_DOWNLOADER_FILE = re.compile(r"[0-9a-f]{64}-.+|checksums-.+|\.download-.+\.part|\.checksums-.+\.tmp")
# The runtime artifacts of a join and the configuration keys giving their versions.
RUNTIME = (("containerd", "containerd_version"), ("runc", "runc_version"), ("cni", "cni_version"))

# What a file of the plan is: there with its trusted digest, missing, or there with
# other bytes (fetched again and replaced).
PRESENT, MISSING, MISMATCH = "present", "missing", "mismatch"


class MirrorDirError(FlexNodeError):
    """DIR cannot be a mirror directory (a file in its place)."""

    code = "mirror-dir"


@dataclasses.dataclass(frozen=True)
class Item:
    """One file of the mirror: what it is, the digest it must have, where it comes from."""

    file: str  # its flat name in DIR (MIRROR_FILENAMES)
    artifact: str
    version: str
    arch: str
    trusted: object  # artifact_digests.Digest
    url: str
    checksum_url: str
    state: str  # PRESENT, MISSING or MISMATCH

    def to_dict(self):
        return {"file": self.file, "artifact": self.artifact, "version": self.version, "arch": self.arch,
                self.trusted.algorithm: self.trusted.hex, "digest_from": self.trusted.source,
                "source": self.url, "state": self.state}


@dataclasses.dataclass
class Plan:
    directory: str  # the node path of DIR
    items: list

    @property
    def to_fetch(self):
        return [item for item in self.items if item.state != PRESENT]

    def to_dict(self):
        return {"directory": self.directory, "files": [item.to_dict() for item in self.items],
                "fetch": len(self.to_fetch)}


def release_versions(cfg, asked):
    """The Kubernetes versions to mirror: `asked` (--kubernetes-version, checked as the
    configuration's kubernetes_version is), else the configuration's; UsageError when
    neither names one."""
    if asked:
        return list(dict.fromkeys(asked))
    if cfg.kubernetes_version:
        return [str(cfg.kubernetes_version)]
    raise UsageError("no Kubernetes version to mirror: kubernetes_version is empty (the cluster's, which "
                     "a machine that does not join cannot ask)",
                     remedy="name it: aks-flex-node mirror sync DIR --kubernetes-version 1.31.2 "
                            "(repeatable), or set kubernetes_version in the configuration")


def plan(cfg, host, directory, kubernetes_versions, arches):
    """The files `directory` (a node path) must hold for joins of `kubernetes_versions` on
    `arches`, each with its state; reads DIR, changes nothing. Every trusted digest is
    looked up first: a version nobody vouches for fails the whole plan before any fetch
    (FlexNodeError, code artifact-digest-unknown, listing each one)."""
    wanted = [("kubernetes", v) for v in kubernetes_versions] + [(a, str(cfg[key])) for a, key in RUNTIME]
    found, unknown = [], []
    for arch in arches:
        for artifact, version in wanted:
            try:
                found.append((artifact, version, arch, cfg.artifact_digest(artifact, version, arch)))
            except ArtifactDigestUnknown as err:
                unknown.append(err)
    if unknown:
        names = ", ".join(f"{e.artifact} {e.version} ({e.arch})" for e in unknown)
        pins = cfg.artifact_digests_file or "not set"
        raise FlexNodeError(
            f"no trusted digest for {names}: neither this package nor artifact_digests_file ({pins}) "
            f"names {'them' if len(unknown) > 1 else 'it'}; nothing was fetched",
            remedy=unknown[0].remedy, code=ArtifactDigestUnknown.code)
    _check_directory(host, directory)
    items = []
    for artifact, version, arch, trusted in found:
        name = MIRROR_FILENAMES[artifact].format(version=version, arch=arch)
        url, checksum_url = cfg.upstream_artifact_urls(artifact, version, arch)
        items.append(Item(name, artifact, version, arch, trusted, url, checksum_url,
                          _state(host, f"{directory}/{name}", trusted)))
    return Plan(directory, items)


def _check_directory(host, directory):
    kind = host.kind(directory)
    if kind not in (None, "dir") and not host.is_dir(directory):
        raise MirrorDirError(f"mirror directory {directory} is {kind_word(kind)}: expected a directory "
                             "(or nothing there: it is created)")


def kind_word(kind):
    return {"file": "a file", "link": "a link to something that is not a directory"}.get(kind, "not a directory")


def _state(host, path, trusted):
    kind = host.kind(path)
    if kind is None:
        return MISSING
    if kind == "dir":
        raise MirrorDirError(f"{path} is a directory: expected the mirror's file (or nothing there)")
    return PRESENT if kind == "file" and host.file_digest(path, trusted.algorithm) == trusted.hex else MISMATCH


def sync(cfg, host, sync_plan, progress=None):
    """Fetch what `sync_plan` lacks into its directory, write each file's .sha256 and the
    manifest; the manifest's entries of this run's files. `progress(item, what)` is told of
    each file as it is done."""
    directory = sync_plan.directory
    if host.kind(directory) is None:
        host.ensure_dir(directory, 0o755)
    work = f"{directory}/{WORK_DIR}"
    downloader = None
    entries = []
    try:
        for item in sync_plan.items:
            path = f"{directory}/{item.file}"
            sha256 = item.trusted.hex if item.trusted.algorithm == "sha256" else None
            if item.state != PRESENT:
                if downloader is None:
                    host.ensure_dir(work, 0o755)
                    downloader = Downloader(host.path(work), policy=HttpPolicy.from_config(cfg), root=host.root)
                sha256 = _fetch(downloader, host, item, path, work)
            entries.append(_entry(host, item, path, sha256))
            host.write_file(f"{path}.sha256", f"{entries[-1]['sha256']}  {item.file}\n".encode(), 0o644)
            if progress is not None:
                progress(item, "fetched" if item.state != PRESENT else "present")
    finally:
        if downloader is not None:
            _clear_work(host, work)
    _write_manifest(host, directory, entries)
    return entries


def _fetch(downloader, host, item, path, work):
    """Download `item` into the work directory, verify it against its trusted digest and
    rename it to `path`; its sha256."""
    if item.trusted.algorithm == "sha256":
        sha256 = item.trusted.hex
    else:
        # A sha512 (the Kubernetes CHANGELOG's): the server's sha256 only names the
        # download; the bytes count once their sha512 matches (as steps/artifacts.py does).
        sha256 = downloader.checksum(item.checksum_url, item.url.rsplit("/", 1)[-1])
    try:
        cached = downloader.fetch(item.url, sha256)
        if item.trusted.algorithm != "sha256":
            checksums.verify_file(cached, item.url, item.trusted)
    except ChecksumMismatch as e:
        raise checksums.mismatch_from(e, item.trusted) from e
    host.replace(path, f"{work}/{os.path.basename(cached)}")
    return sha256


def _entry(host, item, path, sha256):
    """The manifest's entry of `item`, now at `path`."""
    look = host.look(path)
    entry = {"file": item.file, "artifact": item.artifact, "version": item.version, "arch": item.arch,
             "sha256": sha256 or host.file_digest(path), "size": look.size if look else None,
             "source": item.url, "digest_from": item.trusted.source}
    if item.trusted.algorithm != "sha256":
        entry[item.trusted.algorithm] = item.trusted.hex
    if item.state == PRESENT:
        entry["fetched"] = None  # filled from the earlier manifest (_write_manifest)
    else:
        entry["fetched"] = _now()
    return entry


def _now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _clear_work(host, work):
    """Remove what the Downloader left in the work directory (its checksum copies, a part
    file an interrupted download left), then the directory; anything else stays, said."""
    for name in host.listdir(work) or ():
        if _DOWNLOADER_FILE.fullmatch(name):
            host.remove(f"{work}/{name}")
    try:
        host.remove_empty_dir(work)
    except OSError as e:
        log.warning("keeping %s: %s", work, e.strerror or e)


def read_manifest(host, directory):
    """The manifest's entries by file name ({} when there is none, or it is not ours)."""
    path = f"{directory}/{MANIFEST}"
    try:
        data = host.read_carefully(path, MANIFEST_MAX_BYTES)
    except careful_read.Unsafe as unsafe:
        if unsafe.code != "absent":
            log.warning("ignoring %s: %s", path, unsafe.why)
        return {}
    try:
        doc = json.loads(data.decode("utf-8"))
        return {e["file"]: e for e in doc["files"] if isinstance(e, dict) and isinstance(e.get("file"), str)}
    except (ValueError, KeyError, TypeError) as e:
        log.warning("ignoring %s: not a manifest of ours (%s); writing a new one", path, e)
        return {}


def _write_manifest(host, directory, entries):
    """manifest.json: this run's entries, and the earlier ones of files still there (a sync
    of another version adds to a mirror; it never removes)."""
    earlier = read_manifest(host, directory)
    files = {}
    for name, entry in earlier.items():
        if host.kind(f"{directory}/{name}") == "file":
            files[name] = entry
    for entry in entries:
        if entry["fetched"] is None:
            entry["fetched"] = (earlier.get(entry["file"]) or {}).get("fetched")
        files[entry["file"]] = entry
    doc = {"written_by": f"aks-flex-node {__version__}", "written": _now(),
           "files": [files[name] for name in sorted(files)]}
    host.write_file(f"{directory}/{MANIFEST}", (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), 0o644)


def node_directory(text):
    """DIR as an absolute, normalised path (a relative one is taken from the working
    directory); UsageError for one that cannot be a directory's name."""
    if "\0" in text or not text.strip():
        raise UsageError(f"DIR = {text!r}: expected a directory's path, e.g. /media/usb/aks-flex-node")
    return os.path.abspath(text)


def file_url(directory):
    """artifact_mirror's value for `directory` (RFC 8089: percent-escaped, a space as %20)."""
    return "file://" + urllib.parse.quote(directory)


def arches_or_this(asked, this_arch):
    """--arch as given (each once), else this machine's."""
    return list(dict.fromkeys(asked)) if asked else [this_arch()]


def entry_line(item, what):
    return f"{what}: {item.file} ({item.artifact} {item.version} {item.arch})"


def failed(err):
    """A HostFileError while filling DIR, named as the mirror's."""
    return err if not isinstance(err, HostFileError) else MirrorDirError(
        f"cannot fill the mirror: {err.message}", remedy="DIR must be a directory this user may write "
        "(docs/air-gapped.md, Fill a mirror)")

