"""The kubelet's drop-in as systemd reads it back (issue 26, defect 8): every value is
written through steps/kubelet.exec_word, so a '%' (a specifier), '$' (a variable), a blank
or a quote reaches the kubelet as it was, and a control character is refused before
anything is written. `systemd-analyze verify` judges the rendered unit where it exists."""

import shutil
import subprocess

import pytest

from aks_flex_node.errors import FlexNodeError
from aks_flex_node.steps import kubelet, kubelet_auth
from tests.config_fixtures import load, make_root, with_values

SYSPATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.mark.parametrize("arg, word", [
    ("--node-ip=10.0.0.5", "--node-ip=10.0.0.5"),
    ("--node-ip=fe80::1%eth0", "--node-ip=fe80::1%%eth0"),
    ("--x=$HOME", "--x=$$HOME"),
    ("--x=a b", '"--x=a b"'),
    ('--x="q"', '"--x=\\"q\\""'),
    ("--x=a\\b", '"--x=a\\\\b"'),
    (";", '";"'),
    ("", '""'),
])
def test_each_argument_is_written_as_systemd_reads_it_back(arg, word):
    assert kubelet.exec_word(arg) == word


@pytest.mark.parametrize("arg", ["--node-labels=a=b\n[Service]", "--x=\x1b[2J", "--x=a\tb"])
def test_a_control_character_is_refused(arg):
    with pytest.raises(FlexNodeError) as caught:
        kubelet.exec_word(arg)
    assert caught.value.code == "unit-value" and "\n" not in caught.value.message.split(": ", 1)[0]


def _verify(tmp_path, dropin_text):
    """systemd-analyze verify of a kubelet unit with this drop-in (the binary: /bin/true,
    which exists everywhere): (exit status, what it said)."""
    unit_dir = tmp_path / "units"
    (unit_dir / "kubelet.service.d").mkdir(parents=True)
    unit = unit_dir / "kubelet.service"
    unit.write_text("[Unit]\nDescription=kubelet\n[Service]\nExecStart=/bin/true\n")
    (unit_dir / "kubelet.service.d" / "10-aks-flex-node.conf").write_text(
        dropin_text.replace(kubelet.KUBELET_BIN, "/bin/true"))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                          env={"PATH": SYSPATH}, timeout=120)
    return done.returncode, done.stdout + done.stderr


needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze", path=SYSPATH) is None,
                                           reason="systemd-analyze is not installed")


@needs_systemd_analyze
@pytest.mark.parametrize("node_ip", ["", "10.0.0.5", "2001:db8::5"])
def test_the_rendered_dropin_passes_systemd_analyze_verify(tmp_path, node_ip):
    root = make_root(tmp_path)
    cfg = load(root, with_values(node_ip=node_ip, node_taints="dedicated=edge:NoSchedule"))
    text = kubelet.dropin(cfg, kubelet_auth.EXEC_PLUGIN).decode()
    status, said = _verify(tmp_path, text)
    assert status == 0, said
    assert (f"--node-ip={node_ip}" in text) == bool(node_ip)


@needs_systemd_analyze
def test_a_percent_written_raw_is_what_systemd_refuses(tmp_path):
    """The defect, shown on systemd itself: the raw '%' of a zone index fails specifier
    expansion; the escaped one passes."""
    raw = "[Service]\nExecStart=\nExecStart=/bin/true --node-ip=fe80::1%eth0\n"
    assert _verify(tmp_path / "raw", raw)[0] != 0
    escaped = f"[Service]\nExecStart=\nExecStart=/bin/true {kubelet.exec_word('--node-ip=fe80::1%eth0')}\n"
    assert _verify(tmp_path / "escaped", escaped)[0] == 0
