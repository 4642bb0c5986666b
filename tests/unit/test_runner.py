"""The runner: order, concurrency, filters, dry-run, failure handling."""

import hashlib
import os
import threading
import time

import pytest

from aks_flex_node.engine import runner as rn
from aks_flex_node.engine.context import Context, RunOptions
from aks_flex_node.engine.step import Plan, Step
from aks_flex_node.errors import FlexNodeError, UsageError
from aks_flex_node.host.download import Downloader
from tests.download_fixtures import ArtifactServer


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.events = []

    def add(self, *event):
        with self.lock:
            self.events.append(event)


# How long a step's change waits at its barrier for the others: a ceiling for a runner that
# never runs them at once (the barrier breaks, the change fails), never a measure.
TOGETHER_TIMEOUT = 120


def make_step(name, needs=(), changes=1, fail=False, sleep=0.0, gathers_facts=True, rec=None, together=None):
    """`together`: a threading.Barrier the change waits at, so that it ends only once the
    barrier's parties are all running at once (concurrency proven, not timed)."""
    class _S(Step):
        pass

    s = _S()
    s.name, s.needs, s.gathers_facts = name, tuple(needs), gathers_facts

    def check(ctx):
        rec.add("check", name, time.monotonic())
        if fail:
            raise FlexNodeError(f"{name} broke", remedy="fix it")
        plan = Plan(noop_reason="fine")
        for i in range(changes):
            def run(i=i):
                rec.add("apply-start", name, time.monotonic())
                time.sleep(sleep)
                if together is not None:
                    together.wait(TOGETHER_TIMEOUT)
                rec.add("apply-end", name, time.monotonic())
            plan.add(f"{name} change {i}", "because", run)
        return plan

    s.check = check
    return s


@pytest.fixture
def rec():
    return Recorder()


def ctx():
    return Context(config=None, host=None, ledger=None)


def names(rec, kind):
    return [e[1] for e in rec.events if e[0] == kind]


def test_needs_order_and_outcomes(rec):
    steps = [make_step("a", rec=rec), make_step("b", ["a"], rec=rec),
             make_step("c", ["b"], changes=0, rec=rec)]
    result = rn.Runner(steps, ctx()).run()
    assert result.ok
    assert names(rec, "apply-end") == ["a", "b"]
    assert [p.status for p in result.phases] == [rn.CHANGED, rn.CHANGED, rn.UNCHANGED]
    assert result.phases[2].message == "fine"


def test_independent_branches_overlap(rec):
    both = threading.Barrier(2)
    steps = [make_step("root", changes=0, rec=rec),
             make_step("x", ["root"], together=both, rec=rec),
             make_step("y", ["root"], together=both, rec=rec),
             make_step("join", ["x", "y"], rec=rec)]
    result = rn.Runner(steps, ctx()).run()
    assert result.ok
    spans = {e[1]: e[2] for e in rec.events if e[0] == "apply-start"}
    ends = {e[1]: e[2] for e in rec.events if e[0] == "apply-end"}
    assert spans["y"] < ends["x"] and spans["x"] < ends["y"], "x and y should overlap"
    assert spans["join"] >= max(ends["x"], ends["y"])


def test_a_ready_step_never_waits_for_a_worker(rec):
    """Issue 12: after the cluster read, eight steps are ready at once in the bootstrap
    workflow (arc, machine, system, four artifact installs, credentials). A pool smaller
    than that kept a download queued behind a slower step; every ready step now starts."""
    nine = threading.Barrier(9)
    fan = [make_step(f"s{i}", ["root"], together=nine, rec=rec) for i in range(9)]
    result = rn.Runner([make_step("root", changes=0, rec=rec)] + fan, ctx()).run()
    assert result.ok
    starts = [e[2] for e in rec.events if e[0] == "apply-start"]
    ends = [e[2] for e in rec.events if e[0] == "apply-end"]
    assert len(starts) == 9 and max(starts) < min(ends), "all nine should run at once"


