"""Scenarios 5 and 6: `apt-get remove` takes the node out of the cluster and keeps the
configuration; `apt-get purge` leaves nothing of ours, in files, debconf or ucf."""

import re

import pytest

from aks_flex_node.paths import PENDING as PENDING_MARKER
from tests.e2e import node as n

pytestmark = pytest.mark.e2e


def joined(node, mirror):
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, apt.stderr[-5000:]
    n.wait_for_state(node)
    [machine] = n.arc_machines(node.emulator)
    assert n.machine_role_assignments(node.emulator, machine["principal_id"])
    return machine


def test_remove_unjoins_and_keeps_the_configuration(node, mirror, debs):
    emu = node.emulator
    machine = joined(node, mirror)
    conf_before = node.c.read(n.CONF)

    apt = node.apt_get("remove", "aks-flex-node")
    assert "aks-flex-node: node e2e-node-1 left aks-one" in apt.stderr, apt.stderr[-5000:]
    assert node.dpkg_status() == f"deinstall ok config-files|{debs.version()}"

    # Azure: no role assignment for the machine's identity, no Arc machine, no Node.
    assert n.machine_role_assignments(emu, machine["principal_id"]) == []
    assert n.arc_machines(emu) == []
    assert n.MACHINE_NAME not in n.cluster_nodes(emu)
    # The machine: the kubelet and containerd stopped and their units gone, the agent
    # stopped, the Arc agent disconnected.
    for unit in ("kubelet", "containerd", "aks-flex-node-agent"):
        assert node.c.is_active(unit) in ("inactive", "unknown"), node.journal(unit)
    assert node.c.read("/etc/systemd/system/kubelet.service") is None
    assert node.c.read("/usr/local/bin/kubelet") is None
    shown = node.c.run(["azcmagent", "show", "-j"]).stdout
    assert '"status": "Disconnected"' in shown
    # Kept: the configuration (as it was) and the secret; the state says unjoined.
    assert node.c.read(n.CONF) == conf_before
    assert node.mode("/etc/aks-flex-node/sp-client-secret") == 0o600
    assert node.c.read("/var/lib/aks-flex-node/ledger.json") is None or \
        b'"entries": []' in node.c.read("/var/lib/aks-flex-node/ledger.json")
    assert node.c.read(PENDING_MARKER) is None


def test_purge_leaves_nothing_of_ours(node, mirror):
    before = node.file_list()
    joined(node, mirror)
    assert node.debconf_entries() and node.ucf_entries()

    node.apt_get("purge", "aks-flex-node")
    assert node.dpkg_status() == ""
    assert node.debconf_entries() == [], "debconf still knows the package"
    assert node.ucf_entries() == [], "ucf still records the configuration file"
    for path in n.OURS:
        assert node.c.read(path) is None and not node.c.path(path).exists(), f"{path} is left"
    # The Arc agent is not ours, but goes too, so that the whole machine can be compared
    # with what it was before the install.
    node.apt_get("purge", "azcmagent")
    left = sorted(p for p in node.file_list() - before if not UCF_OWN.fullmatch(p))
    # containerd's own state included (the library makes its directories, so it removes them).
    assert left == [], f"left on the machine after purge: {left}"


# ucf's rotating backups of its own database, and its cache directory: ucf's, not ours
# (the live hashfile and registry are checked to have no entry of ours).
UCF_OWN = re.compile(r"/var/lib/ucf/(hashfile|registry)\.\d+|/var/lib/ucf/cache")
