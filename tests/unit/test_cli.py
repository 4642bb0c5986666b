"""The CLI's edges: usage errors, version, routing of `token`, the phase lines."""

import io
import subprocess
import sys

import pytest

from aks_flex_node import __version__, cli, output
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
    assert cli._is_token_call(["token"])
    assert cli._is_token_call(["--root", "/srv/node", "token"])
    assert not cli._is_token_call(["--root", "token", "status"])  # `token` is --root's value
    assert cli._is_token_call(["--json", "token"])
    assert not cli._is_token_call(["status"])


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
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert named in err and "expected a number of seconds" in err


@pytest.mark.parametrize("argv,named", [
    (["status", "--root", ""], "argument --root: ''"),
    (["bootstrap", "--config", " "], "argument --config: ' '"),
    (["config", "import", "x.json", "--output", ""], "argument --output: ''"),
    (["config", "import", "x.json", "--secret-file", ""], "argument --secret-file: ''"),
])
def test_an_empty_path_is_refused_not_taken_for_the_default(argv, named, capsys):
    """An unset shell variable in `--root "$ROOT"` must not mean the live system, nor an
    empty --config or --output the default file."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert named in err and "expected a path" in err
