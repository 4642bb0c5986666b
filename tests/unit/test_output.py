"""The one sanitiser at the output edge (aks_flex_node/output.py): control characters in
text from the network or the disk are written out, never sent to the terminal (issue 26
defect 9). The CLI-level proof is tests/integration/test_terminal_escapes.py."""

import io
import json
import sys

import pytest

from aks_flex_node import cli, output
from aks_flex_node.engine.runner import PhaseResult


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("raw, escaped", [
    ("\x1b[2J", "\\x1b[2J"),  # ECMA-48 CSI: erase the screen
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # OSC: set the window title
    ("a\rb", "a\\x0db"),  # a carriage return overwrites what the line said
    ("\x00\x7f\x9b", "\\x00\\x7f\\x9b"),  # NUL, DEL, the C1 CSI
    ("\u202eevil", "\\u202eevil"),  # a bidirectional override
    ("line\n\tindented é ✓", "line\n\tindented é ✓"),  # newline, tab and printable text stay
])
def test_control_characters_are_written_out(raw, escaped):
    assert output.shown(raw) == escaped
    assert output.shown(output.shown(raw)) == escaped  # once is enough, twice changes nothing


def test_phase_lines_escape_the_message_but_keep_their_own_line_erase():
    out = Tty()
    printer = output.PhasePrinter(output.ShownStream(out))
    phase = PhaseResult("cni", "install", "failed", started=0.0, finished=1.0,
                        message="archive member \x1b[2Jbridge is a symlink")
    printer("start", phase, 1, 1)
    printer("finish", phase, 1, 1)
    text = out.getvalue()
    assert "\r\x1b[2K[ 1/1] cni" in text  # ours: the redraw of the current line
    assert "member \\x1b[2Jbridge" in text and text.count("\x1b") == 1


def test_the_error_handler_escapes_what_it_prints_and_restores_the_streams(tmp_path, capsys):
    """A file name on the disk is untrusted text too: a config named with an escape."""
    config = "/etc/\x1b[2Jnode.conf"
    before = sys.stdout, sys.stderr
    assert cli.main(["config", "validate", "--root", str(tmp_path), "--config", config]) == 2
    assert (sys.stdout, sys.stderr) == before
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2Jnode.conf" in err

    assert cli.main(["config", "validate", "--root", str(tmp_path), "--config", config, "--json"]) == 2
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\x1b[2Jnode.conf" in json.loads(shown)["message"]


def test_the_maintainer_scripts_stderr_is_escaped_too(tmp_path):
    """apt shows what the maintainer scripts print (a join's ARM error, a file name): the
    same edge. An unknown command word is echoed back in the usage error."""
    import os
    import subprocess

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": repo, "DPKG_ROOT": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "aks_flex_node.maintainer.maintscript", "\x1b[2Jbogus"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "\x1b" not in done.stderr + done.stdout and "\\x1b[2Jbogus" in done.stderr
