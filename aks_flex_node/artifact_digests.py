"""The digests we trust for release artifacts: a table shipped in the package, and the
operator's pins in the same form.

Whoever serves an archive must not also say what it should hash to: a mirror (or a release
page) that controls both controls what we install. So the digest of every artifact version we
support ships inside this package (aks_flex_node/data/artifact-digests), covered by our APT
repository's signature as pkgs.k8s.io's Release signature covers its packages, and an operator
with their own builds lists theirs in a file of the same form (artifact_digests_file,
docs/configuration.md). A version neither names is refused: there is nothing to check it
against. A checksum file next to an artifact is never trusted over these.

A table is text, one digest a line, `#` comments and blank lines ignored:

    <artifact> <version> <arch> <algorithm>:<hex>
    containerd 2.0.4 amd64 sha256:...

artifact one of ARTIFACTS, arch amd64 or arm64, algorithm sha256 or sha512 (the Kubernetes
CHANGELOG publishes sha512 only). tools/refresh-artifact-digests.py regenerates the shipped
one from the upstream sources with each release (docs/configuration.md says how).

Standard library only: read when an artifact is installed, and by the config's checks.
"""

import functools
import importlib.resources
import re
from typing import NamedTuple

from aks_flex_node.errors import FlexNodeError

ARTIFACTS = ("kubernetes", "containerd", "runc", "cni")
ARCHES = ("amd64", "arm64")
ALGORITHMS = {"sha256": 64, "sha512": 128}  # name -> length of its hex digest
SHIPPED = "data/artifact-digests"
# A release version as the projects tag them, without the "v": 2.0.4, 1.31.0-rc.1.
_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}(?:-[0-9A-Za-z.-]{1,40})?", re.ASCII)
_HEX = re.compile(r"[0-9a-f]+", re.ASCII)
LINE_EXPECTED = "'<artifact> <version> <arch> <sha256|sha512>:<hex>' (e.g. 'runc 1.1.12 amd64 sha256:<64 hex>')"


class DigestTableError(FlexNodeError):
    """A table that does not parse: `source`, `line` (its number) and what was expected."""

    code = "digest-table"

    def __init__(self, source, line, text, expected):
        super().__init__(f"{source} line {line} is {text[:120]!r}: expected {expected}",
                         remedy="fix that line (docs/configuration.md, artifact_digests_file)")
        self.source, self.line = source, line


class ArtifactDigestUnknown(FlexNodeError):
    """A version neither the package's table nor the operator's pins name: nothing to check
    its bytes against, so it is not downloaded at all."""

    code = "artifact-digest-unknown"

    def __init__(self, artifact, version, arch, pins_file):
        pins = f"artifact_digests_file ({pins_file})" if pins_file else "artifact_digests_file (not set)"
        super().__init__(
            f"no trusted digest for {artifact} {version} ({arch}): neither this package "
            f"(aks_flex_node/{SHIPPED}) nor {pins} names it",
            remedy=f"choose a version this release knows, or add '{artifact} {version} {arch} sha256:<hex>' "
                   "(the digest of a build you trust) to artifact_digests_file (docs/configuration.md)")
        self.artifact, self.version, self.arch = artifact, version, arch


class Digest(NamedTuple):
    algorithm: str  # sha256 or sha512
    hex: str  # lowercase
    source: str  # where it was read: the package's table or the operator's file


def parse(text, source):
    """{(artifact, version, arch): Digest} of a table's `text`; DigestTableError naming
    `source` and the line for the first that is not a digest line, or that names a
    digest already given (two digests for one file: one of them is wrong)."""
    table = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 4:
            raise DigestTableError(source, number, raw, LINE_EXPECTED)
        artifact, version, arch, digest = fields
        if artifact not in ARTIFACTS:
            raise DigestTableError(source, number, raw, f"an artifact among {', '.join(ARTIFACTS)}")
        if not _VERSION.fullmatch(version):
            raise DigestTableError(source, number, raw, "a release version such as 1.31.2 (no 'v')")
        if arch not in ARCHES:
            raise DigestTableError(source, number, raw, f"an architecture among {', '.join(ARCHES)}")
        algorithm, _, hexdigest = digest.partition(":")
        hexdigest = hexdigest.lower()
        if algorithm not in ALGORITHMS or len(hexdigest) != ALGORITHMS[algorithm] or not _HEX.fullmatch(hexdigest):
            raise DigestTableError(source, number, raw, "sha256:<64 hexadecimal characters> or "
                                                        "sha512:<128 hexadecimal characters>")
        key = (artifact, version, arch)
        if key in table:
            raise DigestTableError(source, number, raw, f"one digest for {artifact} {version} {arch} "
                                                        "(an earlier line gives it already)")
        table[key] = Digest(algorithm, hexdigest, source)
    return table


@functools.lru_cache(maxsize=1)
def shipped():
    """The package's table (read once a process)."""
    name = f"aks_flex_node/{SHIPPED}"
    text = importlib.resources.files("aks_flex_node").joinpath(SHIPPED).read_text("utf-8")
    return parse(text, name)


def trusted(pins, artifact, version, arch):
    """The Digest `artifact` `version` for `arch` must have: the operator's pin (`pins`, a
    parsed table, or None) first, they being the operator's own word for a build of theirs
    (or the vendor's that they vetted), else the package's; None when neither names it."""
    key = (artifact, version, arch)
    if pins and key in pins:
        return pins[key]
    return shipped().get(key)
