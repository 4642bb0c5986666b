"""The agent as the integration tests run it: a process on a scratch root, its status file,
and waits that count its passes instead of sleeping."""

import json
import subprocess
import sys

from tests.harness import REPO
from tests.waiting import wait_for

PENDING = "/var/lib/aks-flex-node/join-pending"


def start_agent(node, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "aks_flex_node", "agent", "--root", node.root, *args],
        env=node.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def status(node):
    try:
        return json.loads(node.read("/var/lib/aks-flex-node/status.json"))
    except (OSError, ValueError):
        return {}


def wait_for_passes(node, count, timeout=60):
    """Wait until `count` more passes of the running agent have started (status.json's
    `started` changes with each): "nothing happens" is then proven over that many passes,
    however slow the machine."""
    seen = [status(node).get("started")]

    def more():
        now = status(node).get("started")
        if now != seen[-1]:
            seen.append(now)
        return len(seen) > count

    return wait_for(more, timeout, interval=0.05)
