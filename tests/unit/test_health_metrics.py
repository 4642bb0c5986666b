"""health/metrics.py: the textfile's exact lines, label escaping, the durable record of
repairs, the atomic write into node-exporter's directory (never created by us), and
`promtool check metrics` on what it writes (Debian's promtool, `make deps`)."""

import datetime
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from aks_flex_node import __version__, health
from aks_flex_node.health import metrics
from aks_flex_node.health.credentials import CredentialKind, Found, Lifetime
from aks_flex_node.host import Host
from tests.config_fixtures import load, make_root, with_values

REPO = Path(__file__).resolve().parents[2]
PROMTOOL = REPO / "build/promtool/usr/bin/promtool"  # the Makefile's deps target puts it there
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
T = 1795000000
EXPIRY = datetime.datetime(2027, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def summary(state="succeeded", exit_code=0, operation="bootstrap", phases=None, kubelet=None):
    out = {"operation": operation, "state": state, "exit_code": exit_code, "finished": "2026-11-18T10:00:00Z",
           "phases": phases if phases is not None else [
               {"name": "preflight", "status": "unchanged", "duration_s": 0.25},
               {"name": "kubelet", "status": "changed", "duration_s": 1.5}]}
    if kubelet is not None:
        out["kubelet"] = kubelet
    return out


LIFETIMES = [
    Lifetime(CredentialKind.KUBELET_CLIENT_CERTIFICATE, "/var/lib/kubelet/pki/kubelet-client-current.pem",
             Found.ABSENT, renewable=False),
    Lifetime(CredentialKind.CLUSTER_CA, "/etc/kubernetes/certs/ca.crt", Found.KNOWN, EXPIRY, renewable=True),
    Lifetime(CredentialKind.BOOTSTRAP_TOKEN, "/var/lib/kubelet/bootstrap-kubeconfig", Found.UNKNOWN,
             renewable=True, why="not on the node"),
]


def samples(text):
    """The sample lines of exposition text (comments left out)."""
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_render_exact_lines():
    record = metrics.updated_record({"repairs": {}, "last_runs": {}, "converged": True}, summary(
        kubelet={"active": "1.31.2", "upgrade": {"from": "1.31.2", "to": "1.32.0", "phase": "drain"}}), T)
    text = metrics.render(metrics.families(summary(kubelet={"active": "1.31.2", "upgrade": {"phase": "drain"}}),
                                           record, True, LIFETIMES, T))
    assert samples(text) == [
        f'aks_flex_node_build_info{{version="{__version__}"}} 1',
        "aks_flex_node_joined 1",
        'aks_flex_node_last_run_state{operation="bootstrap",state="succeeded"} 1',
        f'aks_flex_node_last_run_timestamp_seconds{{operation="bootstrap"}} {T}',
        'aks_flex_node_last_run_success{operation="bootstrap"} 1',
        'aks_flex_node_phase_duration_seconds{operation="bootstrap",phase="preflight"} 0.25',
        'aks_flex_node_phase_duration_seconds{operation="bootstrap",phase="kubelet"} 1.5',
        'aks_flex_node_phase_outcome{operation="bootstrap",outcome="unchanged",phase="preflight"} 1',
        'aks_flex_node_phase_outcome{operation="bootstrap",outcome="changed",phase="kubelet"} 1',
        'aks_flex_node_repairs_total{kind="kubelet"} 1',
        'aks_flex_node_kubelet_version_info{version="1.31.2"} 1',
        "aks_flex_node_upgrade_in_progress 1",
        f'aks_flex_node_credential_expiry_timestamp_seconds{{credential="cluster-ca"}} {int(EXPIRY.timestamp())}',
        'aks_flex_node_credential_renewable{credential="cluster-ca"} 1',
        'aks_flex_node_credential_renewable{credential="bootstrap-token"} 1',
        f"aks_flex_node_last_converged_check_timestamp_seconds {T}",
    ]
    # Every family has its HELP and TYPE before its samples; counters end in _total.
    assert "# TYPE aks_flex_node_repairs_total counter\n" in text
    assert "# TYPE aks_flex_node_build_info gauge\n" in text
    assert text.endswith("\n")


def test_label_values_are_escaped():
    family = metrics.Family("aks_flex_node_x", "gauge", "help with \\ and\nnewline").add(1, v='a\\b"c\nd')
    assert metrics.render([family]) == (
        "# HELP aks_flex_node_x help with \\\\ and\\nnewline\n"
        "# TYPE aks_flex_node_x gauge\n"
        'aks_flex_node_x{v="a\\\\b\\"c\\nd"} 1\n')


def test_a_failed_run_and_a_failed_upgrade():
    failed = summary(state="failed", exit_code=1, phases=[{"name": "services", "status": "failed", "duration_s": 2}],
                     kubelet={"active": "1.31.2", "upgrade": {"phase": "failed"}})
    record = metrics.updated_record({"repairs": {}, "last_runs": {}, "converged": False}, failed, T)
    lines = samples(metrics.render(metrics.families(failed, record, None, None, T)))
    assert 'aks_flex_node_last_run_success{operation="bootstrap"} 0' in lines
    assert 'aks_flex_node_phase_outcome{operation="bootstrap",outcome="failed",phase="services"} 1' in lines
    assert "aks_flex_node_upgrade_in_progress 0" in lines
    assert not [line for line in lines if line.startswith(("aks_flex_node_joined", "aks_flex_node_repairs_total",
                                                            "aks_flex_node_credential_",
                                                            "aks_flex_node_last_converged_check"))]


def test_repairs_count_only_on_a_converged_node_and_outlive_the_run():
    record = {"repairs": {}, "last_runs": {}, "converged": False}
    record = metrics.updated_record(record, summary(), T)  # the join itself: no repair
    assert record["repairs"] == {} and record["converged"] is True
    record = metrics.updated_record(record, summary(), T + 60)  # drift put right
    record = metrics.updated_record(record, summary(phases=[
        {"name": "kubelet", "status": "changed"}, {"name": "kubelet-upgrade", "status": "changed"}]), T + 120)
    assert record["repairs"] == {"kubelet": 2}
    # A --phase run says nothing of the rest: the node stays as converged as it was.
    record = metrics.updated_record(record, summary(state="failed", exit_code=1, phases=[
        {"name": "kubelet", "status": "failed"}, {"name": "cni", "status": "skipped"}]), T + 180)
    assert record["converged"] is True
    unjoined = metrics.updated_record(record, summary(operation="unbootstrap", state="unjoined"), T + 240)
    assert unjoined["converged"] is False and unjoined["repairs"] == {"kubelet": 2}
    assert unjoined["last_runs"] == {"bootstrap": {"timestamp": T + 180, "success": False},
                                     "unbootstrap": {"timestamp": T + 240, "success": True}}


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def test_written_atomically_into_an_existing_directory_only(root):
    host, cfg = Host(root), load(root, with_values())
    health.after_run(host, cfg, summary())
    assert not (root / TEXTFILE_DIR.lstrip("/")).exists()  # never created by us
    directory = root / TEXTFILE_DIR.lstrip("/")
    directory.mkdir(parents=True)
    health.after_run(host, cfg, summary())
    prom = directory / "aks_flex_node.prom"
    first = prom.stat()
    assert oct(first.st_mode & 0o777) == oct(0o644)
    with open(prom, "rb") as before:  # a reader holding the old file while the next run writes
        health.after_run(host, cfg, summary(state="failed", exit_code=1))
        old = before.read()
    # Renamed over, never rewritten in place: the reader's file is whole and unchanged, and
    # the new file is another inode; no temp file is left in the collector's directory.
    assert b'aks_flex_node_last_run_success{operation="bootstrap"} 1\n' in old
    assert prom.stat().st_ino != first.st_ino
    assert b'aks_flex_node_last_run_success{operation="bootstrap"} 0\n' in prom.read_bytes()
    assert os.listdir(directory) == ["aks_flex_node.prom"]
    # The repairs' record (the second run changed kubelet on a node the first left converged).
    record = json.loads((root / "var/lib/aks-flex-node/metrics.json").read_text())
    assert record["repairs"] == {"kubelet": 2}


def test_metrics_textfile_dir_names_another_directory(root):
    debian = root / TEXTFILE_DIR.lstrip("/")
    debian.mkdir(parents=True)
    other = root / "srv/textfiles"
    other.mkdir(parents=True)
    health.after_run(Host(root), load(root, with_values(metrics_textfile_dir="/srv/textfiles")), summary())
    assert os.listdir(other) == ["aks_flex_node.prom"] and os.listdir(debian) == []


def test_a_dry_run_reports_nothing(root):
    directory = root / TEXTFILE_DIR.lstrip("/")
    directory.mkdir(parents=True)
    health.after_run(Host(root), load(root, with_values()), dict(summary(), dry_run=True))
    assert os.listdir(directory) == []
    assert not (root / "var/lib/aks-flex-node/metrics.json").exists()


def test_a_failure_to_write_is_a_warning_not_a_failed_run(root, caplog):
    """A directory where the file should be: the write fails, after_run logs it and returns."""
    directory = root / TEXTFILE_DIR.lstrip("/")
    (directory / "aks_flex_node.prom").mkdir(parents=True)
    health.after_run(Host(root), load(root, with_values()), summary())
    assert [r.levelname for r in caplog.records if "metrics textfile" in r.getMessage()] == ["WARNING"]


def test_an_unreadable_record_starts_the_counters_again(root, caplog):
    state = root / "var/lib/aks-flex-node"
    state.mkdir(parents=True)
    (state / "metrics.json").write_text('{"repairs": {"kubelet": -3}}')
    assert metrics.read_record(Host(root)) == {"repairs": {}, "last_runs": {}, "converged": False}


def promtool():
    found = str(PROMTOOL) if PROMTOOL.exists() else shutil.which("promtool")
    if not found:
        pytest.skip("no promtool: `make deps` takes it from Debian's prometheus package into build/promtool")
    return found


def test_promtool_accepts_the_textfile():
    failed = summary(state="failed", exit_code=1, kubelet={"active": "1.31.2"})
    record = metrics.updated_record({"repairs": {"kubelet": 3}, "last_runs": {}, "converged": True}, failed, T)
    text = metrics.render(metrics.families(failed, record, True, LIFETIMES, T))
    check = subprocess.run([promtool(), "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    assert check.stdout.decode() + check.stderr.decode() == ""  # no lint finding either
