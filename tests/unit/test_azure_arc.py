"""Arc machines through the real hybridcompute SDK of this stack, and the azcmagent wrapper
against the stand-in in tests/fakes/bin (which talks to the emulator)."""

import json
import os
import stat

import pytest

import azure.mgmt.hybridcompute
from aks_flex_node.azure import arc, auth
from aks_flex_node.errors import TemporaryError
from aks_flex_node.host import Host
from tests.emulator import constants as C
from tests.unit.test_azure_fixtures import *  # noqa: F401,F403  (fixtures)
from tests.unit.test_azure_fixtures import put_machine

# hybridcompute 10.x has begin_delete (LRO, api >= 2025); 8.x/9.x a synchronous delete.
LRO_SDK = int(azure.mgmt.hybridcompute.__version__.split(".")[0]) >= 10


def test_absent_machine_is_none(azure_clients):
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "nobody") is None


def test_machine_fields_from_this_sdk_shape(fresh_emulator, azure_clients):
    body = put_machine(fresh_emulator, "m1")
    machine = arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1")
    assert machine == arc.Machine(
        id=body["id"],
        name="m1",
        location=C.LOCATION,
        principal_id=body["identity"]["principalId"],
        tenant_id=C.TENANT_ID,
        status=body["properties"]["status"],
        agent_version=body["properties"].get("agentVersion"),
    )
    assert type(machine.status) is str  # not the SDK's enum


def test_delete_present_then_absent(fresh_emulator, azure_clients):
    put_machine(fresh_emulator, "m1")
    assert arc.delete_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is True
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is None
    assert arc.delete_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is False
    deletes = fresh_emulator.requests(server="arm", method="DELETE", path_contains="/machines/m1")
    # One DELETE only (the second call saw the 404 first); 202 + polling on 10.x, 200 before.
    assert [r["status"] for r in deletes] == [202 if LRO_SDK else 200]


def test_delete_with_a_slow_lro_waits_for_it(fresh_emulator, azure_clients):
    fresh_emulator.settings(lro_delay=0.3)
    put_machine(fresh_emulator, "m1")
    assert arc.delete_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is True
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is None


def test_delete_answered_204_works_on_every_sdk(fresh_emulator, azure_clients):
    fresh_emulator.settings(machine_delete_mode="204")
    put_machine(fresh_emulator, "m1")
    assert arc.delete_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is True


def test_wait_for_identity_polls_until_the_principal_shows(fresh_emulator, azure_clients):
    fresh_emulator.settings(arc_identity_delay=0.5)
    put_machine(fresh_emulator, "m1")
    machine = arc.wait_for_identity(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1", timeout=10, first_delay=0.1)
    assert machine.principal_id
    gets = fresh_emulator.requests(server="arm", method="GET", path_contains="/machines/m1")
    assert len(gets) >= 2


def test_wait_for_identity_is_bounded_and_says_what_it_saw(fresh_emulator, azure_clients):
    fresh_emulator.settings(arc_identity_delay=30)
    put_machine(fresh_emulator, "m1")
    with pytest.raises(TemporaryError, match="no managed identity after 0.3s; last seen: machine .*m1 with status"):
        arc.wait_for_identity(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1", timeout=0.3, first_delay=0.1)


def test_wait_for_identity_of_a_machine_that_never_appears(azure_clients):
    with pytest.raises(TemporaryError, match="last seen: no Arc machine resource"):
        arc.wait_for_identity(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "ghost", timeout=0.2, first_delay=0.1)


# ---- azcmagent ------------------------------------------------------------------------


@pytest.fixture
def agent(fake_host, no_proxy):
    return arc.Azcmagent(Host(fake_host.root, env=fake_host.env))


@pytest.fixture
def arm_token(operator):
    return auth.arm_token(operator, C.ARM_SCOPE)


SETTINGS = {
    "tenant-id": C.TENANT_ID,
    "subscription-id": C.SUBSCRIPTION_ID,
    "resource-group": C.ARC_RG,
    "location": C.LOCATION,
    "resource-name": "flex-node-1",
    "tags": {"env": "test", "owner": "ci"},
}


def run_dir_entries(fake_host):
    path = fake_host.path(arc.RUN_DIR)
    return sorted(os.listdir(path)) if path.exists() else []


def test_connect_keeps_the_token_off_argv_and_removes_its_config(fresh_emulator, fake_host, agent, arm_token, azure_clients):
    agent.connect(SETTINGS, arm_token)
    machine = arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "flex-node-1")
    assert machine is not None and machine.principal_id
    calls = fake_host.calls("azcmagent")
    connect = [argv for argv in calls if argv[1] == "connect"]
    assert len(connect) == 1 and connect[0][2] == "--config"
    assert not any(arm_token in arg for argv in calls for arg in argv)
    assert run_dir_entries(fake_host) == []  # the 0600 config is gone
    assert stat.S_IMODE(fake_host.path(arc.RUN_DIR).stat().st_mode) == 0o700
    shown = fake_host.fake_state("azcmagent.json")
    assert shown["tags"] == {"env": "test", "owner": "ci"}  # "env=test,owner=ci" reached the agent


def test_show_and_is_connected(agent, arm_token):
    assert agent.show()["status"] == "Disconnected"
    assert agent.is_connected(SETTINGS) is False
    agent.connect(SETTINGS, arm_token)
    shown = agent.show()
    assert shown["status"] == "Connected" and shown["resourceName"] == "flex-node-1"
    assert agent.is_connected(SETTINGS) is True
    assert agent.is_connected({**SETTINGS, "resource-name": "other-node"}) is False
    assert agent.is_connected({**SETTINGS, "resource-group": C.CLUSTER_RG}) is False
    assert agent.is_connected({"resourceName": "FLEX-NODE-1"}) is True  # names compare case-insensitively


def test_failed_connect_still_removes_the_config_and_hides_the_token(fake_host, agent, arm_token):
    from aks_flex_node.host import CommandError

    fake_host.fail("azcmagent", f"FATAL   connect failed for token {arm_token}", verb="connect")
    with pytest.raises(CommandError) as caught:
        agent.connect(SETTINGS, arm_token)
    assert arm_token not in str(caught.value) and "***" in str(caught.value)
    assert run_dir_entries(fake_host) == []


def test_disconnect_with_a_token_deletes_the_resource(fresh_emulator, fake_host, agent, arm_token, azure_clients):
    agent.connect(SETTINGS, arm_token)
    agent.disconnect(arm_token)
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "flex-node-1") is None
    assert agent.show()["status"] == "Disconnected"
    disconnect = [argv for argv in fake_host.calls("azcmagent") if argv[1] == "disconnect"]
    assert disconnect[0][2] == "--config" and not any(arm_token in a for a in disconnect[0])
    assert run_dir_entries(fake_host) == []


