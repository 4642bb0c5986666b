"""The emulator's artifact digests, pinned the way an operator pins their own builds.

The shipped table (aks_flex_node/data/artifact-digests) holds the real releases' digests;
the emulator (tests/emulator/artifacts.py) serves deterministic stand-ins under real version
numbers, which match none of them. So every test configuration names a digest file
(artifact_digests_file) listing the stand-ins' digests, as an operator's config names the
digests of builds of their own: the code under test takes the operator's door, not a test one.

The emulator makes an artifact for any version a test asks for (a cluster's version, an
upgrade's target), so the list covers a grid of versions for this machine's architecture:
every Kubernetes 1.20.0 to 1.40.20 and the runtime versions near the defaults. Computing it
takes a few seconds, so it is kept in build/ under a name derived from the emulator's source:
a change there makes a new list.
"""

import functools
import hashlib
import os
import platform
import tempfile

from tests.emulator import artifacts as emulator_artifacts

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), "amd64")
# The node path test configurations name (written under each root by write_digests).
NODE_PATH = "/etc/aks-flex-node/artifact-digests"

KUBERNETES = [f"1.{minor}.{patch}" for minor in range(20, 41) for patch in range(21)]
RUNTIME = {
    "containerd": [f"1.7.{p}" for p in range(31)] + [f"2.{m}.{p}" for m in range(3) for p in range(16)],
    "runc": [f"1.{m}.{p}" for m in range(1, 5) for p in range(21)],
    "cni": [f"1.{m}.{p}" for m in range(10) for p in range(6)],
}
FILENAMES = {  # the emulator's names (config/model.py MIRROR_FILENAMES)
    "kubernetes": "kubernetes-node-v{version}-linux-{arch}.tar.gz",
    "containerd": "containerd-{version}-linux-{arch}.tar.gz",
    "runc": "runc-v{version}.{arch}",
    "cni": "cni-plugins-linux-{arch}-v{version}.tgz",
}


def line(artifact, version, data, arch=ARCH):
    """A digest line for `data` served as `artifact` `version`."""
    return f"{artifact} {version} {arch} sha256:{hashlib.sha256(data).hexdigest()}"


def _source_key():
    digest = hashlib.sha256()
    for path in (emulator_artifacts.__file__, str(emulator_artifacts.KUBELET_SOURCE), __file__):
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def emulator_digests():
    """The digest lines of the emulator's artifacts for the versions of the grid (text)."""
    cached = os.path.join(REPO, "build", f"emulator-digests-{ARCH}-{_source_key()}.txt")
    try:
        with open(cached, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        pass
    lines = ["# The test emulator's stand-in artifacts (tests/digest_fixtures.py)"]
    wanted = [("kubernetes", v) for v in KUBERNETES] + [(a, v) for a, vs in RUNTIME.items() for v in vs]
    for artifact, version in wanted:
        lines.append(line(artifact, version, emulator_artifacts.build(FILENAMES[artifact].format(version=version, arch=ARCH))))
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cached), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, cached)  # whole or not at all: parallel sessions may race to write it
    return text


def with_lines(extra):
    """The emulator's digests with the lines `extra` in place of the grid's for the same
    artifact, version and arch (a file a test placed in the mirror, another mirror's)."""
    text = emulator_digests()
    if not extra:
        return text
    replaced = {tuple(e.split()[:3]) for e in extra}
    return "".join(kept + "\n" for kept in text.splitlines() if tuple(kept.split()[:3]) not in replaced) + \
        "".join(e + "\n" for e in extra)


def write_digests(root, extra=(), node_path=NODE_PATH):
    """Write with_lines(extra) to `node_path` under `root`, mode 0644; the node path, for
    artifact_digests_file."""
    text = with_lines(extra)
    path = os.path.join(root, node_path.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, 0o644)
    return node_path
