"""Values the checks used to let through (the bad-input corpus): a control character in
any value, a bridge subnet without a prefix length or too small for pods, a command with
arguments, and a configuration file that is a FIFO or a link to /dev/null."""

import os

import pytest

from aks_flex_node import config
from aks_flex_node.config import spec
from aks_flex_node.errors import ConfigError
from tests.config_fixtures import make_root, only_problem, with_values, write_conf
from tests.waiting import returns


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


# ---- control characters ---------------------------------------------------------------------


@pytest.mark.parametrize("char, name", [("\x7f", "U+007F, DEL"), ("\x1b", "U+001B, ESC"), ("\x00", "U+0000, NUL"),
                                        ("\t", "U+0009, TAB"), ("\x85", "U+0085"), ("\x9b", "U+009B")])
def test_a_control_character_in_a_file_value_is_refused_naming_the_key(root, char, name):
    problem = only_problem(root, with_values(arc_tags=f"env=te{char}st"), "arc_tags")
    assert problem.expected.startswith(f"a value without control characters (it has {name}")
    assert "at position 7" in problem.expected
    assert problem.value == f"env=te{char}st"
    assert f"arc_tags = 'env=te\\x{ord(char):02x}st'" in str(problem) or char == "\t"  # escaped when shown


def test_every_key_refuses_a_control_character(root):
    for key in spec.keys():
        with pytest.raises(ConfigError) as excinfo:
            config.from_values({key: "a\x7fb"}, root=str(root))
        assert any(p.key == key and "control characters" in p.expected for p in excinfo.value.problems), key


def test_a_control_character_in_an_override_or_a_written_value_is_refused(root):
    write_conf(root, with_values())
    with pytest.raises(ConfigError) as excinfo:
        config.load(root=str(root), overrides={"machine_name": "node\x7f1"})
    assert [p.key for p in excinfo.value.problems] == ["machine_name"]
    with pytest.raises(ConfigError) as excinfo:
        config.write(None, {"node_labels": "a=b\x1b[2J"}, root=str(root))
    assert [p.key for p in excinfo.value.problems] == ["node_labels"]


def test_a_control_character_in_a_secret_looking_value_is_not_shown():
    raw, problems = {}, []
    from aks_flex_node.config.fileformat import take_value

    take_value("https_proxy", "http://user:pa\x7fss@proxy:3128", raw, problems, origin="value")
    [problem] = problems
    assert "pa" not in problem.value and "\x7f" not in problem.value


def test_printable_unicode_is_still_a_value(root):
    write_conf(root, with_values(arc_tags="site=Zürich,owner=Ødegård"))
    assert config.load(root=str(root)).arc_tags == ["site=Zürich", "owner=Ødegård"]


# ---- bridge_subnet ----------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("10.244.0.0", "the /prefix-length is required"),
    ("10.244.0.0/", "the /prefix-length is required"),
    ("10.244.0.0/ 24", "the /prefix-length is required"),
    ("10.244.0.0/255.255.255.0", "the /prefix-length is required"),
    ("10.244.0.0/29", "of at least 16 addresses: /28 or shorter (a /29 has 8)"),
    ("10.244.0.1/32", "of at least 16 addresses: /28 or shorter (a /32 has 1)"),
    ("fd00:10:244::/125", "/124 or shorter (a /125 has 8)"),
])
def test_a_bridge_subnet_needs_a_prefix_length_with_room_for_pods(root, value, expected):
    problem = only_problem(root, with_values(bridge_subnet=value), "bridge_subnet")
    assert expected in problem.expected and problem.value == value


@pytest.mark.parametrize("value", ["10.244.0.0/28", "10.244.0.0/24", "10.0.0.0/8", "fd00:10:244::/64"])
def test_a_bridge_subnet_with_room_for_pods_loads(root, value):
    write_conf(root, with_values(bridge_subnet=value))
    assert config.load(root=str(root)).bridge_subnet == value


# ---- commands -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key, value", [
    ("exec_plugin_command", "/usr/bin/aks-flex-node token"),
    ("azcmagent", "/opt/azcmagent/bin/azcmagent --verbose"),
    ("azcmagent", "azcmagent connect"),
])
def test_a_command_with_arguments_is_refused(root, key, value):
    assert only_problem(root, with_values(**{key: value}), key).value == value


def test_the_exec_plugin_command_is_an_absolute_path(root):
    problem = only_problem(root, with_values(exec_plugin_command="aks-flex-node"), "exec_plugin_command")
    assert problem.value == "aks-flex-node"
    write_conf(root, with_values(exec_plugin_command="/opt/aks-flex-node/bin/../bin/aks-flex-node",
                                 azcmagent="azcmagent"))
    cfg = config.load(root=str(root))
    assert cfg.exec_plugin_command == "/opt/aks-flex-node/bin/aks-flex-node" and cfg.azcmagent == "azcmagent"


# ---- the configuration file itself --------------------------------------------------------------


def test_a_config_file_that_is_a_fifo_is_refused_without_blocking(root):
    path = root / "etc/aks-flex-node/aks-flex-node.conf"
    path.parent.mkdir(parents=True)
    os.mkfifo(path, 0o600)
    # Opening a FIFO nobody writes to blocks for ever: returns() fails a load that opens it
    # (after 300 s), and the cleanup lets such an open go.
    try:
        with pytest.raises(ConfigError) as excinfo:
            returns(lambda: config.load(root=str(root)), what="config.load")
        [problem] = excinfo.value.problems
        assert problem.value == str(path) and "FIFO" in problem.expected  # what the file is, named
        with pytest.raises(ConfigError) as excinfo:  # nor does `config set` open it
            returns(lambda: config.write(None, {"log_level": "debug"}, root=str(root)), what="config.write")
        [problem] = excinfo.value.problems
        assert problem.value == str(path) and "FIFO" in problem.expected
    finally:
        _release_readers(path)


def _release_readers(fifo):
    """End the open() of whatever hangs reading `fifo`: a writer that comes and goes."""
    for _ in range(2):  # a load, then a write
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader, nothing hangs
            return


def test_a_config_file_linked_to_dev_null_is_not_called_missing(root):
    path = root / "etc/aks-flex-node/aks-flex-node.conf"
    path.parent.mkdir(parents=True)
    path.symlink_to("/dev/null")
    with pytest.raises(ConfigError) as excinfo:
        config.load(root=str(root))
    [problem] = excinfo.value.problems
    assert problem.value == str(path)
    assert "/dev/null" in problem.expected  # where the link leads, named
    assert "config import" not in str(excinfo.value)  # not the remedy for a missing file
