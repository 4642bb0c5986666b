"""The run's shared cloud read (steps/cloud_reads.py) and the runner's prefetch: a read
started twice runs once, its answer or its error reaches whoever asks, a read that needs a
failed one fails with that error, and the runner asks each step that applies to prefetch
(not a --sequential run's, not one that does not apply), a prefetch that raises failing
nothing. Real threads and gates, no timing."""

import threading

import pytest

from aks_flex_node.engine import runner as rn
from aks_flex_node.engine.context import Context, RunOptions
from aks_flex_node.engine.step import Plan, Step
from aks_flex_node.errors import AuthError
from aks_flex_node.steps import cloud_reads
from aks_flex_node.steps.cloud_reads import CloudReads

WAIT = 60  # a ceiling for a gate that never opens, never a measure


def test_a_read_started_twice_runs_once_and_answers_both():
    reads, calls, gate = CloudReads(), [], threading.Event()

    def read():
        calls.append(1)
        assert gate.wait(WAIT)
        return "the answer"

    first = reads.start("x", read)
    again = reads.start("x", read)
    gate.set()
    assert first is again
    assert reads.answer("x", lambda: "read now") == "the answer"
    assert calls == [1]


def test_a_reads_error_is_raised_in_whoever_asks_and_in_the_reads_after_it():
    reads = CloudReads()
    refused = AuthError("the operator may not read it", code="forbidden")

    def fail():
        raise refused

    reads.start("token", fail)
    reads.start("cluster", lambda token: "never", after=("token",))
    with pytest.raises(AuthError) as asked:
        reads.answer("token", lambda: "read now")
    assert asked.value is refused
    with pytest.raises(AuthError) as after:
        reads.answer("cluster", lambda: "read now")
    assert after.value is refused


def test_a_read_not_started_is_read_by_whoever_asks():
    assert CloudReads().answer("x", lambda: "read now") == "read now"


def test_nothing_is_started_in_a_local_pass():
    class LocalPass:
        local_only = True
        reads = CloudReads()

    ctx = LocalPass()
    cloud_reads.start_node(ctx, lambda: "the Node")
    assert not ctx.reads.started(cloud_reads.NODE)
    assert cloud_reads.node(ctx) is None


class Prefetching(Step):
    """A step that notes its prefetch; `raises`: its prefetch raises instead."""

    def __init__(self, name, seen, applies=True, raises=False):
        self.name, self.seen, self.applies, self.raises = name, seen, applies, raises

    def run_if(self, ctx):
        return None if self.applies else "does not apply here"

    def prefetch(self, ctx):
        self.seen.append(self.name)
        if self.raises:
            raise RuntimeError("a prefetch that breaks")

    def check(self, ctx):
        return Plan(noop_reason="fine")


def _run(steps, **kw):
    return rn.Runner(steps, Context(config=None, host=None, ledger=None, options=RunOptions()), **kw).run()


def test_the_runner_asks_each_step_that_applies_to_prefetch_before_the_first_check():
    seen = []
    result = _run([Prefetching("a", seen), Prefetching("b", seen, applies=False), Prefetching("c", seen, raises=True)])
    assert seen == ["a", "c"]
    assert result.ok, [p.to_dict() for p in result.phases]


def test_a_sequential_run_prefetches_nothing():
    seen = []
    assert _run([Prefetching("a", seen)], sequential=True).ok
    assert seen == []


def test_the_runner_counts_what_it_applies_and_a_dry_run_applies_nothing():
    """Context.applied: a check trusts an answer read at the start of the run only while it
    is 0 (steps/node.py node_seen)."""

    class Changes(Step):
        name = "changes"

        def check(self, ctx):
            plan = Plan()
            plan.add("change it", "it differs", lambda: None)
            return plan

    for dry_run, applied in ((False, 1), (True, 0)):
        ctx = Context(config=None, host=None, ledger=None, options=RunOptions(dry_run=dry_run))
        assert rn.Runner([Changes()], ctx, dry_run=dry_run).run().ok
        assert ctx.applied == applied
