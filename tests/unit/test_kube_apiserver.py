"""KubeClient against the emulator's kube-apiserver stand-in, with the node's HIMDS token.

The whole credential path of a node: the Arc identity's token from HIMDS, the Azure RBAC
propagation delay (403 until then), and the stand-in kubelet (tests/fakes/kubelet.py)
authenticating through `aks-flex-node token` as its exec plugin, registering its Node and
turning it Ready.
"""

import base64
import json
import os
import subprocess
import sys

import pytest

from aks_flex_node import cloud_values, kube
from aks_flex_node.azure import aks, himds, rbac
from aks_flex_node.errors import TemporaryError
from tests.emulator import constants as C
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)
from tests.azure_fixtures import put_machine

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBELET = os.path.join(REPO, "tests", "fakes", "kubelet.py")
NODE = "m1"


class Ref:
    subscription_id = C.SUBSCRIPTION_ID
    resource_group = C.CLUSTER_RG
    name = C.CLUSTER_NAME


@pytest.fixture
def node_identity(fresh_emulator):
    """An Arc machine whose identity this host's HIMDS serves (as after azcmagent connect)."""
    machine = put_machine(fresh_emulator, NODE)
    fresh_emulator.bind_himds(machine["id"])
    return machine["identity"]["principalId"]


@pytest.fixture
def client(fresh_emulator, azure_clients, node_identity):
    server, ca_pem = aks.server_and_ca(azure_clients, Ref)

    def token():
        return himds.get_token(fresh_emulator.himds, himds.AKS_RESOURCE, fresh_emulator.himds_key_dir).access_token

    return kube.KubeClient(server, ca_pem, token, timeout=10)


def test_forbidden_until_rbac_propagates(fresh_emulator, azure_clients, node_identity, client):
    with pytest.raises(kube.Forbidden):
        client.get_node(NODE)  # no role yet
    # Ten minutes of the emulator's clock: not propagated yet however slow this machine is,
    # until the test moves the clock past it.
    fresh_emulator.settings(rbac_propagation_delay=600)
    rbac.ensure_assignment(azure_clients, C.CLUSTER_ID, C.ROLE_AKS_RBAC_CLUSTER_ADMIN, node_identity)
    with pytest.raises(kube.Forbidden):
        client.get_node(NODE)  # assigned, not propagated yet
    fresh_emulator.advance_clock(601)
    assert client.get_node(NODE) is None  # authorized; no Node registered yet
    assert client.node_ready(NODE) is None
    assert client.delete_node(NODE) is False


def test_foreign_token_is_unauthorized(fresh_emulator, azure_clients):
    server, ca_pem = aks.server_and_ca(azure_clients, Ref)
    with pytest.raises(kube.Unauthorized):
        kube.KubeClient(server, ca_pem, lambda: "emuat.not-a-real-token").get_node(NODE)


