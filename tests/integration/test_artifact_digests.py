"""Whoever controls the mirror does not control what we install (issue 26): every artifact
is checked against a digest shipped in the package (aks_flex_node/data/artifact-digests)
or pinned by the operator (artifact_digests_file), never against the mirror's `.sha256`.

The emulator serves fake artifacts under real version numbers, so the test configs pin the
emulator's digests (tests/digest_fixtures.py) through the operator's door.
"""

import io
import json
import tarfile

from tests import harness

VERSION = "1.30.9"
NAME = f"kubernetes-node-v{VERSION}-linux-amd64.tar.gz"
KUBE_DIR = f"/usr/local/lib/aks-flex-node/kubernetes/v{VERSION}"


def other_tarball(path):
    """A kubernetes-node tarball that is not the one the configuration pins."""
    with tarfile.open(path, "w:gz") as tar:
        for name in ("kubelet", "kubectl", "kubeadm"):
            data = f"#!/bin/sh\necho swapped {name}\n".encode()
            info = tarfile.TarInfo(f"kubernetes/node/bin/{name}")
            info.mtime, info.mode, info.size = 1700000000, 0o755, len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def installed(node):
    return sorted(p for p in node.files() if p.startswith(KUBE_DIR))


def error_of(proc):
    """The `error` code of a --json run's output (None when it has none)."""
    error = json.loads(proc.stdout).get("error") if proc.stdout.strip().startswith("{") else None
    return error.get("error") if isinstance(error, dict) else error


def fetched(node, name):
    return [r for r in node.emu.requests(path_contains=name)]


def unpinned(node, **values):
    """The node's config without the emulator's digests: only the package's table counts."""
    harness.write_config(node.root, node.emu, node.wrapper, extra={"artifact_digests_file": "", **values})


def test_a_mirror_serving_another_archive_with_a_matching_sha256_is_refused(node, tmp_path):
    # The emulator computes each file's .sha256 from what it serves: the swapped archive's
    # checksum file matches it, as a hostile mirror's would.
    node.emu.admin("POST", "artifacts", {"name": NAME, "path": str(other_tarball(tmp_path / NAME))})
    harness.write_config(node.root, node.emu, node.wrapper, extra={"kubernetes_version": VERSION})
    proc = node.cli("bootstrap", "--phase", "kubernetes", "--json")
    assert proc.returncode != 0, proc.stdout
    assert error_of(proc) == "checksum-mismatch", (proc.stdout, proc.stderr)
    assert installed(node) == []


def test_a_version_no_table_names_is_refused_before_anything_is_downloaded(node):
    harness.write_config(node.root, node.emu, node.wrapper, extra={"kubernetes_version": "1.41.0"})
    proc = node.cli("bootstrap", "--phase", "kubernetes", "--json")
    assert proc.returncode != 0 and error_of(proc) == "artifact-digest-unknown", (proc.stdout, proc.stderr)
    assert fetched(node, "kubernetes-node-v1.41.0") == []
    assert not [p for p in node.files() if p.startswith("/usr/local/lib/aks-flex-node/kubernetes")]


def test_the_shipped_sha256_of_a_release_refuses_another_build_of_it(node):
    # containerd 2.0.4 is in the package's table with the real release's sha256; the
    # emulator's stand-in, served with a .sha256 that matches it, is not that release.
    unpinned(node, containerd_version="2.0.4")
    proc = node.cli("bootstrap", "--phase", "containerd", "--json")
    assert proc.returncode != 0 and error_of(proc) == "checksum-mismatch", (proc.stdout, proc.stderr)
    assert not [p for p in node.files() if p.startswith("/usr/local/bin/containerd")]
    assert fetched(node, "containerd-2.0.4-linux-amd64.tar.gz.sha256") == []  # not even asked for


def test_the_shipped_sha512_of_a_kubernetes_release_refuses_another_build_of_it(node):
    # The CHANGELOG gives a sha512: the mirror's .sha256 names the download, and the whole
    # file is checked against the sha512 before anything staged from it is put in place.
    unpinned(node, kubernetes_version="1.33.5")
    proc = node.cli("bootstrap", "--phase", "kubernetes", "--json")
    assert proc.returncode != 0 and error_of(proc) == "checksum-mismatch", (proc.stdout, proc.stderr)
    assert not [p for p in node.files() if p.startswith("/usr/local/lib/aks-flex-node/kubernetes")]
    assert not [p for p in node.files() if "kubernetes-node-v1.33.5" in p and not p.endswith(".sha256")]


def test_the_operators_pin_takes_precedence_over_the_shipped_digest(node):
    # The default config pins the emulator's containerd 2.0.4 (tests/digest_fixtures.py),
    # which the package's table says is not the release: the operator's word wins.
    proc = node.cli("bootstrap", "--phase", "containerd", "--json")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert node.read("/usr/local/bin/containerd").startswith(b"#!/bin/sh")


def test_a_runtime_version_no_table_names_is_refused_before_anything_changes(node):
    # runc and containerd have digests; the CNI plugins' version has none. Found by
    # preflight, the run stops before a single binary is installed (it installed runc
    # and containerd, then failed at the CNI plugins).
    harness.write_config(node.root, node.emu, node.wrapper, extra={"cni_version": "1.41.0"})
    before = node.files()
    proc = node.cli("bootstrap")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert not [p for p in node.files() - before if p.startswith(("/usr/local", "/opt", "/etc/containerd"))]
    proc, report = node.cli_json("preflight")
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["artifact-digests"]["status"] == "error" and "1.41.0" in checks["artifact-digests"]["message"]
    assert fetched(node, "1.41.0") == []
