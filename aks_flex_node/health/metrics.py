"""The node's metrics as a textfile for prometheus-node-exporter's textfile collector.

Debian's prometheus-node-exporter (1.5.0 in Debian 12) ships /var/lib/prometheus/node-exporter
and reads `*.prom` files there: it is the default of its --collector.textfile.directory, and
its /usr/share/doc/prometheus-node-exporter/README.textfile says to "create files in the
/var/lib/prometheus/node-exporter directory that are readable by the prometheus user" (0644
here) and to write each to a temp name and `mv` it into place, so the collector never reads
half a file. We do exactly that (host.write_file: a temp file in the same directory, which
does not match *.prom, renamed over the old one), after every run that changed or looked at
the node (bootstrap, unbootstrap, each agent pass), in the text exposition format 0.0.4
(https://prometheus.io/docs/instrumenting/exposition_formats/).

Names follow https://prometheus.io/docs/practices/naming/ : an `aks_flex_node_` prefix,
seconds, `_total` for counters, `_info` for the build with value 1. Each fact has one owner:
the run's summary (status.json, engine/status.py), the ledger's join record, the credential
lifetimes (health/credentials.py) and, for what outlives one run (repairs counted, each
operation's last run), this module's record, /var/lib/aks-flex-node/metrics.json.

We never create node-exporter's directory: no directory, no file (metrics_textfile_dir
names another one than Debian's).
"""

import json
import logging
import math

from aks_flex_node import __version__, paths
from aks_flex_node.engine.status import UNJOINED
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.health.credentials import Found
from aks_flex_node.host.fs import HostFileError
from aks_flex_node.steps.kinds import open_ledger

log = logging.getLogger(__name__)

FILE_NAME = "aks_flex_node.prom"
MAX_RECORD = 64 * 1024  # a few phases' counters and two operations: far less than this
# steps/kubelet_upgrade.py FAILED: the upgrade record kept after a rollback (not under way).
_UPGRADE_FAILED = "failed"
# Phases whose change is the run's purpose, never a repair of drift.
_NOT_REPAIRS = frozenset({"kubelet-upgrade"})


class Family:
    """One metric family: its name, type (gauge or counter), help, and samples, each
    (labels as a dict, value)."""

    def __init__(self, name, type_, help_):
        self.name, self.type, self.help, self.samples = name, type_, help_, []

    def add(self, value, **labels):
        self.samples.append((labels, value))
        return self


