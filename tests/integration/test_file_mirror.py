"""artifact_mirror = file:///path (issue 28): a USB stick or an NFS mount as the mirror. The
same names and the same trusted digests as an https mirror; the file is read by the careful
read (no link followed, no FIFO waited on, a regular file, bounded) and the `.sha256` beside
it is never read. What cannot be used is refused naming artifact_mirror and the file, and
nothing is installed.
"""

import hashlib
import os

from tests import harness
from tests import mirror_fixtures as mf

VERSION = "1.30.9"
MIRROR = "/srv/usb"
NAME = mf.name("kubernetes", VERSION)
KUBE_DIR = f"/usr/local/lib/aks-flex-node/kubernetes/v{VERSION}"


def file_mirror(node, **values):
    """The node's configuration with the local mirror; its directory holds the emulator's
    files for a join of VERSION, each with its .sha256 (what mirror sync writes)."""
    directory = node.path(MIRROR)
    os.makedirs(directory, exist_ok=True)
    for name in mf.names(VERSION):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(mf.served(name))
    harness.write_config(node.root, node.emu, node.wrapper,
                         extra={"kubernetes_version": VERSION, "artifact_mirror": f"file://{MIRROR}", **values})
    return directory


def kubernetes_phase(node):
    proc, out = node.cli_json("bootstrap", "--phase", "kubernetes")
    error = out.get("error") if isinstance(out.get("error"), dict) else {"error": out.get("error")}
    return proc, error


def installed(node):
    return sorted(p for p in node.files() if p.startswith(KUBE_DIR))


def cached(node):
    return [n for n in os.listdir(node.path("/var/cache/aks-flex-node")) if NAME in n] \
        if os.path.isdir(node.path("/var/cache/aks-flex-node")) else []


def test_a_file_mirror_installs_without_asking_the_artifact_host(node):
    file_mirror(node)
    before = len(mf.artifact_requests(node))
    proc, error = kubernetes_phase(node)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert f'VERSION = "{VERSION}"'.encode() in node.read(f"{KUBE_DIR}/kubelet")
    assert len(mf.artifact_requests(node)) == before
    assert len(cached(node)) == 1


def test_a_swapped_archive_with_a_matching_sha256_beside_it_is_refused(node, tmp_path):
    directory = file_mirror(node)
    swapped = mf.other_tarball(os.path.join(directory, NAME))
    with open(swapped, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(directory, NAME + ".sha256"), "w") as f:  # a hostile stick agrees with itself
        f.write(f"{digest}  {NAME}\n")
    proc, error = kubernetes_phase(node)
    assert proc.returncode == 1 and error["error"] == "checksum-mismatch", (proc.stdout, proc.stderr)
    assert NAME in error["message"] and "artifact_mirror" in error["remedy"]
    assert installed(node) == [] and cached(node) == []


def test_a_missing_file_is_refused_naming_the_setting_and_the_file(node):
    directory = file_mirror(node)
    os.unlink(os.path.join(directory, NAME))
    proc, error = kubernetes_phase(node)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert (error["error"], error["reason"], error["field"]) == ("mirror-file", "absent", "artifact_mirror")
    assert error["path"] == f"{MIRROR}/{NAME}" and f"{MIRROR}/{NAME}" in error["message"]
    assert installed(node) == [] and cached(node) == []


def test_a_directory_a_fifo_or_a_link_in_the_files_place_is_refused(node, tmp_path):
    directory = file_mirror(node)
    path = os.path.join(directory, NAME)
    target = tmp_path / "elsewhere.tar.gz"
    target.write_bytes(mf.served(NAME))  # the right bytes: a link is refused all the same
    for make, reason in ((os.mkdir, "not-regular"), (os.mkfifo, "not-regular"),
                         (lambda p: os.symlink(target, p), "symlink")):
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        elif os.path.lexists(path):
            os.unlink(path)
        make(path)
        proc, error = kubernetes_phase(node)  # a FIFO is never waited on: the run ends
        assert proc.returncode == 1, (make, proc.stdout, proc.stderr)
        assert (error["error"], error["reason"]) == ("mirror-file", reason), (make, error)
        assert installed(node) == [] and cached(node) == []


def test_a_relative_or_remote_file_url_is_a_configuration_error(node):
    for value in ("file://srv/usb", "file:srv/usb", "file://nas.example/srv/usb", "file:///srv/../usb",
                  "file:///srv/usb?x=1"):
        harness.write_config(node.root, node.emu, node.wrapper, extra={"artifact_mirror": value})
        before = node.files()
        proc, out = node.cli_json("bootstrap")
        assert proc.returncode == 2 and out["error"] == "config", (value, proc.stdout)
        assert [(p["key"], p["value"]) for p in out["problems"]] == [("artifact_mirror", value)]
        assert node.files() == before
