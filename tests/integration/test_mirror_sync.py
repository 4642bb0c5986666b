"""A mirror we can fill (issue 28): `aks-flex-node mirror sync DIR` fetches what a join needs
from the upstream URLs (here the emulator's artifact host, as the *_url templates name it),
checks each file against the trusted digests (the emulator's stand-ins pinned through
artifact_digests_file, tests/digest_fixtures.py) and lays DIR out as artifact_mirror reads
it; a node then joins from DIR as a file:// mirror without asking the artifact host anything.
"""

import hashlib
import json
import os
import shutil
import stat
import tempfile

from tests import digest_fixtures, harness
from tests import mirror_fixtures as mf

ARCH = digest_fixtures.ARCH
VERSION = "1.30.9"
MIRROR = "/srv/flex-mirror"  # DIR, a node path under the scratch node's root


def test_sync_fills_the_directory_as_artifact_mirror_reads_it(node):
    mf.upstream_config(node, kubernetes_version=VERSION)
    proc, out = node.cli_json("mirror", "sync", MIRROR)
    assert proc.returncode == 0, proc.stderr
    names = mf.names(VERSION)
    directory = node.path(MIRROR)
    assert sorted(os.listdir(directory)) == sorted(names + [n + ".sha256" for n in names] + ["manifest.json"])
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o755
    for name in names:
        data = node.read(f"{MIRROR}/{name}")
        assert data == mf.served(name)
        assert node.read(f"{MIRROR}/{name}.sha256").decode() == f"{hashlib.sha256(data).hexdigest()}  {name}\n"
        assert node.mode(f"{MIRROR}/{name}") == 0o644
    manifest = json.loads(node.read(f"{MIRROR}/manifest.json"))
    by_file = {e["file"]: e for e in manifest["files"]}
    assert sorted(by_file) == sorted(names)
    k8s = by_file[names[0]]
    assert (k8s["artifact"], k8s["version"], k8s["arch"]) == ("kubernetes", VERSION, ARCH)
    assert k8s["sha256"] == hashlib.sha256(mf.served(names[0])).hexdigest()
    assert k8s["size"] == len(mf.served(names[0])) and k8s["source"].startswith(node.emu.artifacts)
    assert k8s["fetched"]
    assert out["fetched"] == len(names)
    # Every file came from its upstream URL, each once.
    for name in names:
        assert len(mf.fetches(node, name)) == 1, name


def test_a_second_sync_fetches_nothing(node):
    mf.upstream_config(node, kubernetes_version=VERSION)
    node.cli("mirror", "sync", MIRROR, check=True)
    before = len(mf.artifact_requests(node))
    manifest = node.read(f"{MIRROR}/manifest.json")
    proc, out = node.cli_json("mirror", "sync", MIRROR)
    assert proc.returncode == 0, proc.stderr
    assert out["fetched"] == 0 and {f["state"] for f in out["files"]} == {"present"}
    assert len(mf.artifact_requests(node)) == before
    fetched = {e["file"]: e["fetched"] for e in json.loads(manifest)["files"]}
    assert {e["file"]: e["fetched"] for e in json.loads(node.read(f"{MIRROR}/manifest.json"))["files"]} == fetched


def test_a_corrupted_file_is_fetched_again_and_only_it(node):
    mf.upstream_config(node, kubernetes_version=VERSION)
    node.cli("mirror", "sync", MIRROR, check=True)
    names = mf.names(VERSION)
    runc = next(n for n in names if n.startswith("runc-"))
    with open(node.path(f"{MIRROR}/{runc}"), "wb") as f:
        f.write(b"#!/bin/sh\necho not runc\n")
    before = {n: len(mf.fetches(node, n)) for n in names}
    proc, out = node.cli_json("mirror", "sync", MIRROR)
    assert proc.returncode == 0, proc.stderr
    assert [f["file"] for f in out["files"] if f["state"] != "present"] == [runc]
    assert node.read(f"{MIRROR}/{runc}") == mf.served(runc)
    assert {n: len(mf.fetches(node, n)) - before[n] for n in names} == {n: int(n == runc) for n in names}