def escape_label(value):
    """A label value as the exposition format writes it: backslash, double quote and line
    feed escaped (text format 0.0.4, "Comments, help text, and type information")."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text):
    return str(text).replace("\\", "\\\\").replace("\n", "\\n")


def _number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families):
    """The exposition text of `families`; a family without samples is left out."""
    lines = []
    for family in families:
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for labels, value in family.samples:
            shown = ",".join(f'{key}="{escape_label(labels[key])}"' for key in sorted(labels))
            lines.append(f"{family.name}{{{shown}}} {_number(value)}" if shown else f"{family.name} {_number(value)}")
    return "".join(line + "\n" for line in lines)


# ---- what outlives one run: this module's record ---------------------------------------

def read_record(host):
    """The record (repairs counted by phase, each operation's last run, whether the last
    bootstrap left the node converged); a missing or unreadable one starts afresh (counters
    may reset: Prometheus's rate() and increase() allow for it)."""
    empty = {"repairs": {}, "last_runs": {}, "converged": False}
    try:
        raw = host.read_state(paths.METRICS_RECORD, MAX_RECORD)
    except HostFileError as err:
        log.warning("%s: %s; the metrics' counters start again from 0", paths.METRICS_RECORD, err)
        return empty
    if raw is None:
        return empty
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        data = None
    if not _well_formed(data):
        log.warning("%s: not a record this release wrote; the metrics' counters start again from 0",
                    paths.METRICS_RECORD)
        return empty
    return data


def _well_formed(data):
    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    def last_run(v):
        return (isinstance(v, dict) and isinstance(v.get("timestamp"), (int, float))
                and not isinstance(v.get("timestamp"), bool) and isinstance(v.get("success"), bool))
    return (isinstance(data, dict) and isinstance(data.get("repairs"), dict)
            and all(isinstance(k, str) and count(v) for k, v in data["repairs"].items())
            and isinstance(data.get("last_runs"), dict)
            and all(isinstance(k, str) and last_run(v) for k, v in data["last_runs"].items())
            and isinstance(data.get("converged"), bool))


def updated_record(record, summary, timestamp):
    """The record after the run `summary` (status.json's) that finished at `timestamp`.

    A repair is a phase that changed something in a bootstrap of a node the last bootstrap
    had left converged (succeeded, every phase run): drift put right, whoever ran it (the
    agent's pass or an operator). A kubelet upgrade is not one."""
    record = json.loads(json.dumps(record))  # a copy: the caller's stays as read
    operation = str(summary.get("operation") or "bootstrap")
    success = summary.get("exit_code") == 0
    record["last_runs"][operation] = {"timestamp": timestamp, "success": success}
    phases = [p for p in summary.get("phases") or () if isinstance(p, dict)]
    if operation == "bootstrap":
        if record["converged"]:
            for phase in phases:
                name = phase.get("name")
                if phase.get("status") == "changed" and isinstance(name, str) and name not in _NOT_REPAIRS:
                    record["repairs"][name] = record["repairs"].get(name, 0) + 1
        # A run filtered by --phase or --skip-phase says nothing of the phases it left out.
        if all(p.get("status") not in ("skipped", "facts-only") for p in phases):
            record["converged"] = success
    else:
        record["converged"] = False
    return record


# ---- the metrics ------------------------------------------------------------------------

def families(summary, record, joined, lifetimes, timestamp):
    """The metric families of a run: `summary` is status.json's, `record` this module's
    record after the run, `joined` whether the ledger records a join (None: unreadable),
    `lifetimes` health/credentials.lifetimes() (None: not read)."""
    operation = str(summary.get("operation") or "bootstrap")
    out = [Family("aks_flex_node_build_info", "gauge",
                  "The aks-flex-node release that wrote this file (always 1).").add(1, version=__version__)]
    joined_family = Family("aks_flex_node_joined", "gauge",
                           "1 when the ledger records this node joined to a cluster, else 0.")
    if joined is not None:
        joined_family.add(int(joined))
    out.append(joined_family)
    out.append(Family("aks_flex_node_last_run_state", "gauge",
                      "The state the last run left (status.json's state), as a label; always 1.")
               .add(1, operation=operation, state=summary.get("state", "unknown")))
    stamp = Family("aks_flex_node_last_run_timestamp_seconds", "gauge",
                   "When the last run of each operation finished, in Unix seconds.")
    success = Family("aks_flex_node_last_run_success", "gauge",
                     "1 when the last run of each operation succeeded, 0 when it failed.")
    for name in sorted(record["last_runs"]):
        stamp.add(record["last_runs"][name]["timestamp"], operation=name)
        success.add(int(record["last_runs"][name]["success"]), operation=name)
    out += [stamp, success]
    duration = Family("aks_flex_node_phase_duration_seconds", "gauge",
                      "How long each phase of the last run took, in seconds.")
    outcome = Family("aks_flex_node_phase_outcome", "gauge",
                     "Each phase's outcome in the last run (changed, unchanged, failed, blocked, skipped...); always 1.")
    for phase in summary.get("phases") or ():
        if not isinstance(phase, dict) or not isinstance(phase.get("name"), str):
            continue
        if isinstance(phase.get("duration_s"), (int, float)) and not isinstance(phase["duration_s"], bool):
            duration.add(phase["duration_s"], operation=operation, phase=phase["name"])
        outcome.add(1, operation=operation, phase=phase["name"], outcome=phase.get("status", "unknown"))
    out += [duration, outcome]
    repairs = Family("aks_flex_node_repairs_total", "counter",
                     "Phases that had to change something on a converged node (drift put right), by phase.")
    for kind in sorted(record["repairs"]):
        repairs.add(record["repairs"][kind], kind=kind)
    out.append(repairs)
    kubelet = summary.get("kubelet") if isinstance(summary.get("kubelet"), dict) else None
    version = Family("aks_flex_node_kubelet_version_info", "gauge",
                     "The kubelet version the node runs (the `current` link), as a label; always 1.")
    upgrading = Family("aks_flex_node_upgrade_in_progress", "gauge",
                       "1 while a kubelet upgrade is under way (drain, switch or rollback), else 0.")
    if kubelet is not None:
        if isinstance(kubelet.get("active"), str):
            version.add(1, version=kubelet["active"])
        upgrade = kubelet.get("upgrade")
        upgrading.add(int(isinstance(upgrade, dict) and upgrade.get("phase") != _UPGRADE_FAILED))
    out += [version, upgrading]
    expiry = Family("aks_flex_node_credential_expiry_timestamp_seconds", "gauge",
                    "When each credential of the node expires, in Unix seconds (only those whose expiry is known).")
    renewable = Family("aks_flex_node_credential_renewable", "gauge",
                       "1 when the node renews the credential itself, 0 when an operator must; "
                       "for each credential present on the node.")
    for lifetime in lifetimes or ():
        if lifetime.found is Found.KNOWN:
            expiry.add(lifetime.expiry_seconds, credential=lifetime.kind)
        if lifetime.found is not Found.ABSENT:
            renewable.add(int(lifetime.renewable), credential=lifetime.kind)
    out += [expiry, renewable]
    # Last, one line: the agent's drift probe puts its own time here when it finds the node
    # as this run left it (agent.py), without a pass and without this module.
    converged = Family(CONVERGED_CHECK, "gauge",
                       "When this node was last found converged, in Unix seconds: a bootstrap that "
                       "succeeded, or the agent's drift probe since it, which found nothing changed.")
    if operation == "bootstrap" and summary.get("state") == "succeeded":
        converged.add(timestamp)
    out.append(converged)
    return out


CONVERGED_CHECK = "aks_flex_node_last_converged_check_timestamp_seconds"


# Debian's prometheus-node-exporter: the directory it ships and the default of its
# --collector.textfile.directory (its README.textfile; /etc/default/prometheus-node-exporter
# passes no other).
DEBIAN_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


def textfile_dir(config):
    """The directory the file goes to: metrics_textfile_dir, else Debian's."""
    return config.metrics_textfile_dir or DEBIAN_TEXTFILE_DIR


def report(host, config, summary, lifetimes, timestamp):
    """Write the textfile after the run `summary`, when its directory exists; the record
    first, so a counter is never shown that a later run could not count on from."""
    directory = textfile_dir(config)
    record = updated_record(read_record(host), summary, timestamp)
    if summary.get("operation") == "unbootstrap" and summary.get("state") == UNJOINED:
        # A node that left keeps no run state of ours (unbootstrap leaves only status.json, the
        # lock and provision.complete): the last textfile still says so (joined 0), and a new
        # join counts its repairs from zero, as a Prometheus counter may (a reset, to rate()).
        host.remove(paths.METRICS_RECORD)
    else:
        host.write_file(paths.METRICS_RECORD, (json.dumps(record, sort_keys=True) + "\n").encode(), mode=0o644)
    if not host.is_dir(directory):
        log.debug("no %s: no metrics textfile written", directory)
        return None
    try:
        joined = bool(open_ledger(host).joined)
    except FlexNodeError as err:  # an unreadable ledger: the run reports it, the metric is left out
        log.debug("%s", err)
        joined = None
    path = directory.rstrip("/") + "/" + FILE_NAME
    host.write_file(path, render(families(summary, record, joined, lifetimes, timestamp)).encode(), mode=0o644)
    return path