def test_a_failed_download_fails_its_phase_only_and_leaves_nothing_behind(tmp_path):
    """Four install steps share one Downloader (as ctx.downloader()) against a loopback
    server; one artifact's body does not match its checksum. That phase fails naming the
    URL, the step after it is blocked, the three others install, and the cache holds
    exactly their three files (no partial download)."""
    server = ArtifactServer()
    cache = tmp_path / "cache"
    downloader = Downloader(cache, backoff=0.01, timeout=300)
    bodies = {name: os.urandom(40_000) for name in ("runc", "containerd", "kubernetes", "cni")}
    four = threading.Barrier(4)  # each answered only once all four are in flight
    urls = {name: server.serve(f"/{name}.tgz", body, together=four) for name, body in bodies.items()}

    def install_step(name):
        class Install(Step):
            pass

        step = Install()
        step.name, step.needs = name, ("cluster",)
        digest = hashlib.sha256(b"not the body" if name == "kubernetes" else bodies[name]).hexdigest()

        def check(ctx):
            plan = Plan()
            plan.add(f"install {name}", "not installed", lambda: downloader.fetch(urls[name], digest))
            return plan

        step.check = check
        return step

    rec = Recorder()
    after = make_step("kubelet", ["kubernetes"], rec=rec)
    steps = [make_step("cluster", changes=0, rec=rec)] + [install_step(n) for n in bodies] + [after]
    try:
        result = rn.Runner(steps, ctx()).run()
    finally:
        server.stop()
    status = {p.name: p for p in result.phases}
    assert status["kubernetes"].status == rn.FAILED
    assert urls["kubernetes"] in status["kubernetes"].message and "sha256 mismatch" in status["kubernetes"].message
    assert status["kubelet"].status == rn.BLOCKED
    assert {status[n].status for n in ("runc", "containerd", "cni")} == {rn.CHANGED}
    assert server.apart == [] and server.max_in_flight == 4  # the four went at once
    assert sorted(os.listdir(cache)) == sorted(
        f"{hashlib.sha256(bodies[n]).hexdigest()}-{n}.tgz" for n in ("runc", "containerd", "cni"))


def test_sequential_runs_declared_order_one_at_a_time(rec):
    steps = [make_step("root", changes=0, rec=rec),
             make_step("y", ["root"], sleep=0.05, rec=rec),
             make_step("x", ["root"], sleep=0.05, rec=rec)]
    result = rn.Runner(steps, ctx(), sequential=True).run()
    assert result.ok
    kinds = [(e[0], e[1]) for e in rec.events if e[0].startswith("apply")]
    assert kinds == [("apply-start", "y"), ("apply-end", "y"), ("apply-start", "x"), ("apply-end", "x")]


def test_failure_blocks_dependents_but_reports_the_error(rec):
    steps = [make_step("a", fail=True, rec=rec), make_step("b", ["a"], rec=rec),
             make_step("c", rec=rec)]
    result = rn.Runner(steps, ctx(), sequential=True).run()
    assert not result.ok
    statuses = {p.name: p.status for p in result.phases}
    assert statuses["a"] == rn.FAILED
    assert statuses["b"] == rn.BLOCKED
    assert "a failed" in result.phases[1].message
    assert isinstance(result.error, FlexNodeError) and result.error.message == "a broke"
    assert "b" not in names(rec, "check")


def test_dry_run_checks_but_applies_nothing(rec):
    steps = [make_step("a", rec=rec), make_step("b", ["a"], changes=2, rec=rec)]
    result = rn.Runner(steps, ctx(), dry_run=True).run()
    assert result.ok and result.changed
    assert names(rec, "apply-start") == []
    assert [p.status for p in result.phases] == [rn.PLANNED, rn.PLANNED]
    assert result.phases[1].changes == [{"what": "b change 0", "why": "because"},
                                        {"what": "b change 1", "why": "because"}]


