"""What earlier releases left in layouts this one no longer reads, brought to today's once,
at the start of a bootstrap, before any step's check (engine/migration.py runs them; the
engine knows nothing of what they move). In order, each building on the one before:

- `artifact-records`: releases before the artifact record (steps/artifacts.py) recorded
  each installed file with its URL and sha256, but not the archive's list of files. The
  files a step recorded from one URL become that list, the `artifact` record an install
  writes today; whether they are intact is the step's check's to say, as for any install.
- `kubernetes-versioned-layout`: releases before the versioned directories installed one
  Kubernetes version as files in /usr/local/bin, recorded as the `kubernetes` artifact.
  Those bytes are the version the kubelet runs: they are copied into that version's
  directory, `current` names it and /usr/local/bin links into it, with no download and no
  restart. When they are not intact, or their version cannot be told from their URL, the
  record alone is forgotten (the files stay recorded for undo) and the kubernetes phase
  installs the wanted version as on a new node.

A dry run writes nothing: `artifact-records` changes only the ledger, so a dry run
applies it to a copy in memory and plans from what the run would read; the move of the
Kubernetes layout changes the host, so a dry run's kubernetes plan is made from the
layout as it is, and the summary says the move is pending. Adoption of what a check finds in place (a unit we
enabled, a role assignment with our name, our Node) is not a migration: the steps note
it (Context.adopt) and the runner records it.
"""

import hashlib
import os
import re

from aks_flex_node.engine.migration import Migration
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.steps import tracked
from aks_flex_node.steps.artifacts import ARTIFACT_KIND, ArtifactStep, fingerprint, intact, node_arch
from aks_flex_node.steps.kinds import Kind
from aks_flex_node.steps.kubernetes import (BIN_DIR, KUBE_BINARIES, KubernetesBinariesStep,
                                            active_version, bin_link, switch, version_dir)


def bootstrap_migrations(steps):
    """The migrations a bootstrap of `steps` runs first, in order."""
    return (ArtifactRecords([s for s in steps if isinstance(s, ArtifactStep)]),
            KubernetesVersionedLayout())


class ArtifactRecords(Migration):
    name = "artifact-records"
    ledger_only = True

    def __init__(self, steps):
        self.steps = list(steps)

    def _found(self, ctx):
        """[(step, url, [paths])]: an earlier release's installs, one per step, that no
        artifact record lists; a step whose files name more than one URL (an install of
        that layout cut short) has none: its next install records it afresh."""
        listed = {path for record in ctx.ledger.entries(kind=ARTIFACT_KIND)
                  for path in record.get("members", ())}
        found = []
        for step in self.steps:
            if ctx.ledger.get(ARTIFACT_KIND, step.artifact) is not None:
                continue
            by_url = {}
            for entry in ctx.ledger.entries(step=step.name, kind=Kind.FILE):
                path = entry["id"]
                if (entry.get("artifact") == step.artifact and entry.get("artifact_url")
                        and "link" not in entry and path not in listed
                        and os.path.dirname(path) == step.dest_dir):
                    by_url.setdefault(entry["artifact_url"], []).append(path)
            if len(by_url) == 1:
                [(url, members)] = by_url.items()
                found.append((step, url, members))
        return found

    def pending(self, ctx):
        found = self._found(ctx)
        if not found:
            return None
        return ("record the files of " + ", ".join(f"{step.artifact} ({len(members)})"
                                                   for step, _url, members in found)
                + " as their install (an earlier release recorded each file, not the archive's list)")

    def apply(self, ctx):
        for step, url, members in self._found(ctx):
            ctx.ledger.record(step.name, ARTIFACT_KIND, step.artifact, url=url, members=members)


# A release version in a URL (1.30.4, 1.30.4-rc.1); each candidate is proved by building
# the URL back from it.
_VERSION_IN_URL = re.compile(r"\d+\.\d+\.\d+[0-9A-Za-z.+-]*")


class KubernetesVersionedLayout(Migration):
    name = "kubernetes-versioned-layout"
    step = KubernetesBinariesStep.name
    artifact = KubernetesBinariesStep.artifact

    def _found(self, ctx, note=None):
        """(record, version, file entries) of the single-version install; version and
        entries are None when it cannot be moved (another version is active already, a
        file was changed, or the URL names no version the configuration builds it from)."""
        record = ctx.ledger.get(ARTIFACT_KIND, self.artifact)
        if record is None:
            return None
        url, members = record.get("url"), record.get("members") or []
        if active_version(ctx.host) is not None or not url or not members:
            return record, None, None
        files = {e["id"]: e for e in ctx.ledger.entries(step=self.step, kind=Kind.FILE)}
        entries = intact(ctx.host, url, files, members, note)
        version = _version_of(ctx, url) if entries else None
        return record, version, entries if version else None

    def pending(self, ctx):
        found = self._found(ctx)
        if found is None:
            return None
        _record, version, _entries = found
        if version is None:
            return (f"forget the record of the single-version install of kubernetes in {BIN_DIR} "
                    "(an earlier release's layout; it cannot be kept: the kubernetes phase installs "
                    "the wanted version, and its files stay recorded for undo)")
        return (f"move kubernetes {version} from {BIN_DIR} into {version_dir(version)}, make it the "
                "active version and link its tools from there (an earlier release's single-version "
                "layout; the same bytes: nothing downloaded, nothing restarted)")

    def apply(self, ctx):
        record, version, entries = self._found(ctx, note=ctx.ledger.record)
        if version is not None:
            self._move(ctx, record["url"], version, entries)
        ctx.ledger.forget(ARTIFACT_KIND, self.artifact)

    def _move(self, ctx, url, version, entries):
        step, directory = self.step, version_dir(version)
        ctx.ledger.record(step, ARTIFACT_KIND, f"{self.artifact}/v{version}", url=url,
                          members=[f"{directory}/{os.path.basename(e['id'])}" for e in entries])
        tracked.make_parents(ctx, step, directory + "/")
        for entry in entries:
            data = ctx.host.read_bytes(entry["id"])
            if data is None or hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise FlexNodeError(f"{entry['id']} changed while it was being copied; run bootstrap again")
            path = f"{directory}/{os.path.basename(entry['id'])}"
            tracked.write_tracked(ctx, step, path, data, 0o755, artifact=self.artifact,
                                  artifact_url=url, sha256=entry["sha256"])
            ctx.ledger.record(step, Kind.FILE, path, fingerprint=fingerprint(ctx.host, path))
        switch(ctx, version)
        for tool in KUBE_BINARIES:
            tracked.link_tracked(ctx, step, f"{BIN_DIR}/{tool}", bin_link(tool))


def _version_of(ctx, url):
    """The Kubernetes version whose download URL, as the configuration builds it, is `url`;
    None when none is (the configured URL or mirror changed since)."""
    facts = ctx.ledger.joined.get("facts") or {}
    candidates = [ctx.config.kubernetes_version, facts.get("kubernetes_version")]
    for match in _VERSION_IN_URL.finditer(url):
        text = match.group()
        candidates += [text[:end] for end in range(len(text), 0, -1)
                       if end == len(text) or text[end] in ".-+"]
    arch = node_arch()
    for version in dict.fromkeys(v for v in candidates if v):
        try:
            if ctx.config.artifact_urls("kubernetes", version, arch)[0] == url:
                return version
        except ValueError:
            continue
    return None
