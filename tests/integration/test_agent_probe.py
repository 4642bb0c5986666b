"""The agent's drift probe (agent.py, host/observed.py; issue 30): on a converged node the
intervals after a local pass are probes, which fork no pass and say so in status.json; drift
injected between two intervals (a managed file's content or mode, a unit stopped) is seen by
the next probe and repaired by the pass it forks, as before the probe."""

import calendar
import os
import signal
import subprocess
import time

import pytest

from tests.agent_fixtures import start_agent, status
from tests.waiting import wait_for

CONFIG_TOML = "/etc/containerd/config.toml"
TEXTFILE = "/var/lib/prometheus/node-exporter/aks_flex_node.prom"  # health/metrics.py, Debian's directory
CONVERGED = "aks_flex_node_last_converged_check_timestamp_seconds"


def stop(agent):
    agent.send_signal(signal.SIGTERM)
    _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    return err


def probes(node):
    return status(node).get("probes") or 0


def converged_agent(node):
    """The agent on a joined node, once its probe stands in for local passes."""
    node.cli("bootstrap", check=True)
    agent = start_agent(node, "--interval", "0.5")
    assert wait_for(lambda: probes(node) >= 1, 120), status(node)
    return agent


def _metric(node, name):
    for line in node.read(TEXTFILE).decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return line
    return None


def _unix(iso):
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))


def test_the_passes_after_a_converged_local_pass_are_probes(node):
    os.makedirs(node.path(os.path.dirname(TEXTFILE)))  # node-exporter's textfile directory
    agent = converged_agent(node)
    try:
        first = status(node)
        calls = len(node.fake.calls())
        assert wait_for(lambda: probes(node) >= first["probes"] + 3, 60), status(node)
        now = status(node)
        shown = node.cli_json("status")[1]
        # The metrics say when too: the probe's time on the pass's textfile, the rest the pass's.
        last_run = _metric(node, "aks_flex_node_last_run_timestamp_seconds")
        assert wait_for(lambda: _metric(node, CONVERGED) == f"{CONVERGED} {_unix(status(node)['checked'])}", 30), \
            (_metric(node, CONVERGED), status(node))
        assert wait_for(lambda: int(_metric(node, CONVERGED).split()[-1]) > int(last_run.split()[-1]), 30)
        assert _metric(node, "aks_flex_node_last_run_timestamp_seconds") == last_run
    finally:
        stop(agent)
    # No pass ran in between: the record is the last pass's, with when it was checked since.
    assert (now["started"], now["pass"], now["state"]) == (first["started"], "local", "succeeded")
    assert now["checked"] >= first["checked"]
    assert shown["checked"] >= now["checked"]  # `aks-flex-node status` says when too
    # The probe asked the host commands only what the pass had asked, and changed nothing.
    verbs = {tuple(argv[:2]) for argv in node.fake.calls()[calls:]}
    assert verbs <= {("systemctl", "show"), ("azcmagent", "show")}, verbs


def _edit_content(node):
    with open(node.path(CONFIG_TOML), "ab") as f:
        f.write(b"# an operator's edit\n")


def _change_mode(node):
    os.chmod(node.path(CONFIG_TOML), 0o600)


def _stop_kubelet(node):
    subprocess.run(["systemctl", "stop", "kubelet"], env=node.env, check=True)


def _kubelet_active(node):
    return subprocess.run(["systemctl", "is-active", "kubelet"], env=node.env,
                          capture_output=True).returncode == 0


@pytest.mark.parametrize("drift", [_edit_content, _change_mode, _stop_kubelet], ids=["content", "mode", "unit"])
def test_drift_between_intervals_is_repaired_by_the_pass_the_probe_forks(node, drift):
    agent = converged_agent(node)
    try:
        content, mode = node.read(CONFIG_TOML), node.mode(CONFIG_TOML)
        before = status(node)["started"]
        drift(node)
        assert wait_for(lambda: node.read(CONFIG_TOML) == content and node.mode(CONFIG_TOML) == mode
                        and _kubelet_active(node), 60), status(node)
        assert status(node)["started"] != before
        # Repaired, seen to stick by the next pass, and probed again after it.
        assert wait_for(lambda: probes(node) >= 1 and status(node)["started"] != before, 60), status(node)
    finally:
        stop(agent)


def every_interval_is_a_pass(node, *flags):
    """The agent on `node` (with `flags`) ends four intervals with a pass of its own, and
    no probe stands in for one."""
    node.cli("bootstrap", check=True)
    agent = start_agent(node, "--interval", "0.5", *flags)
    try:
        starts = set()
        assert wait_for(lambda: starts.add(status(node).get("started")) or len(starts - {None}) >= 4, 120)
        assert "probes" not in status(node)
    finally:
        stop(agent)


def test_no_probe_stands_in_for_an_agent_pool_pass(pool_node):
    """In agent-pool mode each pass reads its Node for the pool's signal (pool_follow.py),
    which the probe cannot see: every interval is a real pass."""
    every_interval_is_a_pass(pool_node)


def test_no_probe_when_its_age_limit_is_zero(node):
    every_interval_is_a_pass(node, "--probe-max-age", "0")
