"""What health/node_report.py last sent to the Node, so that a pass with nothing new sends
nothing: in Arc mode each report costs a HIMDS challenge and token, a GET of the Node and a
PATCH of its status, and the agent makes a local pass every minute.

node-problem-detector's condition manager (k8s.io/node-problem-detector,
pkg/exporters/k8sexporter/condition/manager.go) sends its conditions when one changed
(needUpdates), again after a send that failed (needResync, resyncPeriod 10 s), and at least
every heartbeatPeriod even when nothing changed (needHeartbeat; --k8s-exporter-heartbeat-period,
default 5m0s in cmd/options/options.go), so lastHeartbeatTime stays fresh and a condition
someone else changed is put back. We do the same once a pass: send when the conditions differ
from the last ones sent, when the pass has events, when the last send is RESYNC seconds old
(or the clock went back), and when there is no record we can trust; a send that failed
writes no record, so the next pass sends again.

The record is /var/lib/aks-flex-node/node-report.json (paths.NODE_REPORT_RECORD): the node's
name, a digest of the conditions' type, status, reason and message (their times change on
every pass: they are not part of it), and when they were sent. It is read by the careful read
(host.read_state) and anything but a record this release wrote (a link, a FIFO, a large file,
bytes that are not such JSON) reads as no record: the report is sent, never skipped on it.
Unbootstrap removes it with the run's other state (operations.py _remove_run_state): a node
that joins again has a new Node to report to.
"""

import hashlib
import json
import logging
import re

from aks_flex_node import paths
from aks_flex_node.host.fs import HostFileError

log = logging.getLogger(__name__)

# Seconds after which the same conditions are sent again: NPD's default heartbeat period.
RESYNC = 5 * 60
MAX_RECORD = 4096  # a name, a digest and a time: far less than this
_DIGEST = re.compile(r"[0-9a-f]{64}", re.ASCII)


def digest(node_name, conditions):
    """The hex SHA-256 of what a report would set on Node `node_name`: each condition's type,
    status, reason and message, in type order."""
    facts = sorted([str(c.get(k)) for k in ("type", "status", "reason", "message")] for c in conditions)
    return hashlib.sha256(json.dumps([str(node_name), facts]).encode("utf-8")).hexdigest()


def _well_formed(data):
    return (isinstance(data, dict) and set(data) == {"node", "digest", "sent"}
            and isinstance(data["node"], str) and isinstance(data["digest"], str)
            and _DIGEST.fullmatch(data["digest"]) is not None
            and isinstance(data["sent"], int) and not isinstance(data["sent"], bool) and data["sent"] >= 0)


def read(host):
    """The record, or None when there is none or it cannot be trusted (a warning says why)."""
    try:
        raw = host.read_state(paths.NODE_REPORT_RECORD, MAX_RECORD)
    except HostFileError as err:
        log.warning("%s: %s (%s); the Node's conditions are sent", paths.NODE_REPORT_RECORD, err.message, err.code)
        return None
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is a ValueError
        data = None
    if not _well_formed(data):
        log.warning("%s: not a record this release wrote (%r...); the Node's conditions are sent",
                    paths.NODE_REPORT_RECORD, raw[:64])
        return None
    return data


def already_sent(record, node_name, wanted_digest, now_s):
    """True when `record` says these conditions went to this Node less than RESYNC seconds
    before `now_s` (Unix seconds); a record from the future (the clock went back) is stale."""
    return (record is not None and record["node"] == node_name and record["digest"] == wanted_digest
            and 0 <= now_s - record["sent"] < RESYNC)


def write(host, node_name, wanted_digest, now_s):
    """Record a successful send (atomically, root's alone: it says nothing secret, but only
    the agent writes it)."""
    body = json.dumps({"node": node_name, "digest": wanted_digest, "sent": int(now_s)}, sort_keys=True) + "\n"
    host.write_file(paths.NODE_REPORT_RECORD, body.encode(), mode=0o600)
