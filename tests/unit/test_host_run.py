"""Host.run: the only subprocess caller. Real processes: small stand-in scripts in tmp."""

import logging
import os
import signal

import pytest

from aks_flex_node.errors import ExitCode, TemporaryError
from aks_flex_node.host import CommandError, CommandNotFound, CommandTimeout, Host, RunResult
from tests.waiting import returns, wait_for

SECRET = "hunter2-s3cr3t"


def script(directory, name, body):
    """An executable /bin/sh stand-in named `name` in `directory`."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def host(tmp_path):
    return Host(root="/", env={"PATH": "/usr/bin:/bin", "LANG": "fr_FR.ISO-8859-1"})


def test_returns_exit_code_and_both_streams(host, tmp_path):
    cmd = script(tmp_path, "talk", 'echo "out $1"; echo "err $2" >&2\n')
    result = host.run([cmd, "a", "b"])
    assert result == RunResult(0, "out a\n", "err b\n")
    assert result.skipped is False
    rc, out, err = result  # unpacks like the contract's triple
    assert (rc, out, err) == (0, "out a\n", "err b\n")


def test_forces_c_utf8_locale_and_merges_env(host):
    result = host.run(["env"], env={"EXTRA": "1"})
    lines = set(result.stdout.splitlines())
    assert {"LANG=C.UTF-8", "LC_ALL=C.UTF-8", "EXTRA=1"} <= lines
    assert "EXTRA" not in host.env  # per-call env does not leak into the Host


def test_input_reaches_stdin_and_stdin_is_otherwise_empty(host):
    assert host.run(["cat"], input=SECRET).stdout == SECRET
    assert host.run(["cat"], input=SECRET.encode()).stdout == SECRET
    # Without input stdin is /dev/null: cat ends at once instead of waiting for a terminal
    # (a stdin left open would hang it past its generous timeout, a CommandTimeout).
    assert host.run(["readlink", "/proc/self/fd/0"]).stdout == "/dev/null\n"
    assert host.run(["cat"], timeout=300).stdout == ""


def test_ok_codes_accepts_listed_non_zero_codes(host, tmp_path):
    cmd = script(tmp_path, "three", "exit 3\n")
    assert host.run([cmd], ok_codes=(0, 3)).returncode == 3
    with pytest.raises(CommandError) as caught:
        host.run([cmd])
    assert caught.value.returncode == 3
    assert caught.value.exit_code == ExitCode.FAILED


def test_failure_message_names_command_code_and_stderr_tail(host, tmp_path):
    lines = "".join(f"echo line{i} >&2\n" for i in range(1, 9))
    cmd = script(tmp_path, "noisy", lines + "exit 7\n")
    with pytest.raises(CommandError) as caught:
        host.run([cmd, "--flag"])
    message = str(caught.value)
    assert caught.value.returncode == 7 and caught.value.argv == [cmd, "--flag"]
    assert f"`{cmd} --flag`" in message and "7" in message  # the command and its exit code
    assert "line8" in message and "line4" in message  # the last five lines
    assert "line3" not in message


def test_failure_without_stderr_quotes_stdout(host, tmp_path):
    cmd = script(tmp_path, "quiet", "echo only-stdout\nexit 1\n")
    with pytest.raises(CommandError, match="only-stdout"):
        host.run([cmd])


def test_secrets_are_redacted_from_error_and_logs(host, tmp_path, caplog):
    cmd = script(tmp_path, "leaky", 'echo "token=$2" ; echo "bad password $2" >&2; exit 2\n')
    caplog.set_level(logging.DEBUG, logger="aks_flex_node")
    with pytest.raises(CommandError) as caught:
        host.run([cmd, "--password", SECRET], secrets=[SECRET, ""])
    err = caught.value
    assert SECRET not in str(err)
    assert "--password ***" in str(err) and "bad password ***" in str(err)
    assert SECRET not in " ".join(err.argv) + err.stdout + err.stderr
    assert "token=***" in err.stdout
    assert caplog.records, "the command should have been logged"
    for record in caplog.records:
        assert SECRET not in record.getMessage()


def test_secret_holding_quotes_is_redacted_despite_shell_quoting(host, tmp_path, caplog):
    tricky = "it's a \"secret\""
    cmd = script(tmp_path, "fail", "exit 1\n")
    caplog.set_level(logging.DEBUG, logger="aks_flex_node")
    with pytest.raises(CommandError) as caught:
        host.run([cmd, "--token=" + tricky], secrets=[tricky])
    assert "--token=***" in str(caught.value)
    assert "secret" not in str(caught.value).replace(cmd, "")
    assert all("secret" not in r.getMessage().replace(cmd, "") for r in caplog.records)


def test_debug_log_has_redacted_argv_and_duration(host, caplog):
    caplog.set_level(logging.DEBUG, logger="aks_flex_node.host.run")
    host.run(["echo", SECRET], secrets=[SECRET])
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("ran `echo ***`: exit 0 in ") and m.endswith("s") for m in messages)


def test_longer_secret_is_hidden_whole(host, tmp_path):
    cmd = script(tmp_path, "fail", 'echo "$1" >&2; exit 1\n')
    with pytest.raises(CommandError) as caught:
        host.run([cmd, "abc-abcdef"], secrets=["abc", "abc-abcdef"])
    assert "abc" not in str(caught.value).replace(cmd, "")


def test_timeout_kills_the_whole_process_group(host, tmp_path):
    # The backgrounded child never ends by itself within the test, and it holds the pipes
    # until it ends: a run that waited on them would hang (returns() fails it after 300 s)
    # and one that killed only the shell would leave it running (_alive below).
    pid_file = tmp_path / "child.pid"
    cmd = script(tmp_path, "hang", f'sleep 3600 &\necho $! > {pid_file}\necho started >&2\nwait\n')
    try:
        with pytest.raises(CommandTimeout) as caught:
            returns(lambda: host.run([cmd], timeout=0.5), what="host.run")
        err = caught.value
        assert isinstance(err, TemporaryError) and isinstance(err, CommandError)
        assert err.exit_code == ExitCode.TEMPFAIL
        assert err.code == "command-timeout" and err.argv == [cmd]
        assert f"`{cmd}`" in str(err) and "0.5s" in str(err)  # the command and the limit
        assert str(err).endswith("\nstarted") and err.stderr == "started\n"  # its last output
        child = int(pid_file.read_text())
        assert not _alive(child), "the backgrounded sleep outlived the timeout"
    finally:
        _end_stray(pid_file)


def _end_stray(pid_file):
    """Kill the backgrounded sleep a broken run left behind, by its recorded pid."""
    try:
        pid = int(pid_file.read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if f.read().split(b"\0")[0] != b"sleep":
                return
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


def _running(pid):
    # The orphaned sleep may linger as a zombie until init reaps it: that is not running.
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _alive(pid):
    """Still running once it has had 30 s to go (a ceiling for a broken run, not a measure)."""
    return not wait_for(lambda: not _running(pid), timeout=30, interval=0.05)


def test_missing_command_names_it_and_its_package(tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    host = Host(env={"PATH": str(empty)})
    with pytest.raises(CommandNotFound) as caught:
        host.run(["modprobe", "overlay"])
    err = caught.value
    assert err.code == "command-not-found" and err.argv == ["modprobe", "overlay"]
    assert "modprobe" in str(err) and "kmod" in str(err) and err.package == "kmod"
    assert "kmod" in err.remedy
    assert str(empty) in str(err)


def test_missing_unknown_command_and_missing_absolute_path(host, tmp_path):
    with pytest.raises(CommandNotFound, match="no-such-command-x1") as caught:
        host.run(["no-such-command-x1"])
    assert caught.value.package is None
    with pytest.raises(CommandNotFound, match="/nonexistent/bin/tool"):
        host.run(["/nonexistent/bin/tool"])
    not_executable = tmp_path / "plain"
    not_executable.write_text("#!/bin/sh\n")
    with pytest.raises(CommandNotFound, match="plain"):
        host.run([str(not_executable)])


def test_killed_by_signal_is_reported(host, tmp_path):
    cmd = script(tmp_path, "suicide", "kill -9 $$\n")
    with pytest.raises(CommandError, match=f"`{cmd}`.*signal 9") as caught:  # the command, the signal
        host.run([cmd])
    assert caught.value.returncode == -9


@pytest.mark.parametrize("argv, error, expected", [
    ("systemctl start kubelet", TypeError, "never go through a shell"),
    ([], ValueError, "argv is empty"),
    (["echo", 3], TypeError, r"argv\[1\] = 3"),
])
def test_bad_argv_is_rejected(host, argv, error, expected):
    with pytest.raises(error, match=expected):
        host.run(argv)


@pytest.mark.parametrize("timeout", [0, -1, "10", True])
def test_bad_timeout_is_rejected(host, timeout):
    with pytest.raises(ValueError, match=f"timeout = {timeout!r}: expected a number"):
        host.run(["true"], timeout=timeout)


@pytest.mark.parametrize("ok_codes", [0, "0", None])
def test_bad_ok_codes_are_rejected(host, ok_codes):
    with pytest.raises(TypeError, match=f"ok_codes = {ok_codes!r}: expected a collection"):
        host.run(["true"], ok_codes=ok_codes)


def test_secrets_as_a_single_string_is_rejected(host):
    with pytest.raises(TypeError, match=r"^secrets\b.*\bstr\b"):  # the argument and the type given
        host.run(["true"], secrets=SECRET)


def test_path_like_arguments_are_accepted(host, tmp_path):
    target = tmp_path / "f"
    target.write_text("x")
    assert host.run(["cat", target]).stdout == "x"


def test_no_stray_process_after_run(host, tmp_path):
    cmd = script(tmp_path, "quick", "echo $$\n")
    pid = int(host.run([cmd]).stdout)
    assert not os.path.exists(f"/proc/{pid}")
