"""What a step is.

A step reads the host and the cloud in `check` (read-only: it may be run on its own to
gather facts, and for --dry-run), and returns a Plan: the actions that would bring the
node to the wanted state, each with its reason, or none and the reason nothing is needed.
The runner calls `check` right before it applies, so the plan is never stale.

An action may owe something to a later phase: a changed kubelet configuration owes a
kubelet restart. It says so in `owes`, and the runner writes that obligation to the ledger
before the action runs (engine/ledger.py), so neither --phase, a crash nor kill -9 can lose
it; the services phase pays it and clears it. A change nothing reads (a mode, an owner)
owes nothing.

`run_if` says whether a step applies to this run at all (kubeadm's workflow RunIf): a step
that only reads Azure does not apply to the agent's local passes, and a step of one join
mode (`modes`) does not apply in the others. The mode is the run's, resolved once from the
configuration (engine/context.py); no step asks which mode it is in. A phase whose work
differs by mode is one step class per mode under one name (steps/workflow.py picks the
run's).

What a step cannot observe on this host (a container without /proc/modules) it neither
changes nor reports changed: `plan.add_unknown(what, reason)` says so, and the phase shows it
(the agent logs it once, not every pass).

`plan_undo` is the step's side of unbootstrap: a Plan that removes what the ledger says
the step created (engine/undo.py walks the phases in reverse order).
"""

import dataclasses
from typing import Callable, List, Optional, Tuple

IDENTITY = "identity"
INSTALL = "install"
CREDENTIALS = "credentials"
ACTIVATE = "activate"

# Obligation kinds: reload systemd's view of the unit files, restart a unit.
RELOAD = "daemon-reload"
RESTART = "restart"
LOCAL_PASS = "not asked in a local pass: the last full run's answer holds"


@dataclasses.dataclass(frozen=True)
class Obligation:
    """Something a change owes to a later phase: `kind` of `unit`, because `reason`."""

    kind: str
    unit: str
    reason: str

    def to_dict(self):
        return {"kind": self.kind, "unit": self.unit, "reason": self.reason}


def restart(unit, reason):
    return Obligation(RESTART, unit, reason)


def reload_units(reason):
    return Obligation(RELOAD, "systemd", reason)


@dataclasses.dataclass
class Action:
    what: str  # what changes, in the operator's words
    why: str  # why it must change
    run: Optional[Callable[[], object]] = dataclasses.field(default=None, repr=False, compare=False)
    owes: Tuple[Obligation, ...] = ()

    def to_dict(self):
        out = {"what": self.what, "why": self.why}
        if self.owes:
            out["owes"] = [o.to_dict() for o in self.owes]
        return out


@dataclasses.dataclass(frozen=True)
class Unobserved:
    """A setting the step could not see on this host, so it left it alone: `what`, `reason`."""

    what: str
    reason: str

    def to_dict(self):
        return {"what": self.what, "reason": self.reason}

    def __str__(self):
        return f"{self.what} ({self.reason})"


@dataclasses.dataclass
class Plan:
    actions: List[Action] = dataclasses.field(default_factory=list)
    noop_reason: Optional[str] = None
    unknown: List[Unobserved] = dataclasses.field(default_factory=list)

    @property
    def changes(self):
        return bool(self.actions)

    def add(self, what, why, run=None, owes=()):
        self.actions.append(Action(what, why, run, tuple(owes)))

    def add_unknown(self, what, reason):
        self.unknown.append(Unobserved(what, reason))

    def to_dict(self):
        out = {"actions": [a.to_dict() for a in self.actions], "noop_reason": self.noop_reason}
        if self.unknown:
            out["unknown"] = [u.to_dict() for u in self.unknown]
        return out


class Step:
    """Base of every step; subclasses set the class attributes and override check/plan_undo."""

    name = ""
    help = ""
    branch = INSTALL
    # Every step this one waits for, declared here and nowhere else.
    needs: Tuple[str, ...] = ()
    # Its undo touches Azure or the cluster: skipped by `unbootstrap --keep-cloud-resources`.
    cloud = False
    # It only reads or changes Azure: the agent's local passes skip it (run_if).
    full_pass_only = False
    # False for a gate (preflight): when filtered out, the steps after it just go ahead;
    # otherwise its read-only check still runs for the facts the steps after it need.
    gathers_facts = True
    # The join modes it applies in (None: every one), and what the others are told.
    modes: Optional[Tuple[object, ...]] = None
    not_in_mode = "not used in {mode} mode"

    def run_if(self, ctx) -> Optional[str]:
        """None when the step applies to this run; else why it does not."""
        if self.modes is not None and ctx.mode not in self.modes:
            return self.not_in_mode.format(mode=ctx.mode)
        if self.full_pass_only and ctx.local_only:
            return LOCAL_PASS
        return None

    def prefetch(self, ctx):
        """Start the cloud reads `check` will ask for, so that a run's independent reads go at
        once (steps/cloud_reads.py); the runner calls it once the run set is known, for each
        step that applies. It only starts reads, and must not raise."""

    def check(self, ctx) -> Plan:
        raise NotImplementedError

    def undo_entries(self, ctx):
        """The ledger records this step's undo takes care of."""
        return ctx.ledger.entries(step=self.name)

    def plan_undo(self, ctx, entries) -> Plan:
        """What removing `entries` (ledger records of this step) takes; each action's run
        returns the leftovers it could not remove (strings), or nothing."""
        return Plan(noop_reason="nothing of this phase's to remove")

    def __repr__(self):
        return f"<step {self.name}>"
