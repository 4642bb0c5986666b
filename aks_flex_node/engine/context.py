"""What a step gets to work with, whatever it works on: the configuration, the host, the
ledger, the run's options and mode, and what the checks found (steps/context.py adds what
a join needs: its data, the HTTP policy, the downloads and Azure)."""

import dataclasses
import logging
import threading


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """What the caller asked of a run, whatever it runs (steps/context.py's JoinOptions adds
    a join's)."""

    dry_run: bool = False  # check only: nothing is applied, nothing written
    local_only: bool = False  # a local pass: cloud steps trust the last full run's facts


class Context:
    def __init__(self, config, host, ledger, options=None, log=None):
        # The operator's configuration as loaded: never replaced nor changed during a run.
        self.operator_config = config
        # The run's mode (the configuration's `mode`: the join mode), resolved once: a step
        # of another mode does not apply (Step.modes).
        self.mode = getattr(config, "mode", None)
        self.host = host
        self.ledger = ledger
        self.options = options if options is not None else RunOptions()
        # A dry run writes nothing, obligations included: the ones its plans would owe
        # are kept here, so the services phase's plan shows the restarts they call for.
        self.planned_obligations = []
        self.log = log or logging.getLogger("aks_flex_node")
        # Reentrant: a subclass's properties may read one another under it.
        self._lock = threading.RLock()
        self._adopted = []  # (step, kind, id, extra) noted by checks, for the runner to record
        # Actions the runner has applied in this run so far: a check may trust what was
        # read at the start of the run (steps/cloud_reads.py) only while this is 0.
        self.applied = 0

    @property
    def config(self):
        """The configuration the steps read: here the operator's (a subclass may derive one)."""
        return self.operator_config

    @property
    def dry_run(self):
        return self.options.dry_run

    @property
    def local_only(self):
        """A local pass: cloud steps trust the facts of the last full run instead of asking."""
        return self.options.local_only

    def obligations(self):
        """What the services phase owes: the ledger's, and in a dry run the planned ones."""
        owed = list(self.ledger.obligations()) if self.ledger is not None else []
        for obligation in self.planned_obligations:
            if obligation not in owed:
                owed.append(obligation)
        return owed

    def note_applied(self):
        """The runner is about to apply an action: answers read before it may be stale."""
        with self._lock:
            self.applied += 1

    def adopt(self, step, kind, id, **extra):
        """Note, from a check, something found in place that is ours (our deterministic
        role assignment name, the unit we enabled, a file's new fingerprint) but missing
        from the ledger. A check only reads: the runner writes what it noted to the ledger
        once the check is done (`take_adopted`), and a dry run writes nothing. (What an
        earlier release recorded in an older layout is no check's business: migrations
        bring it to today's before the first check, engine/migration.py.)"""
        with self._lock:
            self._adopted.append((step, kind, id, extra))

    def take_adopted(self, step):
        """What the checks of `step` noted as ours, taken off the list: [(kind, id, extra)]."""
        with self._lock:
            taken = [a for a in self._adopted if a[0] == step]
            self._adopted = [a for a in self._adopted if a[0] != step]
        return [(kind, id, extra) for _step, kind, id, extra in taken]
