"""Scenario: the cluster's control plane goes from 1.30 to 1.31 (`az aks upgrade
--control-plane-only`; the emulator's admin API stands in), and `aks-flex-node upgrade` on
the joined node moves its kubelet there under real systemd: cordon, drain (a ReplicaSet pod
evicted, a DaemonSet pod kept), the switch of `current`, a real `systemctl restart kubelet`,
the Node Ready at v1.31.2, uncordon (docs/upgrade.md). Then `apt purge` leaves nothing of
either version."""

import json

import pytest

from tests.e2e import node as n
from tests.emulator import constants as C

pytestmark = pytest.mark.e2e

KUBE_LIB = "/usr/local/lib/aks-flex-node/kubernetes"


def pod(name, owner_kind, owner_name, namespace="default"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": owner_name},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner_name,
                                              "uid": f"uid-{owner_name}", "controller": True}]},
            "spec": {"nodeName": n.MACHINE_NAME, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]},
            "status": {"phase": "Running"}}


def put(emu, obj):
    emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": obj})


def test_upgrade_moves_the_kubelet_from_1_30_to_1_31_under_systemd(node, mirror, debs):
    emu = node.emulator
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, apt.stderr[-5000:]
    n.wait_for_state(node)
    assert n.cluster_nodes(emu)[n.MACHINE_NAME]["status"]["nodeInfo"]["kubeletVersion"] == f"v{C.K8S_VERSION}"
    before_pid = n.main_pid(node, "kubelet")

    put(emu, {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}}}})
    put(emu, pod("agent-x1", "DaemonSet", "agent", namespace="kube-system"))
    put(emu, pod("web-1", "ReplicaSet", "web-5d4f"))
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": "1.31.2"})

    dry = node.c.run(["aks-flex-node", "upgrade", "--dry-run"])
    assert f"from kubelet {C.K8S_VERSION} to 1.31.2" in dry.stdout, dry.stdout
    up = node.c.run(["aks-flex-node", "upgrade"], check=False, timeout=600)
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:] + node.journals()
    assert "runs kubelet 1.31.2 (was 1.30.4)" in up.stdout

    registered = n.cluster_nodes(emu)[n.MACHINE_NAME]
    assert registered["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.2" and n.is_ready(registered)
    assert not registered["spec"].get("unschedulable"), "uncordoned"
    pods = set(emu.state()["kube_objects"][C.CLUSTER_ID.lower()]["pods"])
    assert "default/web-1" not in pods and "kube-system/agent-x1" in pods
    # systemd restarted the unit onto the new binary, reached through the links.
    assert node.c.is_active("kubelet") == "active" and n.main_pid(node, "kubelet") != before_pid
    assert node.c.run(["/usr/local/bin/kubelet", "--version"]).stdout.strip() == "Kubernetes v1.31.2"
    assert node.c.run(["readlink", f"{KUBE_LIB}/current"]).stdout.strip() == "v1.31.2"
    status = json.loads(node.c.run(["aks-flex-node", "status", "--json"]).stdout)
    phase = {p["name"]: p for p in status["phases"]}["kubelet-upgrade"]
    assert phase["status"] == "changed", phase

    # The next run prunes 1.30.4; purge leaves nothing of either version.
    node.c.run(["aks-flex-node", "bootstrap"])
    assert node.c.run(["ls", KUBE_LIB]).stdout.split() == ["current", "v1.31.2"]
    node.apt_get("purge", "aks-flex-node")
    assert not node.c.path("/usr/local/lib/aks-flex-node").exists()
    assert not node.c.path("/usr/local/bin/kubelet").exists() and not node.c.path("/usr/local/bin/kubelet").is_symlink()


def test_dpkg_reconfigure_with_a_new_version_upgrades_the_same_way(node, mirror):
    """The operator pins the new version in the file (which wins over debconf's answer) and
    runs dpkg-reconfigure: the postinst's bootstrap does the upgrade, no leave and rejoin."""
    emu = node.emulator
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, apt.stderr[-5000:]
    n.wait_for_state(node)
    [machine] = n.arc_machines(emu)
    put(emu, pod("web-1", "ReplicaSet", "web-5d4f"))
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": "1.31.2"})
    node.set_conf_value("kubernetes_version", "1.31.2")
    reconf = node.c.run(["dpkg-reconfigure", "-fnoninteractive", "aks-flex-node"], timeout=900, check=False)
    assert reconf.returncode == 0, reconf.stderr[-5000:]
    assert "leaving" not in reconf.stderr, "a version change is no new join"
    registered = n.cluster_nodes(emu)[n.MACHINE_NAME]
    assert registered["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.2" and n.is_ready(registered)
    assert not registered["spec"].get("unschedulable")
    assert "default/web-1" not in emu.state()["kube_objects"][C.CLUSTER_ID.lower()]["pods"]
    assert [m["id"] for m in n.arc_machines(emu)] == [machine["id"]], "the same Arc machine"
    assert node.debconf_get("kubernetes_version") == "1.31.2"
