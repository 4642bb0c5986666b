"""Issue 28, point 3 (images): a node whose network reaches only the emulator and a private
registry pulls the pause image and a test image through containerd's hosts.toml mapping,
by the path the kubelet uses (containerd's CRI image service), while a pull that goes
around the mirror fails.

The registry is Debian's docker-registry (the CNCF distribution registry) on the host's
loopback with TLS from a throwaway CA; the images are built here from local files and
pushed with Debian's skopeo (tests/e2e/registry.py): nothing is pulled from outside. The
node runs Debian's containerd (repacked as the release tarball the node installs), in a
network namespace of its own into which only the emulator's, the artifact mirror's and the
registry's ports are forwarded (tests/e2e/netns.py). The CRI client is on the host, on the
node's containerd socket (seen through /proc/<the node's init>/root).
"""

import json

import pytest

from tests.e2e import node as n
from tests.e2e import registry as r

pytestmark = pytest.mark.e2e

PAUSE = "mcr.microsoft.com/oss/kubernetes/pause:3.9"
HELLO = "mcr.microsoft.com/e2e/hello:1.0"
REGISTRY_CA = "/usr/local/share/aks-e2e/registry-ca.pem"
CERTS = "/etc/containerd/certs.d"


def test_images_come_from_the_private_registry_through_the_mirror_mapping(boot_node, repo, mirror, private_registry,
                                                                        tmp_path):
    registry = private_registry
    pause = r.oci_image(tmp_path / "pause", {"pause": b"#!/bin/true\n"}, tag="3.9")
    hello = r.oci_image(tmp_path / "hello", {"hello.txt": b"hello from the private registry\n"})
    registry.push(pause, "oss/kubernetes/pause:3.9")
    registry.push(hello, "e2e/hello:1.0")

    node = boot_node(repo, extra_ports=[registry.port])
    node.c.copy_in(registry.ca.cert, REGISTRY_CA, 0o644)
    node.write_config({**n.endpoint_settings(node.emulator, mirror), "pause_image": PAUSE,
                       "registry_mirrors": f"mcr.microsoft.com={registry.origin}",
                       "registry_ca_file": REGISTRY_CA})
    node.preseed(n.preseed_answers())
    apt = node.apt_get("install", "aks-flex-node", check=False)
    assert apt.returncode == 0, f"{apt.stdout[-3000:]}\n{apt.stderr[-5000:]}"
    status = n.wait_for_state(node, timeout=240)
    assert status["state"] == "succeeded", status

    hosts = node.c.read(f"{CERTS}/mcr.microsoft.com/hosts.toml").decode()
    assert f'server = "{registry.origin}"' in hosts and f'[host."{registry.origin}"]' in hosts, hosts
    assert node.c.read(f"{CERTS}/mcr.microsoft.com/aks-flex-node-ca.crt") == registry.ca.cert.read_bytes()

    # The kubelet's path: CRI PullImage on containerd's socket. The image ID containerd
    # answers is the config digest of the image built here, so these bytes came from the mirror.
    socket = f"/proc/{node.c.leader}/root/run/containerd/containerd.sock"
    assert r.pull_image(socket, PAUSE) == pause.config_digest, node.journal("containerd")
    assert r.pull_image(socket, HELLO) == hello.config_digest, node.journal("containerd")
    assert "failed to decode hosts.toml" not in node.journal("containerd", lines=400)
    asked = registry.requests()
    # containerd names the registry it mirrors in `ns` (containerd docs/hosts.md).
    assert "/v2/oss/kubernetes/pause/manifests/3.9?ns=mcr.microsoft.com" in asked, asked[-3000:]
    assert "/v2/e2e/hello/manifests/1.0?ns=mcr.microsoft.com" in asked, asked[-3000:]

    # Around the mirror: a registry the mapping does not name is asked directly, and the node
    # has no route to it.
    with pytest.raises(r.PullFailed):
        r.pull_image(socket, "docker.io/library/busybox:1.36", timeout=120)
    # An image the mirror lacks is not fetched from mcr.microsoft.com instead: the mirror is the
    # only server (it answers "not found").
    with pytest.raises(r.PullFailed) as absent:
        r.pull_image(socket, "mcr.microsoft.com/e2e/absent:1.0", timeout=120)
    assert "not found" in absent.value.details.lower(), absent.value.details
    assert "/v2/e2e/absent/manifests/1.0?ns=mcr.microsoft.com" in registry.requests()

    # A registry added to the mapping: the next bootstrap writes its hosts.toml, containerd
    # is not restarted (it reads hosts.toml at each pull), and the next pull uses it.
    containerd = n.main_pid(node, "containerd")
    node.set_conf_value("registry_mirrors", f"mcr.microsoft.com={registry.origin}, quay.io={registry.origin}")
    again = node.c.run(["aks-flex-node", "bootstrap", "--json"], check=False)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    changed = {p["name"]: [c["what"] for c in p["changes"]] for p in json.loads(again.stdout)["phases"] if p["changes"]}
    assert set(changed) == {"registry-mirrors"}, changed
    assert n.main_pid(node, "containerd") == containerd
    assert r.pull_image(socket, "quay.io/e2e/hello:1.0") == hello.config_digest
    assert "/v2/e2e/hello/manifests/1.0?ns=quay.io" in registry.requests()
