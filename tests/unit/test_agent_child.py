"""Issue 12: each agent pass runs in a forked child that reports over a pipe; a child that
dies without reporting is a failed pass that says how it died (agent.run_in_child)."""

import os
import signal

from aks_flex_node import agent
from aks_flex_node.agent import PassKind, PassOutcome, PhaseSeen


def test_the_child_s_outcome_comes_back_and_its_work_stays_in_the_child():
    outcome = agent.run_in_child(lambda: PassOutcome(PassKind.OK, message=str(os.getpid())))
    assert outcome.kind is PassKind.OK
    assert outcome.message != str(os.getpid())


def test_the_outcome_crosses_the_pipe_whole():
    sent = PassOutcome(PassKind.FAILED, "kubelet: failed", 75, applied=(("services", "restart kubelet"),),
                       phases=(PhaseSeen("system", False, True, (("swap", "no /proc/swaps"),)),
                               PhaseSeen("kubelet", True, True)),
                       joining=True, cluster="c1", machine="m1")
    assert agent.run_in_child(lambda: sent) == sent


def test_a_child_killed_mid_pass_is_a_failed_pass_naming_the_signal():
    outcome = agent.run_in_child(lambda: os.kill(os.getpid(), signal.SIGKILL))
    assert outcome.kind is PassKind.FAILED
    assert outcome.exit_code == 1
    assert "signal 9 (SIGKILL)" in outcome.message


def test_a_crashing_child_is_a_failed_pass():
    def crash():
        raise RuntimeError("a bug")

    outcome = agent.run_in_child(crash)
    assert outcome.kind is PassKind.FAILED
    assert "status 70" in outcome.message


def test_the_child_finishes_its_pass_when_told_to_stop():
    # systemd signals the unit's whole cgroup: the child gets SIGTERM itself, and finishes
    # its pass as a pass in the agent's own process did.
    def pass_that_is_signalled():
        os.kill(os.getpid(), signal.SIGTERM)
        return PassOutcome(PassKind.OK)

    assert agent.run_in_child(pass_that_is_signalled) == PassOutcome(PassKind.OK)
