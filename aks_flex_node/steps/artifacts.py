"""Installing release binaries: verified, cached, and skipped when already in place.

A binary we installed is in the ledger with the URL of the release it came from and its own
sha256. When the wanted release is the recorded one and every file on disk still has its
recorded hash, nothing is fetched at all, not even the checksum file: a second bootstrap
on a joined node downloads nothing. Otherwise the checksum comes from the release's
checksum file, the archive is fetched into the cache (or found there) and verified, and
each member is written atomically (host.write_file), so a running binary is replaced by
rename and never truncated under a running process.
"""

import hashlib
import platform

from aks_flex_node.engine.step import INSTALL, Plan, Step, restart
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host.archive import read_members
from aks_flex_node.steps import tracked

ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def node_arch():
    machine = platform.machine()
    try:
        return ARCHES[machine]
    except KeyError:
        raise FlexNodeError(f"unsupported CPU architecture {machine!r}: expected x86_64 or aarch64")


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

    def installed(self, ctx, url):
        """The ledger's files of this artifact, when they are all still as installed from `url`."""
        entries = [e for e in ctx.ledger.entries(step=self.name, kind="file") if e.get("artifact")]
        if not entries or any(e.get("artifact_url") != url for e in entries):
            return None
        for entry in entries:
            data = ctx.host.read_bytes(entry["id"])
            if data is None or hashlib.sha256(data).hexdigest() != entry.get("sha256"):
                return None
        return entries

    def check(self, ctx):
        plan = Plan()
        version = self.version(ctx)
        if not version:
            plan.noop_reason = "version not known yet (it comes from the cluster)"
            return plan
        url, checksum_url = ctx.config.artifact_urls(self.artifact, version, node_arch())
        if self.installed(ctx, url):
            plan.noop_reason = f"{self.artifact} {version} installed and intact"
            return plan
        plan.add(f"install {self.artifact} {version} into {self.dest_dir}",
                 "not installed, another version, or a file was changed",
                 lambda: self.install(ctx, url, checksum_url), owes=self.owes(version))
        return plan

    def install(self, ctx, url, checksum_url):
        tracked.ensure_cache_dir(ctx, self.name)
        downloader = ctx.downloader()
        filename = url.rsplit("/", 1)[-1]
        digest = downloader.checksum(checksum_url, filename)
        archive = downloader.fetch(url, digest)
        tracked.make_parents(ctx, self.name, self.dest_dir + "/")
        for dest, data in self.members(archive):
            tracked.write_tracked(
                ctx, self.name, f"{self.dest_dir}/{dest}", data, 0o755, artifact=self.artifact,
                artifact_url=url, sha256=hashlib.sha256(data).hexdigest())
        if not self.installed(ctx, url):
            raise FlexNodeError(f"{url} did not contain the files {self.name} needs")

    def members(self, archive):
        if self.single_file:
            with open(archive, "rb") as f:
                yield self.single_file, f.read()
            return
        for _member, dest, data in read_members(archive, self.dest_name):
            yield dest, data
