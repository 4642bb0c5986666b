"""Scenario 1: a preseeded, unattended `apt-get install aks-flex-node` from the repository
joins the node: Arc machine, roles, containerd and kubelet running, node Ready."""

import json

import pytest

from tests.e2e import node as n
from tests.emulator import constants as C

pytestmark = pytest.mark.e2e

LEGACY_ROLES = sorted([C.ROLE_READER, C.ROLE_AKS_RBAC_CLUSTER_ADMIN, C.ROLE_AKS_CLUSTER_ADMIN])


def test_preseeded_install_joins_the_node(node, mirror, debs):
    emu = node.emulator
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, f"{apt.stdout[-3000:]}\n{apt.stderr[-5000:]}"
    # apt pulled the Arc agent through the package's Recommends, from the same repository.
    assert node.dpkg_status() == f"install ok installed|{debs.version()}"
    assert node.dpkg_status("azcmagent").startswith("install ok installed|")
    # The postinst joins, unless dpkg configures the Arc agent after us (a Recommends does
    # not order configuration): then it makes no attempt bound to fail at the first token,
    # and aks-flex-node-agent joins once himdsd answers.
    assert ("aks-flex-node: joined" in apt.stderr
            or "(azcmagent) is unpacked but not configured yet" in apt.stderr), apt.stderr[-6000:]
    assert "the join failed" not in apt.stderr, apt.stderr[-6000:]
    status = n.wait_for_state(node, timeout=180)

    # Azure: the Arc machine, with the legacy preset's roles on the cluster for its identity.
    [machine] = n.arc_machines(emu)
    assert machine["resource_group"].lower() == C.CLUSTER_RG.lower()
    roles = n.machine_role_assignments(emu, machine["principal_id"])
    assert sorted(a["role_guid"] for a in roles) == LEGACY_ROLES
    assert {a["scope"].lower() for a in roles} == {C.CLUSTER_ID.lower()}
    # The stand-in kubelet, run by systemd from the package's units, got its token through
    # `aks-flex-node token` and the Arc agent's HIMDS, registered, and heartbeats Ready.
    registered = n.cluster_nodes(emu)[n.MACHINE_NAME]
    assert n.is_ready(registered), registered["status"]
    assert registered["metadata"]["labels"]["kubernetes.azure.com/managed"] == "false"
    assert emu.state()["himds"]["tokens_issued"] >= 1

    # systemd: the runtime, the kubelet, the agent and the Arc agent's himdsd run, enabled.
    for unit in ("containerd", "kubelet", "aks-flex-node-agent", "himdsd"):
        assert node.c.is_active(unit) == "active", node.journal(unit)
        assert node.c.is_enabled(unit) == "enabled"
    # containerd is Debian's real one, answering on its socket.
    server = node.c.run(["/usr/local/bin/ctr", "version"]).stdout
    assert f"Version:  {mirror.versions['containerd']}" in server.split("Server:")[1]

    # The status the operator reads: every phase done, nothing failed.
    assert status["state"] == "succeeded", status
    assert {p["status"] for p in status["phases"]} <= {"changed", "unchanged"}, status["phases"]
    assert "node-ready" in {p["name"] for p in status["phases"]}

    # Files: the configuration and the secret private, the secret out of debconf and argv.
    assert node.mode(n.CONF) == 0o600
    assert node.mode("/etc/aks-flex-node/sp-client-secret") == 0o600
    assert node.conf_value("sp_client_secret_file") == "/etc/aks-flex-node/sp-client-secret"
    assert node.conf_value("arm_endpoint") == emu.arm
    assert node.mode("/var/lib/aks-flex-node/ledger.json") == 0o600
    # (the pattern comes on stdin: not even a test secret goes on a command line)
    leaks = node.c.run(["grep", "-r", "-l", "-F", "-f", "-", "/etc", "/var", "/root"], check=False,
                       input=C.SP_CLIENT_SECRET + "\n")
    assert leaks.stdout.split() == ["/etc/aks-flex-node/sp-client-secret"]

    # Run again under the real systemd: nothing changes, and both units are read as enabled
    # and running from one `systemctl show` (host/systemd.py Systemd.states).
    again = node.c.run(["aks-flex-node", "bootstrap", "--json"], check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    changed = {p["name"]: p["changes"] for p in json.loads(again.stdout)["phases"] if p["changes"]}
    assert changed == {}, changed
