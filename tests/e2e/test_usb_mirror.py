"""Issue 28, "from an empty USB stick to a joined node" (docs/air-gapped.md, "Fill a mirror"
and "Use the mirror"), as an operator does it:

- on the connected machine (this host), `aks-flex-node mirror sync DIR` (the tree's CLI, not
  the .deb) with the configuration the node will use, whose *_url templates name the e2e
  artifact mirror (tests/e2e/mirror.py: Debian's containerd, runc and CNI plugins repacked
  as the release files, the emulator's stand-in Kubernetes tarball) as "upstream", and the
  digests of what it serves pinned (artifact_digests_file), fills DIR on the "stick";
- the stick is bound read-only into the booted node at /media/usb, as `mount -o ro` would;
- the node, whose network namespace reaches only the emulator and the private registry (its
  pause image: preflight probes the image registry, tests/e2e/registry.py), installs the
  package with `artifact_mirror = file:///media/usb/aks-flex-node` and joins.

The artifact mirror is not forwarded into the node's namespace: a connection to its port is
refused there, and its request log shows nothing asked after the sync. The emulator's
artifact host (the one the e2e mirror forwards the Kubernetes tarball from) shares the
emulator's port, so its log is checked too: nothing asked during the install.
"""

import json
import subprocess

import pytest

from aks_flex_node.config import MIRROR_FILENAMES
from aks_flex_node.paths import SECRET
from tests import harness
from tests.e2e import container as ct
from tests.e2e import node as n
from tests.e2e import registry as r
from tests.emulator import constants as C

pytestmark = pytest.mark.e2e

STICK = "/media/usb"
DIR = "aks-flex-node"  # the mirror's directory on the stick
PAUSE = "mcr.microsoft.com/oss/kubernetes/pause:3.9"
REGISTRY_CA = "/usr/local/share/aks-e2e/registry-ca.pem"
CACHE = "/var/cache/aks-flex-node"


def node_configuration(emulator, mirror, registry):
    """What the node's configuration file says (before the preseed's answers join it)."""
    return {**n.endpoint_settings(emulator, mirror), "kubernetes_version": C.K8S_VERSION,
            "artifact_mirror": f"file://{STICK}/{DIR}", "pause_image": PAUSE,
            "registry_mirrors": f"mcr.microsoft.com={registry.origin}", "registry_ca_file": REGISTRY_CA}


def connected_configuration(emulator, mirror, registry, directory):
    """The node's configuration as the connected machine holds it: the answers the preseed
    gives the node written in, the files it names at this machine's paths, and the *_url
    templates naming the e2e artifact mirror, the "upstream" here."""
    answers = n.preseed_answers()
    values = {**node_configuration(emulator, mirror, registry),
              **{key: answers[key][1] for key in ("tenant_id", "cluster_resource_id", "subscription_id",
                                                  "auth_method", "sp_client_id", "machine_name")},
              # Where debconf puts the node's secret: named, not needed here (it is the node's).
              "sp_client_secret_file": SECRET,
              "ca_bundle": emulator.ca_bundle, "artifact_digests_file": str(directory / "artifact-digests"),
              "registry_ca_file": str(registry.ca.cert)}
    for artifact, template in MIRROR_FILENAMES.items():
        values[f"{artifact}_url"] = f"{mirror.url}/{template}"
        values[f"{artifact}_sha256_url"] = "{url}.sha256"
    (directory / "artifact-digests").write_text(mirror.digests())
    path = directory / "aks-flex-node.conf"
    path.write_text(harness.render_config(values))
    path.chmod(0o600)
    return path


def mirror_sync(config, directory, *args):
    """`aks-flex-node mirror sync` of the tree, run here as on the connected machine."""
    proc = subprocess.run(["/usr/bin/python3", "-m", "aks_flex_node", "mirror", "sync", str(directory),
                           "--config", str(config), "--json", *args],
                          cwd=ct.REPO, env={"PATH": ct.SYSPATH, "LANG": "C.UTF-8", "HOME": "/root"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def artifact_requests(emulator):
    return [q for q in emulator.state()["requests"] if q["server"] == "artifacts"]


def test_a_node_joins_from_a_usb_stick_filled_by_mirror_sync(boot_node, repo, mirror, private_registry,
                                                            fresh_emulator, tmp_path):
    emulator, registry = fresh_emulator, private_registry
    pause = r.oci_image(tmp_path / "pause", {"pause": b"#!/bin/true\n"}, tag="3.9")
    registry.push(pause, "oss/kubernetes/pause:3.9")

    # The connected machine: an empty stick, filled from "upstream" by the tree's CLI.
    stick = tmp_path / "usb"
    stick.mkdir()
    config = connected_configuration(emulator, mirror, registry, tmp_path)
    asked = len(mirror.requests)
    out = mirror_sync(config, stick / DIR, "--kubernetes-version", C.K8S_VERSION)
    versions = {"kubernetes": C.K8S_VERSION, **mirror.versions}
    names = sorted(MIRROR_FILENAMES[a].format(version=v, arch="amd64") for a, v in versions.items())
    assert out["fetched"] == len(names) == 4, out
    assert sorted(f["file"] for f in out["files"]) == names
    assert sorted(p.name for p in (stick / DIR).iterdir()) == sorted(
        names + [f"{name}.sha256" for name in names] + ["manifest.json"])
    assert sorted(mirror.requests[asked:]) == names  # each file once, from the upstream
    manifest = {e["file"]: e for e in json.loads((stick / DIR / "manifest.json").read_text())["files"]}
    assert sorted(manifest) == names

    # The node: the stick mounted read-only, no route to the artifact mirror.
    node = boot_node(repo, reach_mirror=False, extra_ports=[registry.port], binds=[(str(stick), STICK, True)])
    written = node.c.run(["touch", f"{STICK}/{DIR}/written-on-the-node"], check=False)
    assert written.returncode != 0 and not (stick / DIR / "written-on-the-node").exists()
    mirror_port = int(mirror.url.rsplit(":", 1)[1])
    probe = node.c.run(["python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {mirror_port}), 10)"],
                       check=False)
    assert probe.returncode != 0 and "ConnectionRefusedError" in probe.stderr, probe.stderr
    node.c.copy_in(registry.ca.cert, REGISTRY_CA, 0o644)
    node.write_config(node_configuration(emulator, mirror, registry))
    node.preseed(n.preseed_answers())
    before_install = len(artifact_requests(emulator))
    asked = len(mirror.requests)
    apt = node.apt_get("install", "aks-flex-node", check=False)
    assert apt.returncode == 0, f"{apt.stdout[-3000:]}\n{apt.stderr[-5000:]}"
    status = n.wait_for_state(node, timeout=240)
    assert status["state"] == "succeeded", status
    assert node.c.is_active("containerd") and node.c.is_active("kubelet")
    assert n.is_ready(n.cluster_nodes(emulator)[n.MACHINE_NAME])

    # Nothing asked of an artifact host: neither the mirror nor the emulator's.
    assert mirror.requests[asked:] == []
    assert artifact_requests(emulator)[before_install:] == []
    # The node's cache holds each file of the stick (<sha256>-<name>, as a download is kept),
    # and what runs is what the stick held.
    cached = {p.name for p in node.c.path(CACHE).iterdir()}
    for name in names:
        assert f"{manifest[name]['sha256']}-{name}" in cached, (name, sorted(cached))
    runc = next(name for name in names if name.startswith("runc-"))
    installed = node.c.run(["sha256sum", "/usr/local/bin/runc"]).stdout.split()[0]
    assert installed == manifest[runc]["sha256"]
