"""aks_flex_node.maintainer.maintscript under the interpreter running the tests (both stacks): its
decisions, and its debconf protocol client against debconf's real frontend."""

import logging
import os
import socket
import subprocess
import sys

import pytest

from aks_flex_node import lifecycle
from aks_flex_node.maintainer import debconf_answers, maintscript, node_files
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


@pytest.mark.parametrize("value", ["0", "0.0", "-5", "soon", "inf", "nan", "1e9", "0x10", "\u0666\u0660",
                                   "\uff16\uff10", " 60", "60\n", "1_000", "86401"])
def test_a_bad_timeout_names_the_variable_the_value_and_what_is_expected(monkeypatch, value):
    # float() took "inf" (then OverflowError in the wait), "1e9" and Arabic-Indic digits.
    monkeypatch.setenv(maintscript.JOIN_TIMEOUT_ENV, value)
    seconds, problem = maintscript.read_timeout(maintscript.JOIN_TIMEOUT_ENV, 900.0)
    assert seconds == 900.0
    assert str(problem).startswith(f"{maintscript.JOIN_TIMEOUT_ENV} = {value!r}: expected")
    assert "ASCII digits" in problem.expected and "86400" in problem.expected


@pytest.mark.parametrize("value, seconds", [("", 900.0), ("60", 60.0), ("2.5", 2.5), ("86400", 86400.0)])
def test_a_good_timeout_is_taken(monkeypatch, value, seconds):
    monkeypatch.setenv(maintscript.JOIN_TIMEOUT_ENV, value)
    assert maintscript.read_timeout(maintscript.JOIN_TIMEOUT_ENV, 900.0) == (seconds, None)


@pytest.mark.parametrize("value", ["inf", "\u0666\u0660", "soon"])
def test_a_bad_unjoin_timeout_is_named_and_the_unjoin_goes_on(tmp_path, value):
    # Before: "inf" ended in an OverflowError and "\u0666\u0660" was taken as 60 s in silence.
    pending = tmp_path / "var/lib/aks-flex-node/join-pending"
    pending.parent.mkdir(parents=True)
    pending.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "DEBIAN_HAS_FRONTEND"}
    env.update(DPKG_ROOT=str(tmp_path), AKS_FLEX_NODE_UNJOIN_TIMEOUT=value)
    result = subprocess.run([sys.executable, "-m", "aks_flex_node.maintainer.maintscript", "unjoin", "remove"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"AKS_FLEX_NODE_UNJOIN_TIMEOUT = {value!r}" in result.stderr
    assert "the default 300 s" in result.stderr
    assert not pending.exists()  # the leave went on: it cancelled the pending join
    assert "Traceback" not in result.stderr


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
                      f"exec {sys.executable} -m aks_flex_node.maintainer.maintscript render-config {output}\n")
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


# ---- the files the maintainer scripts read ------------------------------------------------


def sparse_file(path, size):
    with path.open("wb") as handle:
        handle.truncate(size)


@pytest.mark.parametrize("make, text, required, expected", [
    (lambda p: p.write_bytes(b"key = caf\xe9\n"), True, False, "not UTF-8 text (byte 0xe9 on line 1)"),
    (lambda p: p.write_bytes(b"a\nb\0c"), True, False, "a binary file (a NUL byte at offset 3), not text"),
    (lambda p: p.write_bytes(b"key = caf\xe9\n"), False, False, None),  # bytes are fine unless text
    (lambda p: p.mkdir(), True, False, "a directory, not a file"),
    (lambda p: p.symlink_to("/nonexistent/x"), True, False, "a symbolic link to /nonexistent/x, which does not exist"),
    (lambda p: p.symlink_to(p.name), True, False, "it cannot be reached (Too many levels of symbolic links)"),
    (lambda p: None, True, False, None),
    (lambda p: None, True, True, "it does not exist"),
    (lambda p: p.write_bytes(b" \n"), True, True, "it is empty"),
    (lambda p: p.write_bytes("tenant_id = é\n".encode()), True, True, None),
    # Never waited on, never read whole: a FIFO, a socket, a file far larger than ours.
    (lambda p: os.mkfifo(p), True, False, "not a regular file (a FIFO, a socket or a device)"),
    (lambda p: socket.socket(socket.AF_UNIX).bind(str(p)), True, False,
     "not a regular file (a FIFO, a socket or a device)"),
    (lambda p: sparse_file(p, node_files.MAX_FILE_BYTES + 1), True, False,
     f"larger than {node_files.MAX_FILE_BYTES} bytes: not a file aks-flex-node wrote"),
])
def test_file_problem_says_why_a_file_cannot_be_read(tmp_path, make, text, required, expected):
    (tmp_path / "etc").mkdir()
    make(tmp_path / "etc" / "f")
    problem, _data = node_files.file_problem(Host(tmp_path), "/etc/f", text=text, required=required)
    assert problem == expected


def test_a_file_where_a_directory_belongs_is_one_bad_file(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/aks-flex-node").write_text("x")
    bad, text = node_files.config_problems(Host(tmp_path))
    assert [(b.path, b.problem) for b in bad] == [("/etc/aks-flex-node", "a file, not a directory")]
    assert text is None and "mv /etc/aks-flex-node /etc/aks-flex-node.bad" in bad[0].remedy


def test_state_problems_read_the_ledger_and_status_as_the_library_does(tmp_path):
    state = tmp_path / "var/lib/aks-flex-node"
    state.mkdir(parents=True)
    (state / "ledger.json").write_text("[]")
    (state / "status.json").write_text("{not json")
    (state / "join-pending").mkdir()
    bad = {b.path: b for b in node_files.state_problems(Host(tmp_path))}
    assert sorted(bad) == ["/var/lib/aks-flex-node/join-pending", "/var/lib/aks-flex-node/ledger.json",
                           "/var/lib/aks-flex-node/status.json"]
    assert bad["/var/lib/aks-flex-node/ledger.json"].problem.startswith("it is not a ledger")
    assert bad["/var/lib/aks-flex-node/status.json"].problem.startswith("it is not JSON")
    assert node_files.state_problems(Host(tmp_path / "empty")) == []
