"""What the node tells its operator about its health after each run: credential
lifetimes (credentials.py) and the node-exporter textfile (metrics.py).

`after_run` is the one hook: operations.py calls it once where a bootstrap (the agent's
passes are bootstraps, in a child) or an unbootstrap ends, inside the run's lock. Each
reporter is best effort: a reporter that fails is a warning in the log, never a failed run.
"""

import datetime
import logging
import time

from aks_flex_node.health import credentials, metrics, node_report

log = logging.getLogger(__name__)


def _metrics(host, config, summary, lifetimes, timestamp):
    metrics.report(host, config, summary, lifetimes, timestamp)


# (what it reports, in the warning if it fails; reporter(host, config, summary, lifetimes, timestamp))
REPORTERS = (
    ("metrics textfile", _metrics),
    ("Node conditions and events", node_report.after_run),  # as the node: health/node_report.py
)


def finished_at(summary):
    """When the run ended, in Unix seconds: status.json's `finished` (engine/status.py now_iso)."""
    try:
        return int(datetime.datetime.strptime(summary["finished"], "%Y-%m-%dT%H:%M:%SZ")
                   .replace(tzinfo=datetime.timezone.utc).timestamp())
    except (KeyError, TypeError, ValueError):
        return int(time.time())


def after_run(host, config, summary):
    """Report the run `summary` (status.json's) through every reporter; a dry run changed
    nothing and reports nothing."""
    if summary.get("dry_run"):
        return
    lifetimes = None
    try:
        lifetimes = credentials.lifetimes(host, config)
    except Exception as err:  # noqa: BLE001 - reporting must never fail the run it reports
        log.warning("could not read the credentials' lifetimes: %s: %s", type(err).__name__, err)
    timestamp = finished_at(summary)
    for what, reporter in REPORTERS:
        try:
            reporter(host, config, summary, lifetimes, timestamp)
        except Exception as err:  # noqa: BLE001 - as above: a warning, never a failed run
            log.warning("%s not written: %s: %s", what, type(err).__name__, err)
