"""Scenario 3: an upgrade from the repository keeps the node joined: no rejoin (no ARM
write), the kubelet and containerd keep running, state and configuration are kept."""

import json

import pytest

from tests.e2e import node as n

pytestmark = pytest.mark.e2e


def main_pid(node, unit):
    return node.c.run(["systemctl", "show", "-p", "MainPID", "--value", unit]).stdout.strip()


def test_upgrade_keeps_the_node_joined_without_touching_azure(boot_node, fresh_repo, newer_deb, mirror):
    node = boot_node(fresh_repo)
    emu = node.emulator
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, apt.stderr[-5000:]
    n.wait_for_state(node)
    assert node.dpkg_status() == f"install ok installed|{newer_deb.old_version}"
    pids = {unit: main_pid(node, unit) for unit in ("kubelet", "containerd")}
    conf, secret = node.c.read(n.CONF), node.c.read("/etc/aks-flex-node/sp-client-secret")
    joined = json.loads(node.c.read("/var/lib/aks-flex-node/ledger.json"))["joined"]
    writes = len(n.arm_writes(emu))
    downloads = len(mirror.requests)

    fresh_repo.publish(newer_deb.deb)
    node.apt_get("update")
    upgrade = node.apt_get("upgrade")
    assert node.dpkg_status() == f"install ok installed|{newer_deb.new_version}", upgrade.stdout
    assert "joining" not in upgrade.stderr, upgrade.stderr[-4000:]
    assert node.c.run(["aks-flex-node", "version"]).stdout.strip().endswith(newer_deb.new_version)

    # The agent restarted on the new code (it was running) and settles on the same state.
    assert node.c.is_active("aks-flex-node-agent") == "active"
    status = n.wait_for_state(node)
    assert status["state"] == "succeeded"
    # No rejoin: nothing written to Azure, nothing downloaded again, the kubelet and
    # containerd never restarted; the configuration, the secret and the ledger as they were.
    assert n.arm_writes(emu)[writes:] == []
    assert mirror.requests[downloads:] == []
    assert {unit: main_pid(node, unit) for unit in pids} == pids
    assert node.c.read(n.CONF) == conf
    assert node.c.read("/etc/aks-flex-node/sp-client-secret") == secret
    assert json.loads(node.c.read("/var/lib/aks-flex-node/ledger.json"))["joined"] == joined
    assert n.is_ready(n.cluster_nodes(emu)[n.MACHINE_NAME])
