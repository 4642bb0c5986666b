"""The agent as the integration tests run it: a process on a scratch root, its status file,
and waits that count its passes instead of sleeping."""

import json
import subprocess
import sys

from tests.harness import REPO
from tests.waiting import wait_for

PENDING = "/var/lib/aks-flex-node/join-pending"


# Python 3.12+ warns when fork(2) is called from a process with other threads (a child
# may deadlock on a lock another thread held). The agent forks each pass from its one
# thread (agent.py). The warning is shown here (DeprecationWarnings are hidden by default;
# made an error, CPython would still not raise it), so that on Debian 13's Python (make
# test-trixie) a test that reads the agent's stderr proves no fork had a thread beside it.
SHOW_FORK_WARNING = "default::DeprecationWarning:aks_flex_node.agent"
FORK_WARNING = "use of fork() may lead to deadlocks"


def start_agent(node, *args):
    env = dict(node.env, PYTHONWARNINGS=SHOW_FORK_WARNING)
    return subprocess.Popen(
        [sys.executable, "-m", "aks_flex_node", "agent", "--root", node.root, *args],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def status(node):
    try:
        return json.loads(node.read("/var/lib/aks-flex-node/status.json"))
    except (OSError, ValueError):
        return {}


def interval_stamp(node):
    """What changes in status.json with each interval of the agent: a pass's `started`, or
    the drift probe's `checked` and `probes` when it stood in for a local pass (agent.py)."""
    now = status(node)
    return now.get("started"), now.get("checked"), now.get("probes")


def wait_for_passes(node, count, timeout=60):
    """Wait until `count` more intervals of the running agent have been looked at, by a pass
    or by the drift probe (interval_stamp): "nothing happens" is then proven over that many
    intervals, however slow the machine."""
    seen = [interval_stamp(node)]

    def more():
        now = interval_stamp(node)
        if now != seen[-1]:
            seen.append(now)
        return len(seen) > count

    return wait_for(more, timeout, interval=0.05)
