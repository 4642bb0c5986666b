"""The release-file mirror: names, members, checksums, version lines, download records, corruption."""

import hashlib
import io
import os
import subprocess
import tarfile
import time

import pytest

from tests.emulator import constants as C

ARCHIVES = [
    ("kubernetes-node-v1.30.4-linux-amd64.tar.gz",
     ["kubernetes/node/bin/kubelet", "kubernetes/node/bin/kubectl", "kubernetes/node/bin/kubeadm"]),
    ("containerd-2.0.4-linux-amd64.tar.gz", ["bin/containerd", "bin/ctr", "bin/containerd-shim-runc-v2"]),
    ("cni-plugins-linux-arm64-v1.5.1.tgz", ["./bridge", "./host-local", "./loopback", "./portmap"]),
]


def fetch(emu, name):
    status, headers, body = emu.http("GET", f"{emu.artifacts}/{name}")
    return status, body


@pytest.mark.parametrize("name,members", ARCHIVES)
def test_archives_hold_the_upstream_members_and_match_their_checksum(fresh_emulator, name, members):
    status, data = fetch(fresh_emulator, name)
    assert status == 200
    status, checksum = fetch(fresh_emulator, f"{name}.sha256")
    assert status == 200 and checksum == f"{hashlib.sha256(data).hexdigest()}  {name}\n"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: m for m in tar.getmembers() if m.isfile()}
    assert sorted(files) == sorted(members)
    assert all(m.mode & 0o111 for m in files.values())


def _extract(data, member, directory):
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        path = os.path.join(directory, os.path.basename(member))
        with open(path, "wb") as f:
            f.write(tar.extractfile(member).read())
    os.chmod(path, 0o755)
    return path


@pytest.mark.parametrize("name,member,argv,expected", [
    ("kubernetes-node-v1.31.2-linux-amd64.tar.gz", "kubernetes/node/bin/kubelet", ["--version"], "Kubernetes v1.31.2"),
    ("kubernetes-node-v1.31.2-linux-amd64.tar.gz", "kubernetes/node/bin/kubectl", ["version", "--client"],
     "Client Version: v1.31.2"),
    ("kubernetes-node-v1.31.2-linux-amd64.tar.gz", "kubernetes/node/bin/kubeadm", ["version", "-o", "short"], "v1.31.2"),
    ("containerd-2.0.4-linux-amd64.tar.gz", "bin/containerd", ["--version"],
     "containerd github.com/containerd/containerd/v2 v2.0.4 "),
    ("containerd-1.7.20-linux-amd64.tar.gz", "bin/containerd", ["--version"],
     "containerd github.com/containerd/containerd v1.7.20 "),
    ("cni-plugins-linux-amd64-v1.5.1.tgz", "./bridge", [], "CNI bridge plugin v1.5.1"),
])
def test_binaries_print_the_real_tools_version_lines(fresh_emulator, tmp_path, name, member, argv, expected):
    _, data = fetch(fresh_emulator, name)
    path = _extract(data, member, tmp_path)
    out = subprocess.run([path, *argv], capture_output=True, text=True, timeout=10, check=True).stdout
    assert out.startswith(expected)


def test_runc_is_a_single_executable_file(fresh_emulator, tmp_path):
    status, data = fetch(fresh_emulator, "runc-v1.1.12.amd64")
    assert status == 200 and data.startswith(b"#!/bin/sh")
    path = tmp_path / "runc"
    path.write_bytes(data)
    path.chmod(0o755)
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10).stdout
    assert out.splitlines()[0] == "runc version 1.1.12"


def test_containerd_runs_until_killed(fresh_emulator, tmp_path):
    _, data = fetch(fresh_emulator, "containerd-2.0.4-linux-amd64.tar.gz")
    proc = subprocess.Popen([_extract(data, "bin/containerd", tmp_path)])
    try:
        time.sleep(0.3)
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def test_artifacts_are_reproducible_and_every_download_is_recorded(fresh_emulator):
    name = "kubernetes-node-v1.30.4-linux-arm64.tar.gz"
    first, second = fetch(fresh_emulator, name)[1], fetch(fresh_emulator, name)[1]
    assert first == second
    assert fetch(fresh_emulator, "kubernetes-node-linux-amd64.tar.gz")[0] == 404  # no version: not a release name
    downloads = fresh_emulator.state()["artifact_downloads"]
    assert [(d["file"], d["found"]) for d in downloads] == [
        (name, True), (name, True), ("kubernetes-node-linux-amd64.tar.gz", False)]


def test_corrupt_fault_breaks_the_checksum_once(fresh_emulator):
    name = "runc-v1.1.12.amd64"
    fresh_emulator.faults([{"match": {"server": "artifacts", "path_regex": r"runc-v1\.1\.12\.amd64$", "times": 1},
                            "corrupt": True}])
    _, checksum = fetch(fresh_emulator, f"{name}.sha256")
    _, bad = fetch(fresh_emulator, name)
    _, good = fetch(fresh_emulator, name)
    assert hashlib.sha256(bad).hexdigest() != checksum.split()[0]
    assert hashlib.sha256(good).hexdigest() == checksum.split()[0] and len(bad) == len(good)


