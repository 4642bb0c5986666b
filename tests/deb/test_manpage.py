"""aks-flex-node(8) and the bash completion, both generated from the CLI's argparse parser."""

import subprocess
import sys

import pytest

from aks_flex_node.commands import arguments as cli
from aks_flex_node.errors import ExitCode
from tests.deb import debtools
from tests.deb.conftest import require_tools

sys.path.insert(0, str(debtools.REPO / "tools"))
import mkcompletion  # noqa: E402
import mkman  # noqa: E402

BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"


@pytest.fixture(scope="module")
def page():
    return mkman.render()


def test_the_page_documents_every_command_and_option(page):
    parser = cli.build_parser()
    for path, sub, _help in mkman.walk(parser):
        assert f'.SS "{mkman.roff(" ".join(path))}' in page, path
        for action in mkman.options(sub):
            for name in action.option_strings:
                assert mkman.roff(name) in page, (path, name)
    for code in ExitCode:
        assert f"\\fB{int(code)}\\fR" in page
    assert mkman.roff("/etc/aks-flex-node/aks-flex-node.conf") in page


def test_the_page_is_reproducible(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    first = mkman.render()
    assert '"2023-11-14"' in first.splitlines()[1]
    assert mkman.render() == first


def test_man_formats_the_page_without_a_warning(page, tmp_path):
    require_tools("man")
    path = tmp_path / "aks-flex-node.8"
    path.write_text(page)
    result = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", str(path)],
                            capture_output=True, text=True, timeout=60,
                            env=debtools.system_env(MANWIDTH="80"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    text = subprocess.run(["man", "-l", str(path)], capture_output=True, text=True, timeout=60,
                          env=debtools.system_env(MANWIDTH="80", MANPAGER="cat")).stdout
    assert "--ignore-preflight-errors" in text.replace("\u2010", "-")


def complete(script, line, tmp_path):
    """The words bash completion offers for `line` (completing its last word)."""
    path = tmp_path / "aks-flex-node"
    path.write_text(script)
    words = line.split(" ")
    program = f"""
source {BASH_COMPLETION}
source {path}
COMP_WORDS=({" ".join(repr(w) for w in words)})
COMP_CWORD={len(words) - 1}
COMP_LINE={line!r}
COMP_POINT=${{#COMP_LINE}}
_aks_flex_node aks-flex-node "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    result = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30,
                            cwd=str(tmp_path), env=debtools.system_env())
    assert result.returncode == 0, result.stderr
    return sorted(filter(None, result.stdout.splitlines()))


@pytest.fixture(scope="module")
def completion():
    return mkcompletion.render()


def test_the_completion_is_valid_bash(completion, tmp_path):
    path = tmp_path / "aks-flex-node"
    path.write_text(completion)
    subprocess.run(["bash", "-n", str(path)], check=True)


@pytest.mark.parametrize("line, expected", [
    ("aks-flex-node boot", ["bootstrap"]),
    ("aks-flex-node config ", ["--config", "--help", "--json", "--root", "--verbose", "-h", "-v",
                               "import", "show", "validate"]),
    ("aks-flex-node bootstrap --dry", ["--dry-run"]),
    ("aks-flex-node --json unbootstrap --keep", ["--keep-cloud-resources"]),
    ("aks-flex-node bootstrap --phase kube", ["kubelet", "kubelet-upgrade", "kubernetes"]),
    ("aks-flex-node bootstrap --skip-phase cni --phase no", ["node-ready"]),
])
def test_the_completion_offers_what_the_cli_accepts(completion, tmp_path, line, expected):
    require_tools("bash")
    if not __import__("os").path.exists(BASH_COMPLETION):
        pytest.skip("bash-completion is not installed (make test-deb installs it)")
    assert complete(completion, line, tmp_path) == expected


def test_the_completion_completes_files_after_config(completion, tmp_path):
    if not __import__("os").path.exists(BASH_COMPLETION):
        pytest.skip("bash-completion is not installed (make test-deb installs it)")
    (tmp_path / "node.conf").write_text("")
    assert "node.conf" in complete(completion, "aks-flex-node status --config no", tmp_path)