def test_dry_run_lists_what_it_would_fetch_and_changes_nothing(node):
    mf.upstream_config(node, kubernetes_version=VERSION)
    before = node.files()
    requests = len(mf.artifact_requests(node))
    proc, out = node.cli_json("mirror", "sync", MIRROR, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert out["dry_run"] is True and out["fetch"] == len(mf.names(VERSION))
    assert sorted(f["file"] for f in out["files"]) == sorted(mf.names(VERSION))
    assert {f["state"] for f in out["files"]} == {"missing"}
    assert node.files() == before
    assert len(mf.artifact_requests(node)) == requests


def test_versions_and_architectures_given_on_the_command_line(node):
    other = "1.31.4"
    arches = ["amd64", "arm64"]
    wanted = sorted(set(mf.wanted(VERSION) + mf.wanted(other)))
    # The grid pins this machine's architecture only: the other's stand-ins are pinned here.
    mf.upstream_config(node, kubernetes_version="", digests=[
        digest_fixtures.line(a, v, mf.served(mf.name(a, v, arch)), arch=arch) for arch in arches for a, v in wanted])
    proc, out = node.cli_json("mirror", "sync", MIRROR, "--kubernetes-version", VERSION,
                              "--kubernetes-version", f"v{other}", "--arch", "amd64", "--arch", "arm64")
    assert proc.returncode == 0, proc.stdout
    expected = {mf.name(a, v, arch) for arch in arches for a, v in wanted}
    assert len(expected) == 10
    assert {f["file"] for f in out["files"]} == expected
    assert expected <= set(os.listdir(node.path(MIRROR)))


def test_no_version_anywhere_is_a_usage_error(node):
    mf.upstream_config(node, kubernetes_version="")
    proc, out = node.cli_json("mirror", "sync", MIRROR)
    assert proc.returncode == 2 and out["error"] == "usage", proc.stdout
    assert "--kubernetes-version" in out["remedy"]
    assert not os.path.exists(node.path(MIRROR))


def test_a_version_without_a_trusted_digest_is_refused_before_any_fetch(node):
    mf.upstream_config(node, kubernetes_version=VERSION)
    requests = len(mf.artifact_requests(node))
    proc, out = node.cli_json("mirror", "sync", MIRROR, "--kubernetes-version", "1.41.0")
    assert proc.returncode == 1 and out["error"] == "artifact-digest-unknown", proc.stdout
    assert "kubernetes 1.41.0" in out["message"]
    assert len(mf.artifact_requests(node)) == requests
    assert not os.path.exists(node.path(MIRROR))


def test_an_upstream_file_that_is_not_the_pinned_build_is_refused_and_not_kept(node, tmp_path):
    name = mf.name("kubernetes", VERSION, ARCH)
    node.emu.admin("POST", "artifacts", {"name": name, "path": str(mf.other_tarball(tmp_path / name))})
    mf.upstream_config(node, kubernetes_version=VERSION)
    proc, out = node.cli_json("mirror", "sync", MIRROR)
    assert proc.returncode == 1 and out["error"] == "checksum-mismatch", proc.stdout
    assert name not in os.listdir(node.path(MIRROR))
    assert mf.WORK not in os.listdir(node.path(MIRROR))


def test_a_file_in_the_place_of_dir_is_refused(node):
    mf.upstream_config(node, kubernetes_version=VERSION)
    os.makedirs(os.path.dirname(node.path(MIRROR)), exist_ok=True)
    with open(node.path(MIRROR), "w") as f:
        f.write("not a directory\n")
    proc, out = node.cli_json("mirror", "sync", MIRROR)
    assert proc.returncode == 1 and out["error"] == "mirror-dir", proc.stdout
    assert node.read(MIRROR) == b"not a directory\n"


def test_a_node_joins_from_the_filled_directory_as_a_file_mirror(node):
    mf.upstream_config(node, kubernetes_version=VERSION)
    node.cli("mirror", "sync", MIRROR, check=True)
    harness.write_config(node.root, node.emu, node.wrapper,
                         extra={"kubernetes_version": VERSION, "artifact_mirror": f"file://{MIRROR}"})
    before = len(mf.artifact_requests(node))
    proc, out = node.cli_json("bootstrap")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert len(mf.artifact_requests(node)) == before  # nothing asked of the artifact host
    kubelet = node.read(f"/usr/local/lib/aks-flex-node/kubernetes/v{VERSION}/kubelet")
    assert f'VERSION = "{VERSION}"'.encode() in kubelet
    # The mirror's files were copied into the download cache, as a download is kept.
    cached = os.listdir(node.path("/var/cache/aks-flex-node"))
    for name in mf.names(VERSION):
        assert any(c.endswith("-" + name) for c in cached), (name, cached)


def test_no_root_needed_only_a_directory_the_user_may_write(node):
    """A user fills a directory of theirs (a USB stick they mounted); one they may not
    write is refused, with nothing written."""
    root = tempfile.mkdtemp(prefix="mirror-user-", dir="/tmp")
    try:
        mf.unprivileged_root(node, root)
        stick = os.path.join(root, "media/usb")
        os.makedirs(stick, mode=0o755)
        os.chown(stick, mf.NOBODY, mf.NOBODY)
        proc, out = mf.run_as_nobody(node, root, "mirror", "sync", "/media/usb/aks-flex-node")
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        made = os.path.join(stick, "aks-flex-node")
        assert sorted(f["file"] for f in out["files"]) == sorted(mf.names(VERSION))
        assert {os.stat(os.path.join(made, n)).st_uid for n in os.listdir(made)} == {mf.NOBODY}
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o755
        os.makedirs(os.path.join(root, "srv/root-only"), mode=0o755)
        proc, out = mf.run_as_nobody(node, root, "mirror", "sync", "/srv/root-only")
        assert proc.returncode == 1 and out["error"] == "mirror-dir", (proc.stdout, proc.stderr)
        assert os.listdir(os.path.join(root, "srv/root-only")) == []
    finally:
        shutil.rmtree(root)


def test_the_nodes_certificate_need_not_be_on_the_connected_machine(node):
    """The node's configuration with a service principal's certificate (its private key):
    the machine that fills the mirror does not hold it, as it holds no client secret."""
    mf.upstream_config(node, kubernetes_version=VERSION, sp_client_secret_file="",
                       sp_certificate_file="/etc/aks-flex-node/sp-certificate.pem")
    proc, out = node.cli_json("mirror", "sync", MIRROR, "--dry-run")
    assert proc.returncode == 0, proc.stdout
    assert out["fetch"] == len(mf.names(VERSION))
    assert not os.path.exists(node.path("/etc/aks-flex-node/sp-certificate.pem"))