def test_artifacts_need_no_authentication_but_arm_does(fresh_emulator):
    assert fetch(fresh_emulator, "runc-v1.1.12.amd64")[0] == 200
    status, headers, body = fresh_emulator.http(
        "GET", f"{fresh_emulator.arm}/subscriptions/{C.SUBSCRIPTION_ID}?api-version=2022-12-01")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer authorization_uri=")
    assert body["error"]["code"] == "AuthenticationFailed"


# -- served as a CDN or blob store serves a file (RFC 9110) --------------------------------

KUBE = "kubernetes-node-v1.30.4-linux-amd64.tar.gz"


def test_a_file_carries_a_strong_validator_and_accepts_ranges(fresh_emulator):
    status, headers, data = fresh_emulator.http("GET", f"{fresh_emulator.artifacts}/{KUBE}")
    assert status == 200 and headers["Accept-Ranges"] == "bytes"
    assert headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"', "strong: no W/ prefix"
    assert headers["Last-Modified"].endswith(" GMT")


def test_a_range_gets_206_with_its_content_range_and_if_range_guards_it(fresh_emulator):
    emu = fresh_emulator
    _, headers, data = emu.http("GET", f"{emu.artifacts}/{KUBE}")
    url, etag, size = f"{emu.artifacts}/{KUBE}", headers["ETag"], len(data)
    status, got_headers, part = emu.http("GET", url, headers={"Range": "bytes=100-", "If-Range": etag})
    assert status == 206 and part == data[100:]
    assert got_headers["Content-Range"] == f"bytes 100-{size - 1}/{size}"
    status, got_headers, part = emu.http("GET", url, headers={"Range": "bytes=0-9"})
    assert status == 206 and part == data[:10] and got_headers["Content-Range"] == f"bytes 0-9/{size}"
    # Another version's validator: the whole file, 200 (RFC 9110 section 13.1.5).
    status, _, whole = emu.http("GET", url, headers={"Range": "bytes=100-", "If-Range": '"another"'})
    assert status == 200 and whole == data
    status, got_headers, _ = emu.http("GET", url, headers={"Range": f"bytes={size}-"})
    assert status == 416 and got_headers["Content-Range"] == f"bytes */{size}"


def test_a_placed_file_is_served_with_its_checksum_at_the_configured_rate(fresh_emulator, tmp_path):
    emu = fresh_emulator
    body = os.urandom(256 * 1024)
    path = tmp_path / "big.tar.gz"
    path.write_bytes(body)
    emu.admin("POST", "artifacts", {"name": "kubernetes-node-v1.30.9-linux-amd64.tar.gz", "path": str(path)})
    emu.settings(artifact_rate=512 * 1024)
    started = time.monotonic()
    status, _, got = emu.http("GET", f"{emu.artifacts}/kubernetes-node-v1.30.9-linux-amd64.tar.gz")
    took = time.monotonic() - started
    assert status == 200 and got == body
    assert took >= 0.4, f"256 KiB at 512 KiB/s took {took:.2f} s"
    _, _, checksum = emu.http("GET", f"{emu.artifacts}/kubernetes-node-v1.30.9-linux-amd64.tar.gz.sha256")
    assert checksum.split()[0] == hashlib.sha256(body).hexdigest()


def test_a_reset_forgets_placed_files_and_serves_the_generated_artifact_again(fresh_emulator, tmp_path):
    """One test's hostile or real-size archive must not reach the next test on this emulator."""
    emu = fresh_emulator
    name = "cni-plugins-linux-amd64-v1.9.1.tgz"
    generated = fetch(emu, name)[1]
    path = tmp_path / name
    path.write_bytes(b"placed by a test")
    emu.admin("POST", "artifacts", {"name": name, "path": str(path)})
    assert fetch(emu, name)[1] == b"placed by a test"
    emu.reset()
    assert fetch(emu, name)[1] == generated


def test_our_downloader_resumes_a_dropped_transfer_with_a_range(fresh_emulator, tmp_path):
    """The download cut after 100 kB (the truncate fault, once): the second GET asks for the
    rest with Range and If-Range, and the bytes sent in all are the file's, not twice that."""
    from aks_flex_node.host import Downloader
    from aks_flex_node.http_policy import HttpPolicy

    emu = fresh_emulator
    body = os.urandom(400_000)
    path = tmp_path / "big.tar.gz"
    path.write_bytes(body)
    name = "kubernetes-node-v1.30.9-linux-amd64.tar.gz"
    emu.admin("POST", "artifacts", {"name": name, "path": str(path)})
    emu.faults([{"match": {"server": "artifacts", "path_regex": r"\.tar\.gz$", "times": 1}, "truncate": 100_000}])
    downloader = Downloader(tmp_path / "cache", policy=HttpPolicy(ca_bundle=emu.ca_bundle), backoff=0.01)
    got = downloader.fetch(f"{emu.artifacts}/{name}", hashlib.sha256(body).hexdigest())
    assert got.read_bytes() == body
    gets = [d for d in emu.state()["artifact_downloads"] if d["file"] == name]
    assert [d["range"] for d in gets] == [None, "bytes=100000-"]
