"""The ledger: what aks-flex-node created on this node and in Azure, and what it still owes.

Unbootstrap walks it backwards, so it removes what we created and only that. Each entry is
{"step", "kind", "id", ...}; the kinds are the steps' (steps/kinds.py Kind, each with
what undo does with it), written as plain words. `joined` holds what the node is joined
to and the facts of the last full run.

`owed` holds obligations (engine/step.Obligation): a restart or a unit reload that a change
calls for. It is written before the change (ubuntu-pro-client records "reboot required"
the same way) and cleared by the phase that pays it.

The file is 0600: it names Azure resource IDs and is nobody else's business. Every change
is saved at once, atomically (host.write_file). It is read only in the shape we write
(LEDGER_SHAPE, the kinds it is given, FORMAT_VERSION): anything else is refused with the field named and
the file left as it is, never read as "nothing to undo" (and then removed).
"""

import copy
import json
import threading

from aks_flex_node import paths
from aks_flex_node.engine.lock import writing_state
from aks_flex_node.engine.state_shape import FLAG, INTEGER, TEXT, ListOf, Obj, shape_problem
from aks_flex_node.engine.step import Obligation
from aks_flex_node.errors import FlexNodeError

FORMAT_VERSION = 1
# Far past any real ledger (a few hundred entries are some tens of KB), short of a read that
# hurts: a ledger larger is refused, named, and left as it is.
MAX_BYTES = 16 << 20

# The kinds of entries are the steps' (steps/kinds.py), handed to the Ledger: an entry of
# another kind came from a newer aks-flex-node or a hand edit, and undoing the rest and
# dropping the ledger would leave that thing behind unrecorded.


# What we write (_empty, record, owe, set_joined); `version` is checked on its own.
# A Machine goal (steps/machine_goal.py: new in issue 31, all optional).
_GOAL = Obj(required={"etag": TEXT, "values": Obj(optional={
    "kubernetes_version": TEXT, "max_pods": INTEGER, "node_labels": ListOf(TEXT), "node_taints": ListOf(TEXT)})},
    optional={"released": FLAG})
ENTRY = Obj(required={"step": TEXT, "kind": TEXT, "id": TEXT},
            optional={"backup": TEXT, "mode": INTEGER, "url": TEXT, "members": ListOf(TEXT),
                      "previous": TEXT, "link": TEXT, "version": TEXT, "from": TEXT, "to": TEXT,
                      "phase": TEXT, "cordoned": FLAG, "why": TEXT, "fingerprint": ListOf(INTEGER),
                      "files": ListOf(TEXT), "pid": INTEGER,
                      # what was at a file's path before us, besides `backup` and `mode`
                      # (steps/tracked.py keep_original; new in issue 26, all optional, so
                      # a ledger an earlier release wrote reads as it did)
                      "owner": ListOf(INTEGER), "original": TEXT, "original_link": TEXT,
                      "applied": _GOAL, "applying": _GOAL, "failed": Obj(required={"etag": TEXT, "why": TEXT}),
                      "released": FLAG})
LEDGER_SHAPE = Obj(optional={
    "version": INTEGER, "entries": ListOf(ENTRY),
    "owed": ListOf(Obj(required={"kind": TEXT, "unit": TEXT, "reason": TEXT})),
    "joined": Obj(optional={"facts": Obj(nullable=True)})})


def _empty():
    return {"version": FORMAT_VERSION, "joined": {}, "entries": [], "owed": []}


