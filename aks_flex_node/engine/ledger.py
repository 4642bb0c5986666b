"""The ledger: what aks-flex-node created on this node and in Azure, and what it still owes.

Unbootstrap walks it backwards, so it removes what we created and only that. Each entry is
{"step", "kind", "id", ...}; kinds: file (with a `backup` when it existed before), dir and
parent_dir (removed only when empty of anything we did not create), state_dir (a service's
state directory we created: it goes with its content, never across a mount), cache_dir,
unit, role_assignment, arc_machine, azcmagent_connection, node. `joined` holds what the
node is joined to and the facts of the last full run.

`owed` holds obligations (engine/step.Obligation): a restart or a unit reload that a change
calls for. It is written before the change (ubuntu-pro-client records "reboot required"
the same way) and cleared by the phase that pays it.

The file is 0600: it names Azure resource IDs and is nobody else's business. Every change
is saved at once, atomically (host.write_file).
"""

import copy
import json
import threading

from aks_flex_node import paths
from aks_flex_node.engine.step import Obligation
from aks_flex_node.errors import FlexNodeError

FORMAT_VERSION = 1


def _empty():
    return {"version": FORMAT_VERSION, "joined": {}, "entries": [], "owed": []}


class Ledger:
    def __init__(self, host, path=paths.LEDGER):
        self._host = host
        self._path = path
        self._lock = threading.RLock()
        self._data = self._read()

    def _read(self):
        raw = self._host.read_bytes(self._path)
        if not raw:
            return _empty()
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("entries", []), list):
                raise ValueError("expected a JSON object with an entries list")
        except ValueError as err:
            raise FlexNodeError(
                f"{self._path} is not a ledger aks-flex-node can read ({err})",
                remedy=f"restore it, or move it aside (mv {self._path} {self._path}.bad) and "
                "remove what it listed by hand: without it nothing can be undone safely")
        for key, value in _empty().items():
            data.setdefault(key, value)
        return data

    def _save(self):
        self._host.ensure_dir(paths.STATE_DIR, 0o700)
        body = json.dumps(self._data, indent=2, sort_keys=True).encode() + b"\n"
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
        with self._lock:
            self._host.remove(self._path)
            self._data = _empty()
