"""Installing release binaries: verified, cached, and skipped when already in place.

A binary we installed is in the ledger with the URL of the release it came from, its own
sha256 and its fingerprint (inode, size, modification and change times). When the wanted
release is the recorded one and every file on disk still has its recorded fingerprint (or,
when that differs, its recorded hash), nothing is fetched at all, not even the checksum
file: a second bootstrap on a joined node downloads nothing and hashes nothing. Otherwise
the checksum comes from the release's checksum file, and the archive is read once, while
it downloads (or from the cache): each file it installs is staged beside its destination
as its bytes arrive (host/staging.py), and renamed into place only once the whole download
has matched its sha256. So an install costs about the time its bytes take to arrive (`make
bench`), a running binary is replaced by rename and never truncated under a running
process, and an archive that does not verify, or holds a member it must not, installs
nothing.

Staging writes temp files on the node, so the ledger's `staging` record names each one
(and the run's pid) before it exists: what a run killed during the download left is
cleared by the next bootstrap (its plan says so) or by unbootstrap (plan_clear_staging).

Committing is many renames, and a run may be killed between two of them. So before the
first, the ledger gets an `artifact` record: the URL and every file the archive installs.
"Installed" means that record names the wanted URL and each file it lists is on disk with
the sha256 its own ledger entry holds; a run killed half-way leaves a record naming files
that are missing or old, and the next run installs again. Each file's ledger entry is
written before its rename (tracked.claim_file), so unbootstrap removes whatever a killed
install had put in place.
"""

import hashlib
import logging
import os
import platform
import stat

from aks_flex_node.engine.step import INSTALL, Plan, Step, restart
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import checksums
from aks_flex_node.host.archive import members
from aks_flex_node.host.download_errors import ChecksumMismatch
from aks_flex_node.host.fs import HostFileError
from aks_flex_node.steps import tracked
from aks_flex_node.steps.kinds import Kind

log = logging.getLogger(__name__)

# The ledger kind of an install's record: {"id": artifact, "url", "members": [node paths]}.
ARTIFACT_KIND = Kind.ARTIFACT
# The ledger kind of the files an install is staging: {"id": the artifact record's id,
# "files": [node paths], "pid": the run's}; forgotten once they are in place or gone.
STAGING_KIND = Kind.STAGING
ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def node_arch():
    machine = platform.machine()
    try:
        return ARCHES[machine]
    except KeyError:
        raise FlexNodeError(f"unsupported CPU architecture {machine!r}: expected x86_64 or aarch64")


def fingerprint(host, path):
    """What says a file is the one we wrote without reading it: inode, size, and the
    modification and change times in nanoseconds (the change time moves with any write or
    chmod, and nobody can set it back: stat(2)). None when no regular file is there."""
    try:
        st = host.lstat(path)
    except OSError:
        return None
    if st is None or not stat.S_ISREG(st.st_mode):
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def intact(host, url, files, members, note=None):
    """The file entries (`files`: node path -> ledger entry) of `members` when each is on
    disk as the install from `url` wrote it; None when one is missing, old or changed. The
    fingerprint says so without reading the file; when it moved, the bytes are hashed, and
    if they are the recorded ones the new fingerprint goes to `note(step, "file", path,
    fingerprint=...)` (bookkeeping, not a change to the host: the next run reads the file's
    metadata instead of hashing it again); `note` None: noted nowhere."""
    entries = []
    for path in members:
        entry = files.get(path)
        if entry is None or entry.get("artifact_url") != url:
            return None  # the run that recorded the install was killed before this file
        seen = fingerprint(host, path)
        if seen is None:
            return None
        if seen != entry.get("fingerprint"):
            data = host.read_bytes(path)
            if data is None or hashlib.sha256(data).hexdigest() != entry.get("sha256"):
                return None
            if note is not None:
                note(entry["step"], Kind.FILE, path, fingerprint=seen)
        entries.append(entry)
    return entries


