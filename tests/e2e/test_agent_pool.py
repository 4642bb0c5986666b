"""Scenario: a preseeded, unattended install in agent-pool mode (docs/design.md, "Join
modes"). The node's own service principal, which holds only the Flex Node Agent Role on
the pool, fetches the pool's bootstrap data; the kubelet joins by TLS bootstrap. No Arc
agent: the package is installed without its Recommends. `apt remove` unjoins: the host is
cleaned; the Machine and its Node stay (the node's role may not delete the Machine, and
no node may delete its own Node object) and the command that deletes both is said; `apt
purge` leaves nothing of ours."""

import json

import pytest

from tests.e2e import node as n
from tests.e2e.pool import agent_pool_answers
from tests.emulator import constants as C
from tests.workload_fixtures import pool_machines

pytestmark = pytest.mark.e2e

POOL_SCOPE = f"{C.CLUSTER_ID}/agentPools/{C.FLEX_POOL}".lower()
BOOTSTRAP_KUBECONFIG = "/var/lib/kubelet/bootstrap-kubeconfig"


def test_preseeded_agent_pool_install_joins_by_tls_bootstrap_and_remove_unjoins(node, mirror):
    emu = node.emulator
    node.write_config(n.endpoint_settings(emu, mirror))
    node.preseed(agent_pool_answers())
    apt = node.apt_get("install", "--no-install-recommends", "aks-flex-node", check=False)
    assert apt.returncode == 0, f"{apt.stdout[-3000:]}\n{apt.stderr[-5000:]}"
    assert "aks-flex-node: joined" in apt.stderr, apt.stderr[-6000:]
    assert not node.dpkg_status("azcmagent").startswith("install ok installed")  # no Arc agent
    status = n.wait_for_state(node)
    assert status["state"] == "succeeded", status

    # The Node: created by the kubelet as system:node:NAME with a certificate, Ready.
    registered = n.cluster_nodes(emu)[n.MACHINE_NAME]
    assert n.is_ready(registered), registered["status"]
    assert registered["_registeredBy"] == f"system:node:{n.MACHINE_NAME}"
    assert registered["_authenticatedBy"] == "x509"
    # Azure: no Arc machine; the pool's Machine; the node's identity holds one role, on
    # the pool (the emulator's Flex Node Agent Role has no DataActions), and nothing was
    # assigned by the join.
    state = emu.state()
    assert state["machines"] == []
    assert n.MACHINE_NAME in pool_machines(emu)
    held = [(a["scope"].lower(), a["role_guid"]) for a in state["role_assignments"]
            if a["principal_id"] == C.NODE_SP_OBJECT_ID]
    assert held == [(POOL_SCOPE, C.ROLE_AKS_FLEX_NODE_AGENT)]

    # The node: debconf's answers in the file, the bootstrap kubeconfig private, the
    # kubelet running on its own client certificate.
    assert node.conf_value("join_mode") == "agent-pool"
    assert node.conf_value("agent_pool") == C.FLEX_POOL
    assert node.mode(BOOTSTRAP_KUBECONFIG) == 0o600
    token = json.loads(node.c.read(BOOTSTRAP_KUBECONFIG))["users"][0]["user"]["token"]
    assert node.c.read("/var/lib/kubelet/pki/kubelet-client-current.pem") is not None
    for unit in ("containerd", "kubelet", "aks-flex-node-agent"):
        assert node.c.is_active(unit) == "active", node.journal(unit)
    # Neither the token nor the secret anywhere but where they belong (patterns on stdin).
    leaks = node.c.run(["grep", "-r", "-l", "-F", "-f", "-", "/etc", "/var", "/root"], check=False,
                       input=f"{C.NODE_SP_CLIENT_SECRET}\n{token}\n")
    assert sorted(leaks.stdout.split()) == sorted(["/etc/aks-flex-node/sp-client-secret", BOOTSTRAP_KUBECONFIG])
    assert token not in apt.stdout + apt.stderr
    assert node.debconf_get("sp_client_secret") == ""

    # The agent, in its unit's sandbox, signs in as the node's own principal: restarted, its
    # first pass is a full one, which asks Azure, and it succeeds.
    def node_sign_ins():
        return [r for r in emu.requests(server="entra", method="POST", path_contains="/oauth2/v2.0/token")
                if r["detail"].get("client_id") == C.NODE_SP_CLIENT_ID]

    # The emulator keeps the last 2,000 requests: a count taken before and after may stay
    # equal as old entries drop out (the kubelet's heartbeats alone are one every 2 s), so
    # the log is emptied first and the restarted agent's sign-in is looked for alone.
    emu.admin("DELETE", "requests")
    passed = n.restarted_agent_pass(node)
    assert passed["state"] == "succeeded", passed
    assert node_sign_ins(), ([f"{r['server']} {r['method']} {r['path']} {r['detail']}" for r in emu.requests()
                              if r["server"] in ("entra", "arm")], passed)

    # dpkg-reconfigure with nothing changed: the pool's data is read again (the pool's
    # versions or labels may have changed since), but the kubelet keeps its certificate, so
    # the new token is not written anywhere.
    calls = len(emu.requests(server="arm", method="POST", path_contains="listBootstrapData"))
    reconf = node.c.run(["dpkg-reconfigure", "-fnoninteractive", "aks-flex-node"], timeout=600, check=False)
    assert reconf.returncode == 0, reconf.stderr[-5000:]
    assert "aks-flex-node: joined" in reconf.stderr, reconf.stderr[-5000:]
    assert len(emu.requests(server="arm", method="POST", path_contains="listBootstrapData")) == calls + 1
    assert json.loads(node.c.read(BOOTSTRAP_KUBECONFIG))["users"][0]["user"]["token"] == token
    assert n.is_ready(n.cluster_nodes(emu)[n.MACHINE_NAME])

    # apt remove: the host is cleaned; the Machine stays (the node's role may not delete
    # it) and so does the Node (no node may delete its own Node object): the output names
    # the command that deletes both.
    removed = node.apt_get("remove", "aks-flex-node", check=False)
    assert removed.returncode == 0, removed.stderr[-5000:]
    assert n.MACHINE_NAME in pool_machines(emu)
    assert n.MACHINE_NAME in n.cluster_nodes(emu)
    output = removed.stdout + removed.stderr
    assert "az aks nodepool delete-machines" in output and f"--machine-names {n.MACHINE_NAME}" in output, \
        output[-5000:]
    assert f"Kubernetes node {n.MACHINE_NAME}: left to the cluster" in output, output[-5000:]
    assert f"kubectl delete node {n.MACHINE_NAME}" in output, output[-5000:]
    # apt purge: nothing of ours is left.
    purged = node.apt_get("purge", "aks-flex-node", check=False)
    assert purged.returncode == 0, purged.stderr[-5000:]
    left = [path for path in n.OURS if node.c.path(path).exists()]
    assert left == [], left
    assert not node.c.path(BOOTSTRAP_KUBECONFIG).exists()
