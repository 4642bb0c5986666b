"""The agent's drift probe as its loop uses it (agent.Probe, PassOutcome.probeable): which
passes it may stand on, that it stands in no longer than its age limit, that its own
record is not drift and anything else is. A real root under tmp_path, a real forked pass."""

import os

import pytest

from aks_flex_node import agent
from aks_flex_node.agent import PassKind, PassOutcome, PhaseSeen
from aks_flex_node.engine.lock import RunLock
from aks_flex_node.engine.status import StatusFile
from aks_flex_node.health import metrics
from aks_flex_node.host import Host

WATCHED = "/etc/x/managed.conf"


@pytest.fixture
def host(tmp_path):
    host = Host(str(tmp_path))
    host.ensure_dir("/var/lib/aks-flex-node", 0o700)
    host.write_file(WATCHED, b"wanted\n", 0o644)
    StatusFile(host).write({"state": "succeeded", "operation": "bootstrap", "started": "2026-11-28T00:00:00Z"})
    return host


def converged_pass(host, **kw):
    """A pass (in a forked child, recorded) that reads the watched file and changes nothing."""
    def work():
        host.read_bytes(WATCHED)
        return PassOutcome(PassKind.OK, phases=(PhaseSeen("system", False, True),), **kw)
    return agent.run_in_child(work, record=host.root)


def test_the_observations_come_back_over_the_pipe(host):
    outcome = converged_pass(host)
    assert outcome.observed["unprobeable"] is None
    assert str(host.path(WATCHED)) in outcome.observed["files"]
    assert outcome.probeable() is outcome.observed


@pytest.mark.parametrize("kw", [
    {"applied": (("system", "write /etc/x/managed.conf"),)},  # a repair: the next pass sees it stick
    {"joining": True},
], ids=["repaired", "joining"])
def test_no_probe_stands_on_a_pass_that_changed_something_or_joined(host, kw):
    assert converged_pass(host, **kw).probeable() is None


def test_no_probe_stands_on_a_failed_or_unrecorded_pass(host):
    assert agent.run_in_child(lambda: PassOutcome(PassKind.FAILED, "x"), record=host.root).probeable() is None
    assert agent.run_in_child(lambda: PassOutcome(PassKind.OK, phases=())).probeable() is None
    changed = PassOutcome(PassKind.OK, phases=(PhaseSeen("system", True, True),), observed={"unprobeable": None})
    assert changed.probeable() is None


def test_the_probe_stands_in_until_its_age_limit(host):
    probe = agent.Probe(host, 300)
    probe.after(converged_pass(host), 1000)
    assert probe.same(1060) and probe.same(1120)  # its own write of status.json is not drift
    assert StatusFile(host).read()["probes"] == 2 and StatusFile(host).read()["checked"]
    assert not probe.same(1300)  # a real local pass is due


def test_drift_ends_the_probe_until_the_next_converged_pass(host):
    probe = agent.Probe(host, 300)
    probe.after(converged_pass(host), 1000)
    os.chmod(host.path(WATCHED), 0o600)
    assert not probe.same(1060)
    assert not probe.same(1120)  # nothing to stand on until a pass records again
    assert "probes" not in StatusFile(host).read()


def test_a_run_that_rewrote_status_is_drift(host):
    probe = agent.Probe(host, 300)
    probe.after(converged_pass(host), 1000)
    StatusFile(host).write({"state": "failed", "operation": "bootstrap"})  # an operator's run
    assert not probe.same(1060)
    assert StatusFile(host).read()["state"] == "failed"


def test_no_probe_while_a_run_holds_the_lock(host):
    probe = agent.Probe(host, 300)
    probe.after(converged_pass(host), 1000)
    before = StatusFile(host).read()
    with RunLock(host, "bootstrap"):  # an operator's bootstrap, under way
        assert not probe.same(1060)
        assert StatusFile(host).read() == before


def test_the_probe_rewrites_the_metric_the_pass_writes():
    """The parent holds no health/ module: its copy of the line's name is the metrics' own."""
    assert agent.CONVERGED_CHECK == metrics.CONVERGED_CHECK.encode() + b" "