@pytest.fixture
def kubelet(fresh_emulator, azure_clients, node_identity, tmp_path):
    """The stand-in kubelet with a kubeconfig whose exec plugin is `aks-flex-node token`."""
    root, state = tmp_path / "root", tmp_path / "kubelet-state"
    state.mkdir()
    (root / "etc/aks-flex-node").mkdir(parents=True)
    (root / "etc/aks-flex-node/aks-flex-node.conf").write_text(
        f"[arc]\nhimds_endpoint = {fresh_emulator.himds}\nhimds_key_dir = {fresh_emulator.himds_key_dir}\n"
    )
    plugin = tmp_path / "aks-flex-node"
    plugin.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m aks_flex_node.token "$@"\n')
    plugin.chmod(0o755)
    server, ca_pem = aks.server_and_ca(azure_clients, Ref)
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "node",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "contexts": [{"name": "node", "context": {"cluster": "c", "user": "arc"}}],
        "users": [{"name": "arc", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "interactiveMode": "Never",
            "command": str(plugin), "args": ["--root", str(root)]}}}],
    }
    (root / "var/lib/kubelet").mkdir(parents=True)
    (root / "var/lib/kubelet/kubeconfig").write_text(json.dumps(kubeconfig))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FAKE_ROOT": str(root), "FAKE_STATE_DIR": str(state),
           "FAKE_KUBELET_INTERVAL": "0.2", "NO_PROXY": "127.0.0.1,localhost"}
    process = subprocess.Popen(
        [sys.executable, KUBELET, "--kubeconfig", "/var/lib/kubelet/kubeconfig", "--hostname-override", NODE],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    process.state_dir = state
    process.root = root
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_ready_after_the_kubelet_registers(fresh_emulator, azure_clients, node_identity, client, kubelet):
    fresh_emulator.settings(rbac_propagation_delay=600)
    rbac.ensure_assignment(azure_clients, C.CLUSTER_ID, C.ROLE_AKS_RBAC_CLUSTER_ADMIN, node_identity)
    fresh_emulator.advance_clock(601)  # propagated: the kubelet's next try registers
    node = kube.wait_node_ready(lambda: client, NODE, timeout=30)
    assert node["metadata"]["name"] == NODE
    assert client.node_ready(NODE) is True
    status = json.loads((kubelet.state_dir / "kubelet-status.json").read_text())
    assert status["registered"] is True
    # The kubelet authenticated through our exec plugin, which cached the token root-only.
    assert status["plugin_runs"] >= 1
    cache = kubelet.root / "var/lib/aks-flex-node/token-cache.json"
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    assert client.delete_node(NODE) is True
    assert client.get_node(NODE) is None


def test_wait_node_ready_reports_forbidden_when_it_gives_up(client):
    with pytest.raises(TemporaryError, match=r"not Ready after 0.3s; last seen: .*forbids GET /api/v1/nodes/m1 \(403\)"):
        kube.wait_node_ready(lambda: client, NODE, timeout=0.3)


# -- hostile values in the API server's answers (issue 26, defect 7) -----------------------


@pytest.mark.parametrize("version", ["v1.30.4/x", "v1.30.4 --v=9", "v1.30.4\n[Service]", "", None, 130])
def test_a_bad_git_version_is_a_bad_cloud_value(fresh_emulator, azure_clients, version):
    server, ca_pem = aks.server_and_ca(azure_clients, Ref)
    fresh_emulator.faults([{"match": {"server": "apiserver", "path_regex": "^/version$", "times": 1},
                            "set": {"gitVersion": version}}])
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        kube.KubeClient(server, ca_pem).server_version()
    assert (caught.value.field, caught.value.exit_code) == ("gitVersion", 1)
    assert "GET /version" in caught.value.source and "\n" not in caught.value.message


def test_a_good_git_version_is_returned_as_given(fresh_emulator, azure_clients):
    server, ca_pem = aks.server_and_ca(azure_clients, Ref)
    fresh_emulator.faults([{"match": {"server": "apiserver", "path_regex": "^/version$", "times": 1},
                            "set": {"gitVersion": "v1.29.7-eks-1234"}}])
    assert kube.KubeClient(server, ca_pem).server_version() == "v1.29.7-eks-1234"


def test_the_api_servers_words_reach_the_terminal_escaped(fresh_emulator, azure_clients):
    """A Status message with terminal escapes (ESC [ 2 J clears the screen) is shown as text."""
    server, ca_pem = aks.server_and_ca(azure_clients, Ref)
    fresh_emulator.faults([{"match": {"server": "apiserver", "times": 1},
                            "respond": {"status": 401, "body": {"kind": "Status", "message": "no\x1b[2J\x1b]0;owned\x07"}}}])
    with pytest.raises(kube.Unauthorized) as caught:
        kube.KubeClient(server, ca_pem, lambda: "t").get_node(NODE)
    assert "\x1b" not in caught.value.message and "\x07" not in caught.value.message


def test_a_node_of_another_shape_is_not_ready_and_no_crash():
    for node in ({"status": {"conditions": "Ready"}}, {"status": []}, {"status": {"conditions": [3, None]}}, []):
        assert kube.is_ready(node) is False
        assert isinstance(kube._node_summary(node or {"status": "x"}), str)


def test_an_answer_over_the_bound_is_refused_not_held(fresh_emulator, azure_clients):
    """A hostile API server's endless answer: read up to the bound, then refused."""
    server, ca_pem = aks.server_and_ca(azure_clients, Ref)
    client = kube.KubeClient(server, ca_pem)
    client.max_answer = 1000  # the bound, lowered: the emulator's answer is a few hundred bytes over it
    fresh_emulator.faults([{"match": {"server": "apiserver", "path_regex": "^/version$", "times": 1},
                            "set": {"padding": "x" * 2000}}])
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        client.server_version()
    assert caught.value.field == "body" and caught.value.exit_code == 1
    assert client.server_version()  # the next, normal answer is read


@pytest.mark.parametrize("reported", ["v1.30.4/x", "v1.30.4\n", 130, ["v1.30.4"]])
def test_a_bad_kubelet_version_of_a_node_is_a_bad_cloud_value(reported):
    node = {"status": {"nodeInfo": {"kubeletVersion": reported}}}
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        kube.kubelet_version(node, "API server GET node n1")
    assert caught.value.field == "status.nodeInfo.kubeletVersion"


def test_a_kubelet_version_is_read_or_none():
    assert kube.kubelet_version({"status": {"nodeInfo": {"kubeletVersion": "v1.30.4"}}}, "x") == "v1.30.4"
    assert kube.kubelet_version({"status": {"nodeInfo": {}}}, "x") is None
    assert kube.kubelet_version(None, "x") is None


@pytest.mark.parametrize("item, field", [
    ("a pod", "items[0].metadata"),
    ({"metadata": {"name": "../../nodes/n1", "namespace": "default"}}, "items[0].metadata.name"),
    ({"metadata": {"name": "web\x1b[2J", "namespace": "default"}}, "items[0].metadata.name"),
    ({"metadata": {"name": "web", "namespace": "kube system"}}, "items[0].metadata.namespace"),
    ({"metadata": {"name": "web", "ownerReferences": ["ReplicaSet"]}}, "items[0].metadata.ownerReferences"),
    ({"metadata": {"name": "web", "annotations": ["mirror"]}}, "items[0].metadata.annotations"),
    ({"metadata": {"name": "web"}, "status": "Running"}, "items[0].status"),
])
def test_a_pod_of_another_shape_is_a_bad_cloud_value(fresh_emulator, azure_clients, item, field):
    """What drain reads of each pod (its names go into eviction paths) is checked on the LIST."""
    server, ca_pem = aks.server_and_ca(azure_clients, Ref)
    fresh_emulator.faults([{"match": {"server": "apiserver", "path_regex": "^/api/v1/pods$", "times": 1},
                            "respond": {"status": 200, "body": {"kind": "PodList", "items": [item]}}}])
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        kube.KubeClient(server, ca_pem, lambda: "t").list_pods_on_node(NODE)
    assert caught.value.field == field and "LIST pods" in caught.value.source