def test_disconnect_without_a_token_is_local_only(fake_host, agent, arm_token, azure_clients):
    agent.connect(SETTINGS, arm_token)
    agent.disconnect()
    assert ["azcmagent", "disconnect", "--force-local-only"] in fake_host.calls("azcmagent")
    assert agent.show()["status"] == "Disconnected"
    # The Azure resource stays: only the local configuration was reset.
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "flex-node-1") is not None


def test_missing_azcmagent_says_which_package_to_install(tmp_path):
    host = Host(tmp_path, env={"PATH": str(tmp_path / "empty-bin")})
    with pytest.raises(arc.AzcmagentError) as caught:
        arc.Azcmagent(host).show()
    assert "azcmagent is not installed" in caught.value.message
    assert "Azure Connected Machine agent package azcmagent" in caught.value.remedy


def test_show_output_that_is_not_json_is_reported(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "azcmagent"
    fake.write_text("#!/bin/sh\necho 'Agent Status: Connected'\n")
    fake.chmod(0o755)
    with pytest.raises(arc.AzcmagentError, match="not JSON: 'Agent Status: Connected'"):
        arc.Azcmagent(Host(tmp_path, env={"PATH": str(bin_dir)})).show()


def test_connect_settings_are_checked(agent):
    with pytest.raises(arc.AzcmagentError, match=r"settings \['access-token'\]: expected only"):
        agent.connect({**SETTINGS, "access-token": "x"}, "t")
    with pytest.raises(arc.AzcmagentError, match="access_token is empty"):
        agent.connect(SETTINGS, "")
    with pytest.raises(arc.AzcmagentError, match="arc tag value = 'a,b'"):
        agent.connect({**SETTINGS, "tags": {"k": "a,b"}}, "t")


def test_connect_config_file_content(fake_host, arm_token, tmp_path):
    """The file azcmagent reads: long flag names, tags as k=v,..., mode 0600 while it exists.
    A wrapper in front of the stand-in copies what the agent is given."""
    from tests.emulator_fixtures import FAKES_BIN

    spy = tmp_path / "spy"
    spy.mkdir()
    wrapper = tmp_path / "azcmagent-spy"
    wrapper.write_text(
        "#!/bin/sh\n"
        "prev=\n"
        'for a in "$@"; do\n'
        '  if [ "$prev" = --config ]; then stat -c %a "$a" > "$SPY/mode"; cp "$a" "$SPY/content"; fi\n'
        '  prev="$a"\n'
        "done\n"
        f'exec {FAKES_BIN}/azcmagent "$@"\n'
    )
    wrapper.chmod(0o755)
    agent = arc.Azcmagent(Host(fake_host.root, env={**fake_host.env, "SPY": str(spy)}), command=str(wrapper))
    agent.connect(SETTINGS, arm_token)
    assert (spy / "mode").read_text().strip() == "600"
    assert json.loads((spy / "content").read_text()) == {
        "tenant-id": C.TENANT_ID, "subscription-id": C.SUBSCRIPTION_ID, "resource-group": C.ARC_RG,
        "location": C.LOCATION, "resource-name": "flex-node-1", "tags": "env=test,owner=ci",
        "access-token": arm_token,
    }


def test_failing_show_is_an_error_not_a_disconnected_agent(fake_host, agent):
    from aks_flex_node.host import CommandError

    fake_host.fail("azcmagent", "FATAL   cannot read /var/opt/azcmagent/agentconfig.json", verb="show")
    with pytest.raises(CommandError, match="agentconfig.json"):
        agent.show()
