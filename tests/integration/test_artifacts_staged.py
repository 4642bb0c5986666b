"""An archive is unpacked while it downloads (steps/artifacts.py, host/staging.py): each
file is staged beside its destination and renamed into place only once the whole archive
has matched its sha256. What a run killed during the download leaves, and what an archive
that does not verify, or holds a member it must not, leaves: nothing the next run or
unbootstrap does not clear, and nothing installed.
"""

import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from tests import digest_fixtures, harness
from tests.harness import REPO

LEDGER = "/var/lib/aks-flex-node/ledger.json"
VERSION = "1.30.9"
NAME = f"kubernetes-node-v{VERSION}-linux-amd64.tar.gz"
KUBE_DIR = f"/usr/local/lib/aks-flex-node/kubernetes/v{VERSION}"
SMALL = {"kubectl": b"#!/bin/sh\necho kubectl\n", "kubeadm": b"#!/bin/sh\necho kubeadm\n"}


def tarball(path, kubelet=b"#!/bin/sh\necho kubelet\n", link=False):
    """A kubernetes-node tarball: kubectl and kubeadm first, then the kubelet (`link`: the
    kubelet a symlink to /etc/passwd)."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, data in (*SMALL.items(), ("kubelet", kubelet)):
            info = tarfile.TarInfo(f"kubernetes/node/bin/{name}")
            info.mtime, info.mode = 1700000000, 0o755
            if name == "kubelet" and link:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
                continue
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def pinned(node, tmp_path, **kw):
    """Serve our tarball as VERSION's and pin the node to it (and to its digest)."""
    path = tarball(tmp_path / NAME, **kw)
    node.emu.admin("POST", "artifacts", {"name": NAME, "path": str(path)})
    harness.write_config(node.root, node.emu, node.wrapper, extra={"kubernetes_version": VERSION},
                         digests=[digest_fixtures.line("kubernetes", VERSION, path.read_bytes(), "amd64")])


def temps(node, directory):
    real = node.path(directory)
    return sorted(n for n in os.listdir(real) if n.endswith(".tmp")) if os.path.isdir(real) else []


def ledger_entries(node, kind):
    if not os.path.exists(node.path(LEDGER)):
        return []
    return [e for e in json.loads(node.read(LEDGER))["entries"] if e["kind"] == kind]


def kill_while_staging(node):
    """Start the kubernetes phase and kill -9 it while the kubelet is half staged (the
    mirror sends slowly); the pid of the killed run."""
    proc = subprocess.Popen([sys.executable, "-m", "aks_flex_node", "bootstrap", "--phase", "kubernetes",
                             "--root", node.root], env=node.env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    kubelet_temp = re.compile(rf"\.kubelet\.{proc.pid}\.\w+\.tmp")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the run ended before it was killed: the mirror was not slow enough"
            assert time.monotonic() < deadline, "the kubelet was never staged"
            staged = [n for n in temps(node, KUBE_DIR) if kubelet_temp.fullmatch(n)]
            if staged and os.path.getsize(node.path(f"{KUBE_DIR}/{staged[0]}")) > 0:
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.pid


@pytest.mark.parametrize("then", ["bootstrap", "unbootstrap"])
def test_a_run_killed_while_it_unpacks_leaves_only_what_the_ledger_names(node, tmp_path, then):
    before = node.files()
    kubelet = os.urandom(4 << 20)
    pinned(node, tmp_path, kubelet=kubelet)
    node.emu.settings(artifact_rate=1 << 20)  # about 4 s for the archive
    pid = kill_while_staging(node)

    # What the killed run left: its three staged files, none in place, and the record
    # that names them with its pid.
    left = temps(node, KUBE_DIR)
    assert {n.split(".")[1] for n in left} == {"kubectl", "kubeadm", "kubelet"}, left
    assert all(f".{pid}." in n for n in left)
    [record] = ledger_entries(node, "staging")
    assert record["pid"] == pid and record["id"] == f"kubernetes/v{VERSION}"
    assert sorted(record["files"]) == sorted(f"{KUBE_DIR}/{t}" for t in ("kubectl", "kubeadm", "kubelet"))
    assert not [e for e in ledger_entries(node, "file") if e["id"].startswith(KUBE_DIR)], \
        "nothing was committed: no file of the version is recorded"
    node.emu.settings(artifact_rate=0)

    proc, plan = node.cli_json("bootstrap", "--dry-run", "--phase", "kubernetes")
    assert proc.returncode == 0, proc.stderr
    [phase] = [p for p in plan["phases"] if p["name"] == "kubernetes"]
    assert phase["changes"][0]["what"] == f"remove what the cut-short install of kubernetes/v{VERSION} staged"

    if then == "bootstrap":
        node.cli("bootstrap", "--phase", "kubernetes", check=True)
        assert temps(node, KUBE_DIR) == [] and ledger_entries(node, "staging") == []
        assert {t: node.read(f"{KUBE_DIR}/{t}") for t in ("kubelet", *SMALL)} == {"kubelet": kubelet, **SMALL}
        assert not any(p["changes"] for p in node.cli_json("bootstrap", "--dry-run", "--phase", "kubernetes")[1]["phases"])
    node.cli("unbootstrap", check=True)
    left = {p for p in node.files() - before if p.startswith(("/usr/local", "/opt", "/var/lib/aks-flex-node/ledger"))}
    assert not left, left


def test_an_archive_that_does_not_match_its_sha256_installs_nothing(node, tmp_path):
    pinned(node, tmp_path)
    # The trusted digest (artifact_digests_file) is another's: the bytes are staged as they
    # arrive, and none of them lands.
    harness.write_config(node.root, node.emu, node.wrapper, extra={"kubernetes_version": VERSION},
                         digests=[f"kubernetes {VERSION} amd64 sha256:{'0' * 64}"])
    before = {p for p in node.files() if p.startswith(("/usr/local", "/opt"))}
    proc = node.cli("bootstrap", "--phase", "kubernetes")
    assert proc.returncode != 0 and "sha256 mismatch" in proc.stderr, proc.stderr
    assert {p for p in node.files() if p.startswith(("/usr/local", "/opt"))} == before, \
        "not even the version's directory stays"
    assert ledger_entries(node, "staging") == []
    assert not [e for e in ledger_entries(node, "parent_dir") if e["id"].startswith("/usr/local/lib")]


def test_an_archive_with_a_link_after_a_file_installs_nothing(node, tmp_path):
    # kubectl and kubeadm are staged before the link shows: they never land.
    pinned(node, tmp_path, link=True)
    before = {p for p in node.files() if p.startswith(("/usr/local", "/opt"))}
    proc = node.cli("bootstrap", "--phase", "kubernetes")
    assert proc.returncode != 0
    assert "member kubernetes/node/bin/kubelet is a symlink to '/etc/passwd': expected a regular file" \
        in proc.stderr, proc.stderr
    assert {p for p in node.files() if p.startswith(("/usr/local", "/opt"))} == before
    assert ledger_entries(node, "staging") == [] and ledger_entries(node, "artifact") == []
