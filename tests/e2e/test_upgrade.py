"""Scenario 3: an upgrade from the repository keeps the node joined: no rejoin (no ARM
write), the kubelet and containerd keep running, state and configuration are kept.

The node has needrestart's apt hook on, as Ubuntu's server images do (docs/ubuntu.md), and
the upgrade runs with NEEDRESTART_MODE=a, the mode an unattended fleet uses (needrestart then
restarts, without asking, what still runs replaced code). Neither apt run may wait on it, and
it must find nothing of ours to restart."""

import json
import time

import pytest

from tests.e2e import node as n

pytestmark = pytest.mark.e2e


def test_upgrade_keeps_the_node_joined_without_touching_azure(boot_node, fresh_repo, newer_deb, mirror):
    node = boot_node(fresh_repo)
    node.enable_needrestart()
    emu = node.emulator
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, apt.stderr[-5000:]
    n.wait_for_state(node)
    # needrestart ran once dpkg was done (its DPkg::Post-Invoke hook), in its default mode,
    # which a noninteractive apt turns into "list only" (needrestart 3.6, /usr/sbin/needrestart).
    assert node.needrestart_runs() == ["unset"], apt.stdout[-3000:]
    assert node.dpkg_status() == f"install ok installed|{newer_deb.old_version}"
    pids = {unit: n.main_pid(node, unit) for unit in ("kubelet", "containerd")}
    conf, secret = node.c.read(n.CONF), node.c.read("/etc/aks-flex-node/sp-client-secret")
    joined = json.loads(node.c.read("/var/lib/aks-flex-node/ledger.json"))["joined"]
    writes = len(n.arm_writes(emu))
    downloads = len(mirror.requests)

    fresh_repo.publish(newer_deb.deb)
    node.apt_get("update")
    # A short timeout: an apt run held up by a prompt must fail here, not hang the suite.
    upgrade = node.apt_get("upgrade", timeout=300, env={"NEEDRESTART_MODE": "a"})
    assert node.dpkg_status() == f"install ok installed|{newer_deb.new_version}", upgrade.stdout
    assert node.needrestart_runs() == ["unset", "a"], upgrade.stdout[-3000:]
    # needrestart restarts, in this mode, every service still running code that was replaced
    # on disk (for a Python service: its script, /usr/bin/aks-flex-node for the agent, which
    # dpkg replaces at every upgrade); it finds none: the postinst restarted our agent on the
    # new code already, and nothing else changed.
    assert "No services need to be restarted." in upgrade.stdout, upgrade.stdout[-3000:]
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
    assert {unit: n.main_pid(node, unit) for unit in pids} == pids
    assert node.c.read(n.CONF) == conf
    assert node.c.read("/etc/aks-flex-node/sp-client-secret") == secret
    assert json.loads(node.c.read("/var/lib/aks-flex-node/ledger.json"))["joined"] == joined
    assert n.is_ready(n.cluster_nodes(emu)[n.MACHINE_NAME])

    # That check is not blind: with the agent's script newer than the agent (as after an
    # upgrade whose postinst had not restarted it), needrestart names the agent. (It reads
    # only the script's own time, not our modules': needrestart 3.6's Python scan. It
    # tolerates a script up to 2 s newer than the process: the agent, restarted by the
    # upgrade, is let grow older than that first.)
    agent = n.main_pid(node, "aks-flex-node-agent")
    age = int(node.c.run(["ps", "-o", "etimes=", "-p", agent]).stdout)
    time.sleep(max(0, 4 - age))
    node.c.run(["touch", "/usr/bin/aks-flex-node"])
    scan = node.c.run(["needrestart", "-b", "-r", "l"], check=False)
    assert "NEEDRESTART-SVC: aks-flex-node-agent.service" in scan.stdout, scan.stdout + scan.stderr