def test_phase_filter_runs_needed_checks_for_facts_only(rec):
    steps = [make_step("gate", gathers_facts=False, rec=rec), make_step("a", ["gate"], rec=rec),
             make_step("b", ["a"], rec=rec)]
    result = rn.Runner(steps, ctx(), only=["b"]).run()
    statuses = {p.name: p.status for p in result.phases}
    assert statuses == {"gate": rn.SKIPPED, "a": rn.FACTS, "b": rn.CHANGED}
    assert names(rec, "apply-end") == ["b"]
    assert "gate" not in names(rec, "check"), "a skipped gate is not run"


def test_skip_phase(rec):
    steps = [make_step("a", rec=rec), make_step("b", rec=rec)]
    result = rn.Runner(steps, ctx(), skip=["a"]).run()
    assert {p.name: p.status for p in result.phases} == {"a": rn.SKIPPED, "b": rn.CHANGED}


def test_unknown_phase_names_are_a_usage_error(rec):
    steps = [make_step("a", rec=rec)]
    with pytest.raises(UsageError) as err:
        rn.Runner(steps, ctx(), only=["nope"])
    assert "nope" in err.value.message and "a" in err.value.message


def test_unexpected_exception_is_a_failed_phase(rec):
    s = make_step("a", rec=rec)
    s.check = lambda ctx: 1 / 0
    result = rn.Runner([s], ctx()).run()
    assert result.phases[0].status == rn.FAILED
    assert "ZeroDivisionError" in result.phases[0].message


def test_progress_events(rec):
    events = []
    steps = [make_step("a", rec=rec), make_step("b", ["a"], rec=rec)]
    rn.Runner(steps, ctx(), progress=lambda e, r, i, t: events.append((e, r.name, i, t))).run()
    assert events == [("start", "a", 1, 2), ("finish", "a", 1, 2),
                      ("start", "b", 2, 2), ("finish", "b", 2, 2)]


def test_an_obligation_is_written_down_before_its_action_runs(tmp_path):
    from aks_flex_node.engine.ledger import Ledger
    from aks_flex_node.engine.step import restart
    from aks_flex_node.host import Host

    host = Host(tmp_path)
    ledger = Ledger(host)
    seen = []

    class Writes(Step):
        name = "writes"

        def check(self, ctx):
            plan = Plan()
            plan.add("write the config", "it differs",
                     lambda: seen.append(Ledger(host).obligations()),
                     owes=(restart("kubelet", "config changed"),))
            return plan

    result = rn.Runner([Writes()], Context(None, host, ledger)).run()
    assert result.ok
    assert seen == [[restart("kubelet", "config changed")]], "on disk before the action ran"
    assert result.phases[0].changes[0]["owes"] == [
        {"kind": "restart", "unit": "kubelet", "reason": "config changed"}]


def test_a_dry_run_keeps_obligations_in_memory_only(tmp_path):
    from aks_flex_node.engine.ledger import Ledger
    from aks_flex_node.engine.step import restart
    from aks_flex_node.host import Host

    host = Host(tmp_path)

    class Writes(Step):
        name = "writes"

        def check(self, ctx):
            plan = Plan()
            plan.add("write", "differs", lambda: None, owes=(restart("containerd", "x"),))
            return plan

    ctx = Context(None, host, Ledger(host), options=RunOptions(dry_run=True))
    rn.Runner([Writes()], ctx, dry_run=True).run()
    assert ctx.obligations() == [restart("containerd", "x")]
    assert Ledger(host).obligations() == []
    assert not (tmp_path / "var/lib/aks-flex-node/ledger.json").exists()