class ArtifactStep(tracked.OwnsPaths, Step):
    """Subclasses set `artifact` (a config artifact name), `version_key`, `dest_dir`,
    `single_file` (the name of a bare-binary artifact) or override `dest_name`, and
    `restarts`: the unit that runs these binaries, restarted when they change."""

    branch = INSTALL
    artifact = ""
    version_key = ""
    dest_dir = "/usr/local/bin"
    single_file = None
    restarts = None

    def version(self, ctx):
        return ctx.config[self.version_key]

    def owes(self, version):
        if not self.restarts:
            return ()
        return (restart(self.restarts, f"{self.artifact} {version} is installed"),)

    def dest_name(self, member):
        """Where an archive member goes (a basename under dest_dir), or None to skip it."""
        raise NotImplementedError

    def target_dir(self, version):
        """The directory `version`'s files go to (one for every version, unless overridden)."""
        return self.dest_dir

    def record_id(self, version):
        """The id of the ledger's `artifact` record of `version`'s install."""
        return self.artifact

    def installed(self, ctx, url, version=None, note=None):
        """The ledger's file entries of this artifact when every file the install from `url`
        writes is on disk as it wrote it; None when one is missing, old or changed. A file
        whose fingerprint moved but whose bytes are the recorded ones has its new
        fingerprint noted with `note` (default: Context.adopt, as a check reads only; an
        earlier release's install without an artifact record got one from
        steps/migrations.py before the run's first check)."""
        record = ctx.ledger.get(ARTIFACT_KIND, self.record_id(version))
        if record is None or record.get("url") != url or not record.get("members"):
            return None  # not installed, another version
        files = {e["id"]: e for e in ctx.ledger.entries(step=self.name, kind=Kind.FILE)}
        return intact(ctx.host, url, files, record["members"], ctx.adopt if note is None else note)

    def wanted(self, ctx, plan):
        """(version, url, checksum_url) of the wanted release, after planning the cache's
        tag; None (and the plan says why) while the version is not known."""
        tracked.plan_cache_tag(ctx, plan, self.name)
        version = self.version(ctx)
        if not version:
            plan.noop_reason = "version not known yet (it comes from the cluster)"
            return None
        return (version, *ctx.config.artifact_urls(self.artifact, version, node_arch()))

    def plan_staging_left(self, ctx, plan):
        """Clear what installs of this step a run killed during their download staged."""
        plan_clear_staging(ctx, plan, ctx.ledger.entries(step=self.name, kind=STAGING_KIND))

    def check(self, ctx):
        plan = Plan()
        self.plan_staging_left(ctx, plan)
        wanted = self.wanted(ctx, plan)
        if wanted is None:
            return plan
        version, url, checksum_url = wanted
        if self.installed(ctx, url, version):
            if not plan.actions:
                plan.noop_reason = f"{self.artifact} {version} installed and intact"
            return plan
        plan.add(f"install {self.artifact} {version} into {self.target_dir(version)}",
                 "not installed, another version, a file was changed, or an install was cut short",
                 lambda: self.install(ctx, url, checksum_url, version), owes=self.owes(version))
        return plan

    def install(self, ctx, url, checksum_url, version=None):
        # What the bytes must hash to comes from this package or the operator, never from
        # the server that serves them (artifact_digests.py): a version neither names is
        # refused before anything is downloaded.
        trusted = ctx.config.artifact_digest(self.artifact, version or self.version(ctx), node_arch())
        tracked.ensure_cache_dir(ctx, self.name)
        downloader = ctx.downloader()
        filename = url.rsplit("/", 1)[-1]
        if checksum_url is None or trusted.algorithm == "sha256":
            digest = trusted.hex
        else:
            # A sha512 (all the Kubernetes CHANGELOG publishes): the server's sha256 only
            # names the download in the cache; the bytes count once their sha512 matches.
            digest = downloader.checksum(checksum_url, filename)
        unpack = _Unpack(ctx, self, self.target_dir(version), self.record_id(version), url)
        try:
            try:
                if checksum_url is None:
                    # A local mirror (artifact_mirror = file:///path): copied into the cache
                    # through the careful read, hashed whole against the trusted digest
                    # before the sink reads a byte of it.
                    contained = downloader.copy_into(url, trusted, unpack, field="artifact_mirror")
                else:
                    contained = downloader.fetch_into(url, digest, unpack)
                    if trusted.algorithm != "sha256":
                        checksums.verify_file(downloader.cache_path(url, digest), url, trusted)
            except ChecksumMismatch as e:
                raise checksums.mismatch_from(e, trusted) from e
            if not contained:
                raise FlexNodeError(f"{url} did not contain the files {self.name} needs")
            self._commit(ctx, url, unpack)
        except BaseException:
            try:
                unpack.abandon()
            except Exception as e:  # the failure at hand is what the operator must see
                log.warning("cannot clean up after the failed install of %s: %s", url, e)
            raise
        ctx.ledger.forget(STAGING_KIND, unpack.record_id)
        if not self.installed(ctx, url, version, note=ctx.ledger.record):
            raise FlexNodeError(f"{url} did not contain the files {self.name} needs")

    def _commit(self, ctx, url, unpack):
        """Rename the staged files into place, each recorded (and what it replaces backed
        up) before its rename."""
        staged = {f"{unpack.directory}/{dest}": f for dest, f in unpack.staged.items()}
        # Written (and saved) before the first rename: a run killed among them leaves a
        # record naming the files still missing, and installed() says so.
        ctx.ledger.record(self.name, ARTIFACT_KIND, unpack.record_id, url=url, members=list(staged))
        for path, f in staged.items():
            tracked.claim_file(ctx, self.name, path, artifact=self.artifact,
                               artifact_url=url, sha256=f.sha256)
            f.commit()
            ctx.ledger.record(self.name, Kind.FILE, path, fingerprint=fingerprint(ctx.host, path))

    def plan_undo(self, ctx, entries):
        """What an install cut short staged goes first; the files and directories go as
        tracked's undo says; then the install's record, which is only a list of those files."""
        plan = Plan()
        plan_clear_staging(ctx, plan, [e for e in entries if e["kind"] == STAGING_KIND])
        records = [e for e in entries if e["kind"] == ARTIFACT_KIND]
        paths = super().plan_undo(ctx, [e for e in entries if e["kind"] not in (ARTIFACT_KIND, STAGING_KIND)])
        plan.actions += paths.actions
        for record in records:
            plan.add(f"forget the record of {record['id']} installed from {record.get('url')}",
                     f"made by the {record['step']} phase; the files it lists are removed",
                     lambda i=record["id"]: ctx.ledger.forget(ARTIFACT_KIND, i))
        return plan


