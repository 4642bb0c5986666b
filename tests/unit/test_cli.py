"""The CLI's edges: usage errors, version, routing of `token`, the phase lines."""

import argparse
import io
import json
import os
import subprocess
import sys

import pytest

from aks_flex_node import __version__, cli, output, paths
from aks_flex_node.commands import arguments
from aks_flex_node.engine.runner import PhaseResult
from tests.harness import REPO


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "aks_flex_node", *args], cwd=REPO,
                          capture_output=True, text=True, env=env)


def test_version_needs_no_config_and_no_sdk():
    proc = run_cli("version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"aks-flex-node {__version__}"
    code = ("import sys; from aks_flex_node import cli; cli.main(['version']); "
            "print(sorted(m for m in sys.modules if m.startswith('azure')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.stdout.strip().endswith("[]"), out.stdout


def imported_by(*argv, env=None):
    """The modules `python3 -X importtime -m aks_flex_node ARGV` imports, and the process."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "aks_flex_node", *argv], cwd=REPO,
                          capture_output=True, text=True, env=env)
    return {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:")}, proc


@pytest.mark.parametrize("argv", [["version"], ["token", "--help"], ["status", "--help"], ["--help"]])
def test_light_commands_import_no_step_module_nor_the_sdk(argv):
    """Issue 12: `version` imported every step module (the bootstrap parser's phase list).
    Only the named command's arguments are built now, and -X importtime says so."""
    imported, proc = imported_by(*argv)
    assert proc.returncode == 0, proc.stderr
    heavy = {m for m in imported if m.startswith(("aks_flex_node.steps", "aks_flex_node.engine", "azure",
                                                  "aks_flex_node.config", "configobj", "yaml"))}
    assert not heavy, heavy
    if argv == ["version"]:
        assert not {"logging", "json", "pathlib", "ssl", "urllib.request"} & imported


def test_bootstrap_still_gets_its_phase_names():
    imported, proc = imported_by("bootstrap", "--phase", "nope")
    assert proc.returncode == 2 and "argument --phase: invalid choice: 'nope'" in proc.stderr
    assert "aks_flex_node.steps.workflow" in imported


def full_help(parser):
    """Every (command path, help text) of `parser`, subcommands included."""
    out = [((), parser.format_help())]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [((name,) + path, text) for path, text in full_help(sub)]
    return out


def test_every_command_help_is_the_same_as_from_the_full_parser(capsys):
    """The lazy parser of each command prints the help the full one (the man page's source)
    prints, and `aks-flex-node COMMAND --help` shows it, arguments and all."""
    full = dict(full_help(arguments.build_parser()))
    commands = [path for path in full if path]
    assert {path[0] for path in commands} == {name for name, _, _ in arguments.SUBCOMMANDS}
    assert ("config", "import") in commands
    for path in commands:
        if path == ("token",):
            continue  # token parses its own arguments (below)
        with pytest.raises(SystemExit) as done:
            cli.main([*path, "--help"])
        assert done.value.code == 0
        assert capsys.readouterr().out == full[path], path
    assert "--phase PHASE" in full[("bootstrap",)] and "--cloud-interval" in full[("agent",)]
    proc = run_cli("token", "--help")
    assert proc.returncode == 0 and "usage: aks-flex-node token" in proc.stdout and "--root" in proc.stdout
    proc = run_cli("--help")
    assert proc.returncode == 0
    for name, text, _ in arguments.SUBCOMMANDS:
        assert name in proc.stdout and text.split()[0] in proc.stdout


def test_the_default_paths_in_the_help_are_the_package_paths():
    assert (arguments.DEFAULT_CONFIG, arguments.DEFAULT_SECRET) == (paths.CONFIG, paths.SECRET)


def test_the_command_word_skips_option_values():
    assert cli._command_word(["--root", "status", "bootstrap", "--dry-run"]) == "bootstrap"
    assert cli._command_word(["--config", "/x.conf", "-vv", "config", "show"]) == "config"
    assert cli._command_word(["--json"]) is None
    assert cli._command_word([]) is None


def test_usage_errors_exit_2_with_the_usage_line():
    proc = run_cli("bootstrap", "--no-such-flag")
    assert proc.returncode == 2
    assert "--no-such-flag" in proc.stderr and "usage: aks-flex-node" in proc.stderr
    proc = run_cli("frobnicate")
    assert proc.returncode == 2 and "frobnicate" in proc.stderr


def test_a_missing_config_is_a_config_error(tmp_path):
    proc = run_cli("bootstrap", "--root", str(tmp_path))
    assert proc.returncode == 2
    assert "/etc/aks-flex-node/aks-flex-node.conf" in proc.stderr


def test_token_is_routed_before_argument_parsing():
    assert cli._command_word(["token"]) == "token"
    assert cli._command_word(["--root", "/srv/node", "token"]) == "token"
    assert cli._command_word(["--root", "token", "status"]) == "status"  # `token` is --root's value
    assert cli._command_word(["--json", "token"]) == "token"


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_phase_lines_count_phases_as_they_end():
    out = io.StringIO()
    printer = output.PhasePrinter(out)
    late = PhaseResult("arc", "identity", "changed", started=0.0, finished=2.0,
                       changes=[{"what": "connect to Azure Arc", "why": "new"}])
    early = PhaseResult("runc", "install", "unchanged", started=0.0, finished=0.5,
                        message="runc 1.1.12 installed and intact")
    printer("start", late, 1, 2)
    printer("start", early, 2, 2)
    printer("finish", early, 2, 2)
    printer("finish", late, 1, 2)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[ 1/2] runc") and "installed and intact" in lines[0]
    assert lines[1].startswith("[ 2/2] arc") and "connect to Azure Arc" in lines[1]
    assert "2.0s" in lines[1]


def test_phase_lines_on_a_tty_redraw_the_current_line():
    out = Tty()
    printer = output.PhasePrinter(out)
    phase = PhaseResult("system", "install", "changed", started=0.0, finished=1.0)
    printer("start", phase, 1, 1)
    printer("finish", phase, 1, 1)
    assert out.getvalue().startswith("[ 1/1] system")
    assert "\r\x1b[2K[ 1/1] system" in out.getvalue()


@pytest.mark.parametrize("argv, named", [
    (["agent", "--interval", "0"], "--interval"),
    (["agent", "--interval", "nan"], "--interval"),
    (["agent", "--cloud-interval", "-5"], "--cloud-interval"),
    (["status", "--wait", "--timeout", "0"], "--timeout"),
    (["bootstrap", "--wait-lock", "-1"], "--wait-lock"),
    # float() takes these; sleeping on them fails later or never ends.
    (["bootstrap", "--wait-lock", "\u0663"], "--wait-lock"),
    (["bootstrap", "--wait-lock", "\uff15"], "--wait-lock"),
    (["status", "--wait", "--timeout", "inf"], "--timeout"),
    (["status", "--wait", "--timeout", "1e9"], "--timeout"),
    (["agent", "--interval", "604801"], "--interval"),
])
def test_seconds_options_refuse_what_would_busy_loop(argv, named, capsys):
    """Issue 9, defect 7: `agent --interval 0` busy-looped; Arabic-Indic or fullwidth
    digits, inf and exponents passed float()."""
    assert cli.main(argv + ["--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error"] == "usage" and f"argument {named}: {argv[-1]!r}" in error["message"]


@pytest.mark.parametrize("argv,named", [
    (["status", "--root", ""], "--root"),
    (["bootstrap", "--config", " "], "--config"),
    (["config", "import", "x.json", "--output", ""], "--output"),
    (["config", "import", "x.json", "--secret-file", ""], "--secret-file"),
])
def test_an_empty_path_is_refused_not_taken_for_the_default(argv, named, capsys):
    """An unset shell variable in `--root "$ROOT"` must not mean the live system, nor an
    empty --config or --output the default file."""
    assert cli.main(argv + ["--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error"] == "usage" and f"argument {named}: {argv[-1]!r}" in error["message"]


LEAVE = """
import atexit, sys, tempfile, threading, time
from aks_flex_node import cli

class Teardown:
    def __del__(self):
        print("torn down")

kept = Teardown()  # a module global: freed only by the interpreter's teardown
scratch = tempfile.TemporaryDirectory()  # removed at exit by its weakref.finalize (atexit)
print(scratch.name)
atexit.register(lambda: sys.stdout.write("atexit ran, unflushed"))  # stdout is a pipe: buffered
threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
cli.leave(CODE)
"""


def buffered_env():
    """The environment, less PYTHONUNBUFFERED: stdout to a pipe is then block-buffered, as
    it is for the kubelet and for a script that reads the command's output."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


@pytest.mark.parametrize("code", [0, 3])
def test_leave_keeps_what_finalization_does_but_the_teardown(code):
    """cli.leave (the command's exit): the exit code, a thread that is not a daemon waited
    for, atexit's functions (a TemporaryDirectory's removal among them) and the buffered
    output kept; the modules' teardown (75 ms of a bootstrap that read Azure) skipped."""
    proc = subprocess.run([sys.executable, "-c", LEAVE.replace("CODE", str(code))], cwd=REPO,
                          capture_output=True, text=True, env=buffered_env())
    assert proc.returncode == code, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1:] == ["thread finished", "atexit ran, unflushed"], proc.stdout
    assert not os.path.exists(lines[0])
    assert "torn down" not in proc.stdout


def test_leave_with_a_closed_stdout_exits_120_as_python_does():
    code = "import sys; from aks_flex_node import cli; sys.stdout.write('x' * 100); cli.leave(0)"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=buffered_env())
    proc.stdout.close()  # the reader went away: the final flush fails with EPIPE
    assert proc.wait() == 120


def test_the_command_leaves_through_cli_leave():
    """`python3 -m aks_flex_node` and the installed command (setup.cfg's entry point) both
    run cli.run, so each command's exit skips the teardown."""
    import configparser

    entry = configparser.ConfigParser()
    entry.read(os.path.join(REPO, "setup.cfg"))
    assert entry["options.entry_points"]["console_scripts"].split("=")[1].strip() == "aks_flex_node.cli:run"
    with open(os.path.join(REPO, "aks_flex_node", "__main__.py")) as f:
        assert "run()" in f.read()
    proc = run_cli("config", "validate", "--root", "/nonexistent-root")
    assert proc.returncode == 2  # the command's own code comes through
