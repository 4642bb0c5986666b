"""status.json: what the last run did, for operators and for `status --wait`.

Modelled on aks-node-controller's status contract (Azure/AgentBaker, aks-node-controller/):
the run writes its outcome to a JSON file and touches a `provision.complete` marker when it is over, so a waiter polls the marker
and then reads the outcome. The file holds no secret, so it is world-readable (0644).

A run killed (kill -9, a power cut) leaves "running" behind. Readers ask `current()`, which
reads such a record as "interrupted" once no process holds the run lock (engine/lock.py).
That is derived on each read and never written: the next run overwrites the record as usual.
"""

import json
import time

from aks_flex_node import __version__, paths
from aks_flex_node.engine import lock
from aks_flex_node.engine.state_shape import FLAG, INTEGER, NUMBER, TEXT, ListOf, Obj, shape_problem
from aks_flex_node.errors import ExitCode, FlexNodeError

SCHEMA = 1

# Overall states.
PENDING = "pending"  # a join is wanted but has not succeeded yet (the agent retries it)
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
UNJOINED = "unjoined"
INTERRUPTED = "interrupted"  # read, not written: "running", but its run is gone


# What a run writes (operations.py: the summary, PhaseResult.to_dict, FlexNodeError.to_dict,
# Obligation.to_dict), for the fields a reader uses: `status` prints them, `status --wait`
# exits with exit_code. Keys not listed here are left alone.
_MAYBE_TEXT = (str, type(None))
_MAYBE_INTEGER = (int, type(None))
_ITEM = Obj(required={"what": TEXT}, optional={"why": TEXT, "reason": TEXT})
STATUS_SHAPE = Obj(required={"state": TEXT}, optional={
    "operation": _MAYBE_TEXT, "cluster_resource_id": _MAYBE_TEXT, "machine_name": _MAYBE_TEXT,
    "started": _MAYBE_TEXT, "finished": _MAYBE_TEXT, "duration_s": NUMBER, "pid": INTEGER,
    "exit_code": INTEGER, "dry_run": FLAG,
    "error": Obj(optional={"message": TEXT, "remedy": TEXT}, nullable=True),
    "phases": ListOf(Obj(required={"name": TEXT, "status": TEXT}, optional={
        "message": TEXT, "duration_s": NUMBER, "changes": ListOf(_ITEM),
        "unknown": ListOf(Obj(required={"what": TEXT, "reason": TEXT}))})),
    "owed": ListOf(Obj(required={"kind": TEXT, "unit": TEXT, "reason": TEXT})),
    "leftovers": ListOf(TEXT), "kept": ListOf(TEXT),
    "kubelet": Obj(optional={"active": _MAYBE_TEXT, "upgrade": Obj(optional={
        "from": TEXT, "to": TEXT, "phase": TEXT, "why": TEXT})}),
    "machine_goal": Obj(required={"verdict": TEXT, "reason": TEXT},
                        optional={"etag": TEXT, "version": _MAYBE_TEXT, "code": TEXT}),
    "gpu": Obj(required={"verdict": TEXT, "message": TEXT},
               optional={"vendor": TEXT, "resource": TEXT, "detected": INTEGER, "remedy": TEXT,
                         "advertised": _MAYBE_INTEGER, "capacity": _MAYBE_INTEGER}),
    "reason": TEXT, "checked": TEXT, "probes": INTEGER})


def now_iso(ts=None):
    ts = time.time() if ts is None else ts
    # time.gmtime, not datetime: the agent's parent writes this after a drift probe, and
    # datetime would add 0.3 MB to its resident size (agent.py).
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class StatusFile:
    def __init__(self, host):
        self._host = host

    def read(self):
        """The last run's status, or None when no run wrote one; a file that is not a JSON
        object of the shape a run writes (STATUS_SHAPE) is an error naming it and the field
        (never taken for "no run")."""
        raw = self._host.read_bytes(paths.STATUS)
        if not raw:
            return None
        try:
            status = json.loads(raw.decode("utf-8"))
        except ValueError as err:
            status, why = None, f"not JSON ({err})"
        else:
            why = f"a JSON {type(status).__name__}, not an object"
        if not isinstance(status, dict):
            raise _bad_status(why)
        problem = shape_problem(status, STATUS_SHAPE)
        if problem:
            raise _bad_status(f"not the status a run writes: {problem}")
        return status

    def current(self):
        """The last run's status as it stands now: `read()`, except that a "running" record
        whose run no longer holds the run lock reads as "interrupted". The record is read
        again while we hold the lock: a run that ended between the first read and the probe
        has written its outcome by then, and none can start until we let go."""
        status = self.read()
        if not status or status.get("state") != RUNNING:
            return status
        with lock.probe(self._host) as free:
            if not free:  # a run holds it (or we cannot tell): it is running
                return status
            status = self.read()
        if status and status.get("state") == RUNNING:
            return interrupted(status)
        return status

    def write(self, status):
        status = dict(status, schema=SCHEMA, version=__version__, updated=now_iso())
        body = json.dumps(status, indent=2, sort_keys=True).encode() + b"\n"
        with lock.writing_state(self._host.path(paths.STATUS)):
            self._host.ensure_dir(paths.STATE_DIR, 0o700)
            self._host.write_file(paths.STATUS, body, 0o644)

    def note_checked(self, ts, probes):
        """The agent's drift probe (agent.py) found the node at `ts` as the last pass left it,
        `probes` times since that pass: the record says so (`checked`, `probes`) and keeps the
        pass's own fields (`started`, `finished`, its phases). None when written, else why
        not: a run holds the lock (its record is its own), or the record is not a
        succeeded pass's."""
        with lock.probe(self._host) as free:
            if not free:
                return "a run holds the lock" if free is False else "the lock cannot be taken"
            status = self.read()
            if not status or status.get("state") != SUCCEEDED:
                return f"status.json says {status.get('state') if status else None!r}, not {SUCCEEDED!r}"
            self.write(dict(status, checked=now_iso(ts), probes=probes))
        return None

    def begin(self):
        with lock.writing_state(self._host.path(paths.COMPLETE_MARKER)):
            self._host.remove(paths.COMPLETE_MARKER)

    def complete(self):
        with lock.writing_state(self._host.path(paths.COMPLETE_MARKER)):
            self._host.write_file(paths.COMPLETE_MARKER, now_iso().encode() + b"\n", 0o644)

    def is_complete(self):
        return self._host.read_bytes(paths.COMPLETE_MARKER) is not None


def _bad_status(why):
    return FlexNodeError(f"{paths.STATUS} is {why}",
                         remedy=f"remove it (rm {paths.STATUS}): the next run writes it again")


def interrupted(status):
    """A "running" record whose run is gone, as `status` shows it: failed (exit 1), with
    what to do."""
    operation = status.get("operation") or "bootstrap"
    who = f"pid {status['pid']}" if status.get("pid") else "its process"
    since = f" (started {status['started']})" if status.get("started") else ""
    remedy = f"run `aks-flex-node {operation}` again"
    if operation == "bootstrap":
        remedy += ("; or let the agent service retry it: aks-flex-node-agent does on its next "
                   "pass when the join is pending or the node is joined (journalctl -u "
                   "aks-flex-node-agent)")
    error = {"error": INTERRUPTED, "remedy": remedy,
             "message": f"the {operation} run{since} was interrupted: {who} ended (killed, or the "
                        "machine went down) before it recorded an outcome"}
    return dict(status, state=INTERRUPTED, exit_code=int(ExitCode.FAILED), error=error)
