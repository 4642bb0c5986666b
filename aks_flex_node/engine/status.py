"""status.json: what the last run did, for operators and for `status --wait`.

Modelled on aks-node-controller's status contract (Azure/AgentBaker, aks-node-controller/):
the run writes its outcome to a JSON file and touches a `provision.complete` marker when it is over, so a waiter polls the marker
and then reads the outcome. The file holds no secret, so it is world-readable (0644).
"""

import datetime
import json
import time

from aks_flex_node import __version__, paths
from aks_flex_node.errors import FlexNodeError

SCHEMA = 1

# Overall states.
PENDING = "pending"  # a join is wanted but has not succeeded yet (the agent retries it)
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
UNJOINED = "unjoined"


def now_iso(ts=None):
    ts = time.time() if ts is None else ts
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusFile:
    def __init__(self, host):
        self._host = host

    def read(self):
        """The last run's status, or None when no run wrote one; a file that is not a JSON
        object is an error naming it (never taken for "no run")."""
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
            raise FlexNodeError(f"{paths.STATUS} is {why}",
                                remedy=f"remove it (rm {paths.STATUS}): the next run writes it again")
        return status

    def write(self, status):
        status = dict(status, schema=SCHEMA, version=__version__, updated=now_iso())
        self._host.ensure_dir(paths.STATE_DIR, 0o700)
        body = json.dumps(status, indent=2, sort_keys=True).encode() + b"\n"
        self._host.write_file(paths.STATUS, body, 0o644)

    def begin(self):
        self._host.remove(paths.COMPLETE_MARKER)

    def complete(self):
        self._host.write_file(paths.COMPLETE_MARKER, now_iso().encode() + b"\n", 0o644)

    def is_complete(self):
        return self._host.read_bytes(paths.COMPLETE_MARKER) is not None
