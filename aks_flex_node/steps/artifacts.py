"""Installing release binaries: verified, cached, and skipped when already in place.

A binary we installed is in the ledger with the URL of the release it came from, its own
sha256 and its fingerprint (inode, size, modification and change times). When the wanted
release is the recorded one and every file on disk still has its recorded fingerprint (or,
when that differs, its recorded hash), nothing is fetched at all, not even the checksum
file: a second bootstrap on a joined node downloads nothing and hashes nothing. Otherwise the checksum comes from the release's
checksum file, the archive is fetched into the cache (or found there) and verified, and
each member is written atomically (host.write_file), so a running binary is replaced by
rename and never truncated under a running process.

An install is many writes, and a run may be killed between two of them. So before the
first member is written, the ledger gets an `artifact` record: the URL and every file the
archive installs (read from the archive, which is verified by then). "Installed" means
that record names the wanted URL and each file it lists is on disk with the sha256 its own
ledger entry holds; a run killed half-way leaves a record naming files that are missing or
old, and the next run installs again. Each file's ledger entry is written before the file
(tracked.write_tracked), so unbootstrap removes whatever a killed install had written.
"""

import hashlib
import os
import platform
import stat

from aks_flex_node.engine.step import INSTALL, Plan, Step, restart
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host.archive import list_members, read_members
from aks_flex_node.steps import tracked

# The ledger kind of an install's record: {"id": artifact, "url", "members": [node paths]}.
ARTIFACT_KIND = "artifact"
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
        st = os.lstat(host.path(path))
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


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

    def installed(self, ctx, url, version=None):
        """The ledger's file entries of this artifact when every file the install from `url`
        writes is on disk as it wrote it; None when one is missing, old or changed."""
        record = ctx.ledger.get(ARTIFACT_KIND, self.record_id(version))
        files = {e["id"]: e for e in ctx.ledger.entries(step=self.name, kind="file")}
        if record is None and self.record_id(version) == self.artifact:
            # An earlier release recorded each file but not the archive's list. Its install
            # is taken as whole when every file it recorded from `url` is intact:
            # reinstalling would restart the kubelet and containerd on `apt upgrade`.
            members = [path for path, e in files.items() if e.get("artifact_url") == url]
            entries = self._intact(ctx, url, files, members) if members else None
            if entries:
                ctx.adopt(self.name, ARTIFACT_KIND, self.artifact, url=url, members=members)
            return entries
        if record is None or record.get("url") != url or not record.get("members"):
            return None  # another version
        return self._intact(ctx, url, files, record["members"])

    def _intact(self, ctx, url, files, members):
        entries = []
        for path in members:
            entry = files.get(path)
            if entry is None or entry.get("artifact_url") != url:
                return None  # the run that recorded the install was killed before this file
            seen = fingerprint(ctx.host, path)
            if seen is None:
                return None
            if seen != entry.get("fingerprint"):
                data = ctx.host.read_bytes(path)
                if data is None or hashlib.sha256(data).hexdigest() != entry.get("sha256"):
                    return None
                if not ctx.options.get("dry_run"):
                    # Bookkeeping of ours, not a change to the host: the next run reads the
                    # file's metadata instead of hashing it again.
                    ctx.ledger.record(entry["step"], "file", path, fingerprint=seen)
            entries.append(entry)
        return entries

    def wanted(self, ctx, plan):
        """(version, url, checksum_url) of the wanted release, after planning the cache's
        tag; None (and the plan says why) while the version is not known."""
        tracked.plan_cache_tag(ctx, plan, self.name)
        version = self.version(ctx)
        if not version:
            plan.noop_reason = "version not known yet (it comes from the cluster)"
            return None
        return (version, *ctx.config.artifact_urls(self.artifact, version, node_arch()))

    def check(self, ctx):
        plan = Plan()
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
        tracked.ensure_cache_dir(ctx, self.name)
        downloader = ctx.downloader()
        filename = url.rsplit("/", 1)[-1]
        digest = downloader.checksum(checksum_url, filename)
        archive = downloader.fetch(url, digest)
        names = self.member_names(archive)
        if not names:
            raise FlexNodeError(f"{url} did not contain the files {self.name} needs")
        directory = self.target_dir(version)
        # Written (and saved) before the first member: a run killed among the writes
        # leaves a record naming the files still missing, and installed() says so.
        ctx.ledger.record(self.name, ARTIFACT_KIND, self.record_id(version), url=url,
                          members=[f"{directory}/{name}" for name in names])
        tracked.make_parents(ctx, self.name, directory + "/")
        for dest, data in self.members(archive):
            path = f"{directory}/{dest}"
            tracked.write_tracked(
                ctx, self.name, path, data, 0o755, artifact=self.artifact,
                artifact_url=url, sha256=hashlib.sha256(data).hexdigest())
            ctx.ledger.record(self.name, "file", path, fingerprint=fingerprint(ctx.host, path))
        if not self.installed(ctx, url, version):
            raise FlexNodeError(f"{url} did not contain the files {self.name} needs")

    def member_names(self, archive):
        """The names (under dest_dir) the install of `archive` writes, in order, once each."""
        if self.single_file:
            return [self.single_file]
        return list(dict.fromkeys(dest for _member, dest in list_members(archive, self.dest_name)))

    def members(self, archive):
        if self.single_file:
            with open(archive, "rb") as f:
                yield self.single_file, f.read()
            return
        for _member, dest, data in read_members(archive, self.dest_name):
            yield dest, data

    def plan_undo(self, ctx, entries):
        """The files and directories go as tracked's undo says; then the install's record,
        which is only a list of those files."""
        records = [e for e in entries if e["kind"] == ARTIFACT_KIND]
        plan = super().plan_undo(ctx, [e for e in entries if e["kind"] != ARTIFACT_KIND])
        for record in records:
            plan.add(f"forget the record of {record['id']} installed from {record.get('url')}",
                     f"made by the {record['step']} phase; the files it lists are removed",
                     lambda i=record["id"]: ctx.ledger.forget(ARTIFACT_KIND, i))
        return plan
