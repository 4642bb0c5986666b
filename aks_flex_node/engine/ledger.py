"""The ledger: what aks-flex-node created on this node and in Azure.

Unbootstrap walks it backwards, so it removes what we created and only that. Each entry is
{"step", "kind", "id", ...}; kinds: file, dir, unit, module, role_assignment, arc_machine,
azcmagent_connection, node. `joined` holds what the node is joined to. The file is 0600:
it names Azure resource IDs and is nobody else's business.
"""

import copy
import json
import threading

STATE_DIR = "/var/lib/aks-flex-node"
LEDGER_PATH = STATE_DIR + "/ledger.json"
BACKUP_DIR = STATE_DIR + "/backup"
FORMAT_VERSION = 1


class Ledger:
    def __init__(self, host, path=LEDGER_PATH):
        self._host = host
        self._path = path
        self._lock = threading.RLock()
        self._data = self._read()

    def _read(self):
        raw = self._host.read_bytes(self._path)
        if not raw:
            return {"version": FORMAT_VERSION, "joined": {}, "entries": []}
        data = json.loads(raw.decode("utf-8"))
        data.setdefault("joined", {})
        data.setdefault("entries", [])
        return data

    def _save(self):
        self._host.ensure_dir(STATE_DIR, 0o700)
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
        with self._lock:
            return any(e["kind"] == kind and e["id"] == id for e in self._data["entries"])

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

    def empty(self):
        with self._lock:
            return not self._data["entries"] and not self._data["joined"]

    def remove_file(self):
        """Drop the ledger itself once nothing is left to track."""
        with self._lock:
            self._host.remove(self._path)
            self._data = {"version": FORMAT_VERSION, "joined": {}, "entries": []}