class Ledger:
    is_detached = False  # a copy never saved (detached())

    def __init__(self, host, path=paths.LEDGER, kinds=None):
        """`kinds`: every kind of entry the caller records (steps/kinds.py open_ledger);
        an entry of another is refused. None: any kind (the ledger's mechanics alone)."""
        self._host = host
        self._path = path
        self._kinds = None if kinds is None else frozenset(kinds)
        self._lock = threading.RLock()
        self._data = self._read()

    def detached(self):
        """A copy of this ledger held in memory and never saved: a dry run's, where what its
        migrations change (engine/migration.py) is read by its checks and nothing is written."""
        with self._lock:
            other = copy.copy(self)
            other._lock = threading.RLock()
            other._data = copy.deepcopy(self._data)
            other.is_detached = True
        return other

    def _read(self):
        # The careful read (issue 26): a symlink planted here is not followed to a list of
        # someone else's choosing, a FIFO is not waited on, and a size past any real
        # ledger's is not read.
        try:
            raw = self._host.read_state(self._path, MAX_BYTES)
        except FlexNodeError as unsafe:
            raise self._unreadable(unsafe.message, code=f"ledger-{unsafe.code}") from None
        if not raw:
            return _empty()
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError as err:
            raise self._unreadable(f"not JSON: {err}")
        problem = shape_problem(data, LEDGER_SHAPE)
        if problem is None and data.get("version", FORMAT_VERSION) < 1:
            problem = f"version is {data['version']}, expected {FORMAT_VERSION}"
        if problem:
            raise self._unreadable(problem)
        version = data.get("version", FORMAT_VERSION)
        if version > FORMAT_VERSION:
            raise FlexNodeError(
                f"{self._path} is a ledger of version {version}, written by a newer aks-flex-node "
                f"(this one reads version {FORMAT_VERSION})", remedy=self._newer_remedy())
        for index, entry in enumerate(data.get("entries", [])):
            if self._kinds is not None and entry["kind"] not in self._kinds:
                raise FlexNodeError(
                    f"{self._path} is a ledger holding an entry this aks-flex-node does not know: "
                    f"entries[{index}].kind is {json.dumps(entry['kind'])} (id {entry['id']}), "
                    f"expected one of {', '.join(sorted(self._kinds))}", remedy=self._newer_remedy())
        for key, value in _empty().items():
            data.setdefault(key, value)
        return data

    def _unreadable(self, why, code=None):
        # Never removed or rewritten by us: it is the only list of what to undo.
        return FlexNodeError(
            f"{self._path} is not a ledger aks-flex-node can read ({why})",
            remedy=f"restore it, or move it aside (mv {self._path} {self._path}.bad) and "
            "remove what it listed by hand: without it nothing can be undone safely", code=code)

    def _newer_remedy(self):
        return ("install the aks-flex-node version that wrote it (or a newer one) and run the "
                f"command with that; keep {self._path}: without it nothing can be undone safely")

    def _save(self):
        if self.is_detached:
            return
        body = json.dumps(self._data, indent=2, sort_keys=True).encode() + b"\n"
        with writing_state(self._host.path(self._path)):
            self._host.ensure_dir(paths.STATE_DIR, 0o700)
            self._host.write_file(self._path, body, 0o600)

    @property
    def joined(self):
        with self._lock:
            return copy.deepcopy(self._data["joined"])

    def set_joined(self, **values):
        with self._lock:
            self._data["joined"].update(values)
            self._save()

    def clear_joined(self):
        with self._lock:
            self._data["joined"] = {}
            self._save()

    def record(self, step, kind, id, **extra):
        """Remember that `step` created `kind` `id`; recording the same thing twice is a no-op."""
        with self._lock:
            for entry in self._data["entries"]:
                if entry["kind"] == kind and entry["id"] == id:
                    if any(entry.get(k) != v for k, v in extra.items()):
                        entry.update(extra)
                        self._save()
                    return
            self._data["entries"].append(dict(step=step, kind=kind, id=id, **extra))
            self._save()

    def replace(self, step, kind, id, **extra):
        """Record `kind` `id` with exactly these fields: an entry already there keeps its
        place (undo order) and loses the fields not given."""
        with self._lock:
            entry = dict(step=step, kind=kind, id=id, **extra)
            for index, old in enumerate(self._data["entries"]):
                if old["kind"] == kind and old["id"] == id:
                    if old != entry:
                        self._data["entries"][index] = entry
                        self._save()
                    return
            self._data["entries"].append(entry)
            self._save()

    def has(self, kind, id):
        return self.get(kind, id) is not None

    def get(self, kind, id):
        with self._lock:
            for e in self._data["entries"]:
                if e["kind"] == kind and e["id"] == id:
                    return dict(e)
        return None

    def entries(self, step=None, kind=None):
        with self._lock:
            return [
                dict(e)
                for e in self._data["entries"]
                if (step is None or e["step"] == step) and (kind is None or e["kind"] == kind)
            ]

    def forget(self, kind, id):
        with self._lock:
            before = len(self._data["entries"])
            self._data["entries"] = [
                e for e in self._data["entries"] if not (e["kind"] == kind and e["id"] == id)
            ]
            if len(self._data["entries"]) != before:
                self._save()

    # ---- obligations -------------------------------------------------------------------

    def owe(self, obligations):
        """Write down what a change about to be made owes (saved before returning)."""
        with self._lock:
            owed = self._data["owed"]
            added = False
            for obligation in obligations:
                item = obligation.to_dict()
                if item not in owed:
                    owed.append(item)
                    added = True
            if added:
                self._save()

    def obligations(self, kind=None, unit=None):
        with self._lock:
            return [Obligation(o["kind"], o["unit"], o["reason"]) for o in self._data["owed"]
                    if (kind is None or o["kind"] == kind) and (unit is None or o["unit"] == unit)]

    def settle(self, kind, unit):
        """The obligation `kind` of `unit` is paid: forget every reason for it."""
        with self._lock:
            before = len(self._data["owed"])
            self._data["owed"] = [o for o in self._data["owed"]
                                  if not (o["kind"] == kind and o["unit"] == unit)]
            if len(self._data["owed"]) != before:
                self._save()

    def empty(self):
        with self._lock:
            return not self._data["entries"] and not self._data["joined"]

    def remove_file(self):
        """Drop the ledger itself once nothing is left to track."""
        if self.is_detached:
            raise RuntimeError("a detached ledger has no file")
        with self._lock, writing_state(self._host.path(self._path)):
            self._host.remove(self._path)
            self._data = _empty()
