"""What a step is.

A step reads the host and the cloud in `check` (read-only: it may be run on its own to
gather facts, and for --dry-run), and returns a Plan: the actions that would bring the
node to the wanted state, each with its reason, or none and the reason nothing is needed.
The runner calls `check` right before it applies, so the plan is never stale. `undo`
removes what the ledger says the step created; it is best effort and returns leftovers.
"""

import dataclasses
from typing import Callable, List, Optional, Tuple

IDENTITY = "identity"
INSTALL = "install"
CREDENTIALS = "credentials"
ACTIVATE = "activate"


@dataclasses.dataclass
class Action:
    what: str  # what changes, in the operator's words
    why: str  # why it must change
    run: Optional[Callable[[], None]] = dataclasses.field(default=None, repr=False, compare=False)

    def to_dict(self):
        return {"what": self.what, "why": self.why}


@dataclasses.dataclass
class Plan:
    actions: List[Action] = dataclasses.field(default_factory=list)
    noop_reason: Optional[str] = None

    @property
    def changes(self):
        return bool(self.actions)

    def add(self, what, why, run=None):
        self.actions.append(Action(what, why, run))

    def to_dict(self):
        return {"actions": [a.to_dict() for a in self.actions], "noop_reason": self.noop_reason}


class Step:
    """Base of every step; subclasses set the class attributes and override check/undo."""

    name = ""
    help = ""
    branch = INSTALL
    needs: Tuple[str, ...] = ()
    # Cloud steps are skipped by `unbootstrap --keep-cloud-resources`.
    cloud = False
    # False for a gate (preflight): when filtered out, the steps after it just go ahead;
    # otherwise its read-only check still runs for the facts the steps after it need.
    gathers_facts = True

    def check(self, ctx) -> Plan:
        raise NotImplementedError

    def undo(self, ctx, entries) -> List[str]:
        """Remove what `entries` (ledger records of this step) name; return what is left over."""
        return []

    def __repr__(self):
        return f"<step {self.name}>"