def test_a_check_only_reads_what_it_finds_ours_the_runner_records(tmp_path):
    """A check that finds something of ours the ledger lost (Context.adopt) writes nothing
    itself: the runner records it after the check, and a dry run never does."""
    from aks_flex_node.engine.ledger import Ledger
    from aks_flex_node.host import Host

    host = Host(tmp_path)
    seen_during_check = []

    class Finds(Step):
        name = "finds"

        def check(self, ctx):
            ctx.adopt(self.name, "unit", "kubelet", note="enabled earlier")
            seen_during_check.append(Ledger(host).entries())
            return Plan(noop_reason="in place")

    # Called on its own (status, a facts read): nothing reaches the ledger.
    alone = Context(None, host, Ledger(host))
    Finds().check(alone)
    assert Ledger(host).entries() == []
    # A dry run: checked, recorded nowhere.
    dry = Context(None, host, Ledger(host), options=RunOptions(dry_run=True))
    assert rn.Runner([Finds()], dry, dry_run=True).run().ok
    assert Ledger(host).entries() == [] and dry.take_adopted("finds") == []
    # A run: the runner records it once the check is done.
    assert rn.Runner([Finds()], Context(None, host, Ledger(host))).run().ok
    assert seen_during_check == [[], [], []]
    [entry] = Ledger(host).entries()
    assert (entry["step"], entry["kind"], entry["id"], entry["note"]) == ("finds", "unit", "kubelet", "enabled earlier")


def test_a_step_that_does_not_apply_is_not_checked(rec):
    class CloudRead(Step):
        name = "cloud-read"
        full_pass_only = True

        def check(self, ctx):
            rec.add("check", self.name, 0)
            return Plan()

    local = Context(None, None, None, options=RunOptions(local_only=True))
    result = rn.Runner([CloudRead()], local).run()
    assert result.ok and result.phases[0].status == rn.UNCHANGED
    assert "local pass" in result.phases[0].message
    assert names(rec, "check") == []
    rn.Runner([CloudRead()], ctx()).run()
    assert names(rec, "check") == ["cloud-read"]


class Unseeable(Step):
    """A step that cannot observe one setting and fixes another that never stays fixed."""

    name = "system"

    def __init__(self):
        self.applied = 0

    def check(self, ctx):
        plan = Plan(noop_reason="fine")
        plan.add_unknown("kernel module br_netfilter", "/proc/modules is absent")
        plan.add("load kernel module overlay", "it is not loaded", self.apply)
        return plan

    def apply(self):
        self.applied += 1


def test_what_a_step_cannot_observe_is_on_its_phase_not_a_change():
    class OnlyUnknown(Step):
        name = "system"

        def check(self, ctx):
            plan = Plan(noop_reason="swap off")
            plan.add_unknown("kernel module br_netfilter", "/proc/modules is absent")
            return plan

    [phase] = rn.Runner([OnlyUnknown()], ctx()).run().phases
    assert phase.status == rn.UNCHANGED and phase.changes == []
    assert phase.unknown == [{"what": "kernel module br_netfilter", "reason": "/proc/modules is absent"}]
    assert phase.message == "swap off; cannot tell: kernel module br_netfilter (/proc/modules is absent)"
    assert phase.to_dict()["unknown"] == phase.unknown


def test_a_repair_needed_again_right_after_it_was_applied_fails():
    """Issue 9, defect 9: the agent repaired the same thing every pass in silence."""
    step = Unseeable()
    first = rn.Runner([step], ctx()).run()
    assert first.ok and step.applied == 1
    assert first.applied == {("system", "load kernel module overlay")}
    second = rn.Runner([step], ctx(), recent_repairs=first.applied).run()
    assert not second.ok and step.applied == 1, "not applied again"
    [phase] = second.phases
    assert phase.status == rn.FAILED and isinstance(phase.error, rn.RepairDidNotStick)
    assert phase.message == ("repair did not stick: load kernel module overlay (it is not loaded): "
                             "applied on the previous pass and needed again now")
    assert phase.error.remedy and phase.unknown  # what it could not see is still said
    assert second.applied == frozenset()
    # The pass after the failure tries once more.
    third = rn.Runner([step], ctx(), recent_repairs=second.applied).run()
    assert third.ok and step.applied == 2
