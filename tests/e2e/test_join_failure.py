"""Scenario 4: Azure unreachable during the install, with on_join_failure =
retry-in-background: apt exits 0, apt keeps working, and once Azure is back the agent
service completes the join by itself."""

import pytest

from aks_flex_node.paths import PENDING as PENDING_MARKER
from tests.e2e import node as n

pytestmark = pytest.mark.e2e


def test_install_while_azure_is_unreachable_joins_later_by_itself(boot_node, fresh_repo, unrelated_deb, mirror):
    fresh_repo.publish(unrelated_deb)
    node = boot_node(fresh_repo)
    emu = node.emulator
    # The Arc agent first, as docs/preseed.md advises: the postinst then really tries.
    node.apt_get("install", "azcmagent")
    emu.faults([{"match": {"server": "any"}, "drop": True}])  # every connection cut, unanswered
    try:
        apt = n.install_joined(node, mirror, on_join_failure="retry-in-background")
        assert apt.returncode == 0, apt.stderr[-5000:]
        assert "the join failed" in apt.stderr and "the join is pending" in apt.stderr, apt.stderr[-5000:]
        assert node.dpkg_status().startswith("install ok installed|")
        assert node.c.read(PENDING_MARKER) is not None
        assert node.status()["state"] in ("pending", "running")  # failed attempts, retried
        # dpkg is not wedged: nothing half-configured, and another install goes through.
        assert node.c.run(["dpkg", "--audit"]).stdout.strip() == ""
        node.apt_get("install", "e2e-unrelated")
        assert node.dpkg_status("e2e-unrelated") == "install ok installed|1.0"
        assert node.c.is_active("aks-flex-node-agent") == "active"
        assert n.arc_machines(emu) == []
    finally:
        emu.clear_faults()

    # Azure is back: the agent's next attempt joins, with nobody running anything.
    status = n.wait_for_state(node, timeout=240)
    assert status["state"] == "succeeded"
    [machine] = n.arc_machines(emu)
    assert n.machine_role_assignments(emu, machine["principal_id"])
    assert n.is_ready(n.cluster_nodes(emu)[n.MACHINE_NAME])
    for unit in ("containerd", "kubelet"):
        assert node.c.is_active(unit) == "active"
