"""aks_flex_node.maintscript under the interpreter running the tests (both stacks): its
decisions, and its debconf protocol client against debconf's real frontend."""

import logging
import os
import subprocess
import sys

import pytest

from aks_flex_node import debconf_answers, lifecycle, maintscript
from aks_flex_node.host import Host
from tests.deb import sandbox as sb_mod
from tests.deb.conftest import require_tools
from tests.deb.test_maintscripts import CLUSTER, TENANT, preseed_join


@pytest.fixture(autouse=True)
def root_logger_restored():
    """main() sets up logging for a maintainer script; give the next test its own back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("action, version, pending, env, expected", [
    ("configure", "", False, {}, "first install"),
    ("configure", "0.0.9", False, {}, None),  # a plain upgrade never joins
    ("configure", "0.0.9", True, {}, "a join is pending"),
    ("configure", "0.0.9", False, {"DEBCONF_RECONFIGURE": "1"}, "reconfigure"),
    ("reconfigure", "0.1.0", False, {}, "reconfigure"),
])
def test_join_reason(monkeypatch, action, version, pending, env, expected):
    monkeypatch.delenv("DEBCONF_RECONFIGURE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert maintscript.join_reason(action, version, pending) == expected


def test_no_join_into_another_root_unless_the_live_commands_are_stand_ins(tmp_path, monkeypatch):
    monkeypatch.delenv("AKS_FLEX_NODE_HOST_BIN", raising=False)
    blocker = lifecycle.live_system_blocker(Host(tmp_path))
    assert blocker and "DPKG_ROOT" in blocker and str(tmp_path) in blocker
    monkeypatch.setenv("AKS_FLEX_NODE_HOST_BIN", str(tmp_path))
    assert lifecycle.live_system_blocker(Host(tmp_path)) is None


def test_file_values_are_read_as_sh_reads_them():
    text = "[azure]\n# tenant_id = commented\ntenant_id = a\n  tenant_id=b  \nsubscription_id =\n"
    assert debconf_answers.file_value(text, "tenant_id") == "b"
    assert debconf_answers.file_value(text, "subscription_id") == ""
    assert debconf_answers.file_value(text, "cloud") is None


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_a_bad_timeout_names_the_variable_the_value_and_what_is_expected(monkeypatch, value):
    monkeypatch.setenv(maintscript.JOIN_TIMEOUT_ENV, value)
    with pytest.raises(maintscript.FlexNodeError) as err:
        maintscript._timeout(maintscript.JOIN_TIMEOUT_ENV, 900.0)
    assert maintscript.JOIN_TIMEOUT_ENV in err.value.message and repr(value) in err.value.message
    assert "greater than 0" in err.value.message


def test_without_debconf_the_commands_say_where_they_belong(monkeypatch, capsys):
    monkeypatch.delenv("DEBIAN_HAS_FRONTEND", raising=False)
    assert maintscript.main(["render-config", "/nonexistent"]) == 1
    assert "postinst" in capsys.readouterr().err


def test_a_bad_command_line_gets_the_usage(capsys):
    assert maintscript.main(["join", "upgrade"]) == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "join upgrade" in err


def test_render_config_speaks_debconf_with_this_interpreter(tmp_path):
    """render-config run by this interpreter (Debian's or PyPI's stack) under debconf's
    frontend, as the postinst runs it."""
    require_tools("debconf-set-selections", "po2debconf")
    sb = sb_mod.Sandbox(tmp_path)
    preseed_join(sb, join="false", cloud=("select", "AzurePublicCloud"))
    # Templates in the database, as the frontend loads them for a postinst.
    subprocess.run(["debconf-loadtemplate", "aks-flex-node", str(sb.info / "aks-flex-node.templates")],
                   check=True, env=sb.env())
    output = tmp_path / "new.conf"
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\n. /usr/share/debconf/confmodule\n"
                      f"exec {sys.executable} -m aks_flex_node.maintscript render-config {output}\n")
    script.chmod(0o755)
    result = subprocess.run([str(script)], capture_output=True, text=True, timeout=60,
                            env=sb.env(DEBCONF_PACKAGE="aks-flex-node"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    text = output.read_text()
    assert f"tenant_id = {TENANT}" in text and f"cluster_resource_id = {CLUSTER}" in text
    assert os.stat(output).st_mode & 0o777 == 0o600
    assert sb.path(sb_mod.SECRET).read_text() == "s3cr3t-value\n"
    assert sb.get("sp_client_secret") == ""
    assert not [p for p in sb.db_files() if b"s3cr3t-value" in p.read_bytes()]
