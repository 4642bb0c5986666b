"""Scenario 7: an interactive install, the debconf questions answered at a terminal through
debconf's readline frontend; the answers land in the configuration and the node joins."""

import pytest

from tests.e2e import node as n
from tests.emulator import constants as C

pytestmark = pytest.mark.e2e

HOSTNAME = "e2e-node"  # machine_name is asked at medium priority only: the host's name


def test_questions_answered_at_the_terminal_land_in_the_configuration(node, mirror):
    emu = node.emulator
    # What debconf does not ask: the emulator's endpoints (the operator's file, read first).
    node.write_config(n.endpoint_settings(emu, mirror))
    code, transcript = n.converse(node.c, ["apt-get", "install", "-y", "-q", "aks-flex-node"], [
        (r"now\? \[yes/no\]", "yes"),
        (r"How the machine joins the cluster:", "1"),  # Azure Arc machine
        (r"tenant ID:", C.TENANT_ID),
        (r"Resource ID of the AKS cluster:", C.CLUSTER_ID),
        (r"authenticate to Azure for the join:", "1"),
        (r"client\) ID of the service principal:", C.SP_CLIENT_ID),
        (r"Client secret of the service principal:", C.SP_CLIENT_SECRET),
    ], env={"DEBIAN_FRONTEND": "readline"})
    assert code == 0, transcript[-4000:]
    assert C.SP_CLIENT_SECRET not in transcript, "the secret was echoed"
    # Joined in the postinst, or (dpkg configured the Arc agent after us) left to the agent.
    assert ("aks-flex-node: joined" in transcript
            or "(azcmagent) is unpacked but not configured yet" in transcript), transcript[-4000:]
    assert "the join failed" not in transcript, transcript[-4000:]

    # The answers are in the file (the secret in its own 0600 file), not in debconf.
    assert node.conf_value("tenant_id") == C.TENANT_ID
    assert node.conf_value("cluster_resource_id") == C.CLUSTER_ID
    assert node.conf_value("auth_method") == "service-principal"
    assert node.conf_value("sp_client_id") == C.SP_CLIENT_ID
    assert node.conf_value("sp_client_secret_file") == "/etc/aks-flex-node/sp-client-secret"
    assert node.c.read("/etc/aks-flex-node/sp-client-secret").decode().strip() == C.SP_CLIENT_SECRET
    assert node.mode("/etc/aks-flex-node/sp-client-secret") == 0o600
    assert node.debconf_get("sp_client_secret") == ""
    # And the node joined with them, under the host's name.
    status = n.wait_for_state(node)
    assert status["machine_name"] == HOSTNAME
    assert n.is_ready(n.cluster_nodes(emu)[HOSTNAME])
