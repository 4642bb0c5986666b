"""The metrics textfile through the real CLI against the emulator: a bootstrap leaves
node-exporter's file with the build, the join, each phase's duration and the kubelet's
version; a failing phase shows in the next file, and drift put right counts as a repair."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from aks_flex_node import __version__

TEXTFILE = "/var/lib/prometheus/node-exporter/aks_flex_node.prom"
PROMTOOL = Path(__file__).resolve().parents[2] / "build/promtool/usr/bin/promtool"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
SAMPLE = re.compile(r"^([a-z_]+)(\{.*\})? (\S+)$")


def series(text):
    """{'name{labels}': value} of exposition text."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        name, labels, value = SAMPLE.match(line).groups()
        out[name + (labels or "")] = float(value)
    return out


def check_with_promtool(path):
    found = str(PROMTOOL) if PROMTOOL.exists() else shutil.which("promtool")
    if found:  # the unit tests say so when it cannot be had (test_health_metrics.py)
        with open(path, "rb") as textfile:
            check = subprocess.run([found, "check", "metrics"], stdin=textfile, capture_output=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr


def test_bootstrap_then_a_failed_pass_then_a_repair(node):
    os.makedirs(node.path("/var/lib/prometheus/node-exporter"))
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert node.mode(TEXTFILE) == 0o644
    check_with_promtool(node.path(TEXTFILE))
    got = series(node.read(TEXTFILE).decode())
    assert got[f'aks_flex_node_build_info{{version="{__version__}"}}'] == 1
    assert got["aks_flex_node_joined"] == 1
    assert got['aks_flex_node_last_run_success{operation="bootstrap"}'] == 1
    assert got[f'aks_flex_node_kubelet_version_info{{version="{summary["kubelet"]["active"]}"}}'] == 1
    assert got["aks_flex_node_upgrade_in_progress"] == 0
    for phase in summary["phases"]:
        assert got[f'aks_flex_node_phase_duration_seconds{{operation="bootstrap",phase="{phase["name"]}"}}'] == \
            phase["duration_s"]
    # Arc mode: the kubelet trusts the cluster CA a full pass writes; it has no client certificate.
    assert 'aks_flex_node_credential_expiry_timestamp_seconds{credential="cluster-ca"}' in got
    assert not [key for key in got if "kubelet-client-certificate" in key]
    assert not [key for key in got if key.startswith("aks_flex_node_repairs_total")]

    # Drift, and the restart it owes fails: the run fails in services.
    config = node.path(KUBELET_CONFIG)
    with open(config, "a") as handle:
        handle.write("# drift\n")
    node.fake.fail("systemctl", "Job for kubelet.service failed", verb="restart")
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode != 0
    got = series(node.read(TEXTFILE).decode())
    assert got['aks_flex_node_last_run_success{operation="bootstrap"}'] == 0
    assert got['aks_flex_node_phase_outcome{operation="bootstrap",outcome="failed",phase="services"}'] == 1
    # The kubelet phase put the drift right on a converged node: one repair.
    assert got['aks_flex_node_repairs_total{kind="kubelet"}'] == 1
    check_with_promtool(node.path(TEXTFILE))

    os.remove(os.path.join(node.state_dir, "fail-systemctl-restart"))
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    got = series(node.read(TEXTFILE).decode())
    assert got['aks_flex_node_last_run_success{operation="bootstrap"}'] == 1
    assert got['aks_flex_node_repairs_total{kind="kubelet"}'] == 1  # counted once: this run did not converge before

    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stderr
    got = series(node.read(TEXTFILE).decode())
    assert got["aks_flex_node_joined"] == 0
    assert got['aks_flex_node_last_run_success{operation="unbootstrap"}'] == 1
    assert got['aks_flex_node_last_run_success{operation="bootstrap"}'] == 1
    assert got['aks_flex_node_repairs_total{kind="kubelet"}'] == 1  # the last textfile still counts it
    assert not os.path.exists(node.path("/var/lib/aks-flex-node/metrics.json")), \
        "a node that left keeps no run state of ours"


def test_no_node_exporter_directory_no_file(node):
    proc, _ = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert not os.path.exists(node.path("/var/lib/prometheus"))
