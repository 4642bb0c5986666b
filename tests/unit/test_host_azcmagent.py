"""The azcmagent wrapper against the stand-in in tests/fakes/bin (which talks to the
emulator): the token stays off argv, the 0600 connect file goes afterwards."""

import json
import os
import stat

import pytest

from aks_flex_node import paths
from aks_flex_node.azure import arc, auth
from aks_flex_node.host import Host
from aks_flex_node.host.azcmagent import Azcmagent, AzcmagentError
from tests.emulator import constants as C
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)


@pytest.fixture
def agent(fake_host, no_proxy):
    return Azcmagent(Host(fake_host.root, env=fake_host.env))


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
    path = fake_host.path(paths.RUN_DIR)
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
    assert stat.S_IMODE(fake_host.path(paths.RUN_DIR).stat().st_mode) == 0o700
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
    with pytest.raises(AzcmagentError) as caught:
        Azcmagent(host).show()
    assert caught.value.code == "azcmagent-not-installed" and "azcmagent" in caught.value.message
    assert "`apt-get install azcmagent`" in caught.value.remedy  # the command that mends it


def test_show_output_that_is_not_json_is_reported(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "azcmagent"
    fake.write_text("#!/bin/sh\necho 'Agent Status: Connected'\n")
    fake.chmod(0o755)
    with pytest.raises(AzcmagentError, match="not JSON: 'Agent Status: Connected'"):
        Azcmagent(Host(tmp_path, env={"PATH": str(bin_dir)})).show()


def test_connect_settings_are_checked(agent):
    with pytest.raises(AzcmagentError, match=r"settings \['access-token'\]"):  # the key refused
        agent.connect({**SETTINGS, "access-token": "x"}, "t")
    with pytest.raises(AzcmagentError) as caught:
        agent.connect(SETTINGS, "")
    assert caught.value.code == "empty-access-token" and "access_token" in caught.value.message
    with pytest.raises(AzcmagentError, match="arc tag value = 'a,b'"):
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
    agent = Azcmagent(Host(fake_host.root, env={**fake_host.env, "SPY": str(spy)}), command=str(wrapper))
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


# ---- token files a killed run left behind (kill -9 skips the `finally`) ------------------


def _leftover(fake_host, name, content=b'{"access-token": "emuat.leftover"}'):
    run_dir = fake_host.path(paths.RUN_DIR)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / name
    path.write_bytes(content)
    path.chmod(0o600)
    return path


def test_leftover_token_files_are_removed_before_the_next_run(fake_host, agent, arm_token, tmp_path):
    ours = [_leftover(fake_host, f"azcmagent-{'a' * 32}.json"), _leftover(fake_host, f"azcmagent-{'b' * 32}.json")]
    # Not ours by name, or not a regular file: left alone, and a link is never followed.
    other = _leftover(fake_host, "azcmagent-notours.json")
    elsewhere = tmp_path / "precious.json"
    elsewhere.write_text("keep")
    link = fake_host.path(paths.RUN_DIR) / f"azcmagent-{'c' * 32}.json"
    link.symlink_to(elsewhere)
    directory = fake_host.path(paths.RUN_DIR) / f"azcmagent-{'d' * 32}.json"
    directory.mkdir()
    assert agent.leftover_config_files() == [f"{paths.RUN_DIR}/{p.name}" for p in ours]

    agent.connect(SETTINGS, arm_token)  # the first run of this Azcmagent sweeps first
    assert not any(p.exists() for p in ours)
    assert other.exists() and link.is_symlink() and elsewhere.read_text() == "keep" and directory.is_dir()
    assert sorted(run_dir_entries(fake_host)) == sorted([other.name, link.name, directory.name])


def test_leftovers_through_a_symlinked_run_dir_are_not_touched(fake_host, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / f"azcmagent-{'e' * 32}.json").write_text("{}")
    run_dir = fake_host.path(paths.RUN_DIR)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    run_dir.symlink_to(target)
    agent = Azcmagent(Host(fake_host.root, env=fake_host.env))
    assert agent.leftover_config_files() == []
    assert agent.remove_leftover_config_files() == []
    assert (target / f"azcmagent-{'e' * 32}.json").exists()


# ---- the agent's own proxy settings ------------------------------------------------------


def test_config_set_get_clear_round_trip(fake_host, agent):
    assert agent.config_get("proxy.url") == ""
    agent.config_set("proxy.url", "http://proxy.example:3128")
    agent.config_set("proxy.bypass", "ARM,Arc")
    assert agent.config_get("proxy.url") == "http://proxy.example:3128"
    assert agent.config_get("proxy.bypass") == "ARM,Arc"
    assert fake_host.fake_state("azcmagent-config.json") == {
        "proxy.url": "http://proxy.example:3128", "proxy.bypass": "ARM,Arc"}
    agent.config_clear("proxy.url")
    assert agent.config_get("proxy.url") == ""
    assert ["azcmagent", "config", "get", "proxy.url", "-j"] in fake_host.calls("azcmagent")


@pytest.mark.parametrize("stdout, expected", [
    ('{"proxy.url": "http://p:3128"}', "http://p:3128"),
    ('"http://p:3128"', "http://p:3128"),
    ("proxy.url : http://p:3128\n", "http://p:3128"),
    ("http://p:3128\n", "http://p:3128"),
    ('{"proxy.bypass": ["ARM", "Arc"]}', "ARM,Arc"),
    ("", ""),
])
def test_config_get_reads_the_output_leniently(stdout, expected):
    from aks_flex_node.host.azcmagent import _config_value

    prop = "proxy.bypass" if "bypass" in stdout else "proxy.url"
    assert _config_value(stdout, prop) == expected