def plan_clear_staging(ctx, plan, records):
    """Add to `plan` the clearing of `records`, staging records of runs that were killed."""
    for record in records:
        plan.add(f"remove what the cut-short install of {record['id']} staged",
                 "a run killed while it downloaded left its temp files",
                 lambda r=record: _clear(ctx, r))


def _clear(ctx, record):
    """Remove the temp files a killed install staged (its record names them and its run:
    under the run lock, a run that is over) and forget the record."""
    for path in record.get("files", ()):
        ctx.host.remove_temps(path, record.get("pid"))
    ctx.ledger.forget(STAGING_KIND, record["id"])


class _Unpack:
    """The sink of an install's download (Downloader.fetch_into): each file the install
    writes, staged beside its destination while the archive's bytes arrive (read_from).

    The ledger's staging record names a file, with the run's pid, before its temp file
    exists. Nothing is renamed into place here; the install commits once the download has
    verified, or abandons: the staged files and the directories made for them go."""

    def __init__(self, ctx, step, directory, record_id, source):
        self.ctx, self.step, self.directory = ctx, step, directory
        self.record_id, self.source = record_id, source
        self.staged = {}  # dest name -> host StagedFile, in the archive's order
        self._recorded = []  # node paths the staging record names
        self._made = []  # directories made for them, top first

    def read_from(self, body):
        """Stage the chosen members of `body` (the artifact itself when it is a single
        file); the dest names staged, in order."""
        if self.step.single_file:
            self._stage(self.step.single_file, body)
        else:
            for _member, dest, content in members(body, self.step.dest_name, self.source):
                self._stage(dest, content)
        return list(self.staged)

    def _stage(self, dest, content):
        ctx, path = self.ctx, f"{self.directory}/{dest}"
        self._made += tracked.make_parents(ctx, self.step.name, path)
        if path not in self._recorded:
            self._recorded.append(path)
            ctx.ledger.record(self.step.name, STAGING_KIND, self.record_id,
                              files=list(self._recorded), pid=os.getpid())
        earlier = self.staged.pop(dest, None)
        if earlier is not None:  # a name the archive holds twice: the last wins, as with tar
            earlier.discard()
        staged = self.staged[dest] = ctx.host.stage(path)
        staged.copy_from(content)
        staged.finish(0o755)

    def discard(self):
        for staged in self.staged.values():
            staged.discard()
        self.staged = {}

    def abandon(self):
        """The install failed: its staged files and the (still empty) directories made for
        them go, and so does the staging record. What was committed already stays, recorded
        for undo, and so does a directory that is not empty."""
        self.discard()
        for directory in reversed(self._made):
            try:
                self.ctx.host.remove(directory)
            except HostFileError as e:  # not empty: a file committed, or someone else's
                log.debug("keeping %s: %s", directory, e)
                continue
            self.ctx.ledger.forget(Kind.PARENT_DIR, directory)
        self.ctx.ledger.forget(STAGING_KIND, self.record_id)
