"""Scenario: unattended-upgrades (on Ubuntu's servers by default; Debian 12's build here)
upgrades aks-flex-node from our repository once the operator allows its origin
(docs/apt-repository.md#unattended): the node stays joined, nothing is written to Azure or
downloaded again, the kubelet and containerd keep running."""

import pytest

from tests.e2e import node as n

pytestmark = pytest.mark.e2e

# What docs/apt-repository.md tells the operator to write: our repository's Origin (the
# Release file's, tools/publish-repo.sh) added to the patterns unattended-upgrades follows.
ALLOW = "/etc/apt/apt.conf.d/51aks-flex-node-unattended-upgrades"
ALLOW_TEXT = 'Unattended-Upgrade::Origins-Pattern { "origin=aks-flex-node"; };\n'
LOG = "/var/log/unattended-upgrades/unattended-upgrades.log"


def test_unattended_upgrades_moves_the_node_to_the_new_version_and_it_stays_joined(
        boot_node, fresh_repo, newer_deb, mirror):
    node = boot_node(fresh_repo)
    emu = node.emulator
    node.c.write(ALLOW, ALLOW_TEXT, 0o644)
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, apt.stderr[-5000:]
    n.wait_for_state(node)
    pids = {unit: n.main_pid(node, unit) for unit in ("kubelet", "containerd")}
    writes, downloads = len(n.arm_writes(emu)), len(mirror.requests)

    fresh_repo.publish(newer_deb.deb)
    node.apt_get("update")
    # As apt-daily-upgrade.service runs it: no terminal, its own noninteractive dpkg.
    run = node.c.run(["unattended-upgrade", "-v"], check=False, timeout=300, input="")
    log = (node.c.read(LOG) or b"").decode(errors="replace")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:] + log[-3000:]
    assert node.dpkg_status() == f"install ok installed|{newer_deb.new_version}", log[-4000:]
    assert "aks-flex-node" in log and "All upgrades installed" in log, log[-4000:]

    status = n.wait_for_state(node)
    assert status["state"] == "succeeded"
    assert node.c.is_active("aks-flex-node-agent") == "active"
    assert n.arm_writes(emu)[writes:] == []
    assert mirror.requests[downloads:] == []
    assert {unit: n.main_pid(node, unit) for unit in pids} == pids
    assert n.is_ready(n.cluster_nodes(emu)[n.MACHINE_NAME])
