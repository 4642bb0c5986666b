"""cache_dir through the CLI (issue #8): a system location is a configuration error
(exit 2, naming cache_dir) before anything runs, so unbootstrap never empties /etc."""

from aks_flex_node import config
from tests.harness import CONFIG_PATH


def set_value(node, key, value):
    config.write(CONFIG_PATH, {key: value}, root=node.root)  # shape only: load() judges the value


def files_under(node, node_dir):
    return {p for p in node.files() if p == node_dir or p.startswith(node_dir + "/")}


def test_unbootstrap_with_cache_dir_etc_exits_2_and_leaves_etc_alone(node):
    node.cli("bootstrap", check=True)
    etc = files_under(node, "/etc")
    set_value(node, "cache_dir", "/etc")
    proc = node.cli("unbootstrap")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cache_dir = '/etc': expected a directory of aks-flex-node's own" in proc.stderr
    assert "/etc is the system's configuration" in proc.stderr
    assert files_under(node, "/etc") == etc
    assert node.emu.state()["machines"], "nothing was undone"


def test_cache_dir_root_is_a_configuration_error_not_an_internal_one(node):
    set_value(node, "cache_dir", "/")
    before = node.files()
    for command in ("bootstrap", "unbootstrap"):
        proc = node.cli(command)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "cache_dir = '/': expected a directory of aks-flex-node's own" in proc.stderr
        assert "Traceback" not in proc.stderr
    proc, doc = node.cli_json("config", "validate")
    assert proc.returncode == 2
    assert [p["key"] for p in doc["problems"]] == ["cache_dir"]
    assert node.files() == before
