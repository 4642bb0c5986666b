"""What the mirror tests share: a configuration whose *_url templates name the emulator's
artifact host (the "upstream" `mirror sync` fetches from), the names a join's mirror holds,
the bytes the emulator serves under them, and its request log of that host."""

import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

from tests import digest_fixtures, harness
from tests.emulator import artifacts as emulator_artifacts

ARCH = digest_fixtures.ARCH
FILENAMES = digest_fixtures.FILENAMES  # config/model.py MIRROR_FILENAMES
WORK = ".aks-flex-node-sync"  # commands/mirror.py WORK_DIR
# The configuration's runtime versions (configspec.ini defaults), as the tests' configs keep them.
RUNTIME = (("containerd", "2.0.4"), ("runc", "1.1.12"), ("cni", "1.9.1"))


def name(artifact, version, arch=ARCH):
    return FILENAMES[artifact].format(version=version, arch=arch)


def wanted(kubernetes_version):
    """(artifact, version) of every file a join of `kubernetes_version` needs."""
    return [("kubernetes", kubernetes_version), *RUNTIME]


def names(kubernetes_version, arch=ARCH):
    return [name(a, v, arch) for a, v in wanted(kubernetes_version)]


def served(filename):
    """The bytes the emulator serves as `filename` (tests/emulator/artifacts.py)."""
    return emulator_artifacts.build(filename)


def upstream_config(node, digests=(), **values):
    """The node's configuration with every *_url template on the emulator's artifact host
    and no artifact_mirror: what a connected machine's configuration says for mirror sync."""
    base = node.emu.artifacts.rstrip("/")
    templates = {f"{artifact}_url": f"{base}/{template}" for artifact, template in FILENAMES.items()}
    templates.update({f"{artifact}_sha256_url": "{url}.sha256" for artifact in FILENAMES})
    harness.write_config(node.root, node.emu, node.wrapper, digests=digests,
                         extra={"artifact_mirror": "", **templates, **values})


def artifact_requests(node):
    """Every request the emulator's artifact host answered so far."""
    return [r for r in node.emu.requests() if r["server"] == "artifacts"]


def fetches(node, filename):
    """The GETs of `filename` itself (not its .sha256) from the artifact host."""
    return [r for r in artifact_requests(node) if r["path"].rsplit("/", 1)[-1] == filename]


def other_tarball(path, names=("kubelet", "kubectl", "kubeadm")):
    """A kubernetes-node tarball that is not the one the configuration pins."""
    with tarfile.open(path, "w:gz") as tar:
        for member in names:
            data = f"#!/bin/sh\necho swapped {member}\n".encode()
            info = tarfile.TarInfo(f"kubernetes/node/bin/{member}")
            info.mtime, info.mode, info.size = 1700000000, 0o755, len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


NOBODY = 65534  # nobody:nogroup on Debian (base-passwd)


def unprivileged_root(node, directory):
    """A root prefix at `directory` (a world-searchable place, unlike pytest's tmp_path)
    whose configuration, owned by nobody, names the emulator's artifact host as upstream:
    what a user's own configuration on a connected machine is."""
    os.makedirs(directory, mode=0o755, exist_ok=True)
    os.chmod(directory, 0o755)
    base = node.emu.artifacts.rstrip("/")
    templates = {f"{artifact}_url": f"{base}/{template}" for artifact, template in FILENAMES.items()}
    config = harness.write_config(str(directory), node.emu, node.wrapper,
                                  extra={"artifact_mirror": "", "kubernetes_version": "1.30.9", **templates})
    os.chown(config, NOBODY, NOBODY)
    os.chmod(os.path.join(directory, harness.CA_PATH.lstrip("/")), 0o644)
    for dirpath, dirnames, _ in os.walk(directory):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)


def run_as_nobody(node, root, *args):
    """The CLI run as nobody (setpriv(1), util-linux), with --root `root` and --json. Skips
    when this stack's interpreter cannot be run by nobody at all (a Python built under
    /root, as the Ubuntu stacks' are here): what is tested is our code, not that install."""
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable]
    env = dict(node.env, HOME="/nonexistent")
    probe = subprocess.run([*as_nobody, "-c", "import aks_flex_node"], env=env, cwd=harness.REPO,
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run this stack's Python ({sys.executable}): {probe.stderr.strip()[-200:]}")
    argv = [*as_nobody, "-m", "aks_flex_node", *args, "--root", str(root), "--json"]
    proc = subprocess.run(argv, env=env, cwd=harness.REPO, capture_output=True, text=True, timeout=300)
    try:
        return proc, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
