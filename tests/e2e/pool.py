"""Agent-pool nodes in the booted scenarios: the preseed of an agent-pool install, what a
node's ledger says of its Machine goal, and the operator's side of a pool operation (the
emulator's RP: tests/emulator/pool_operations.py) watched while it runs. The pool's Machines as
the emulator holds them: tests/workload_fixtures.py pool_machines.

Shared by tests/e2e/test_agent_pool.py and tests/e2e/test_pool_follow.py (a test module never
imports another: tests/unit/test_test_layout.py)."""

import json
import time

from tests.e2e import node as n
from tests.emulator import constants as C
from tests.waiting import wait_for

LEDGER = "/var/lib/aks-flex-node/ledger.json"
AGENT = "aks-flex-node-agent"
# An operator's drop-in (systemd.unit(5), "drop-in"), so that a node notices its deleted Node
# within seconds rather than the default minute (`aks-flex-node agent --interval`).
AGENT_DROPIN = f"/etc/systemd/system/{AGENT}.service.d/e2e-interval.conf"


def agent_pool_answers(machine_name=n.MACHINE_NAME):
    """The preseed of an agent-pool install: no Arc machine's questions (subscription,
    tags), the node's own service principal."""
    return {
        "join": ("boolean", "true"),
        "join_mode": ("select", "agent-pool"),
        "agent_pool": ("string", C.FLEX_POOL),
        "tenant_id": ("string", C.TENANT_ID),
        "cluster_resource_id": ("string", C.CLUSTER_ID),
        "cloud": ("select", "custom"),
        "auth_method": ("select", "service-principal"),
        "sp_client_id": ("string", C.NODE_SP_CLIENT_ID),
        "sp_client_secret": ("password", C.NODE_SP_CLIENT_SECRET),
        "machine_name": ("string", machine_name),
        "on_join_failure": ("select", "fail-install"),
    }


def shorten_agent_interval(node, seconds):
    """The agent's local pass every `seconds` (a drop-in put in place before the install,
    whose daemon-reload reads it): the pass is what notices the Node the pool deleted."""
    node.c.write(AGENT_DROPIN, f"[Service]\nExecStart=\nExecStart=/usr/bin/aks-flex-node agent --interval {seconds}\n",
                 0o644)


def install_pool_node(node, mirror, machine_name):
    """Scenario test_agent_pool's unattended agent-pool install, as `machine_name`."""
    node.write_config(n.endpoint_settings(node.emulator, mirror))
    node.preseed(agent_pool_answers(machine_name))
    return node.apt_get("install", "--no-install-recommends", "aks-flex-node", check=False)


# ---- the node's record of its Machine goal (aks_flex_node/steps/machine_goal.py) -------------


def ledger_entry(node, kind, entry_id):
    """The ledger's entry of `kind`/`entry_id` on the node, or None (no ledger, or none)."""
    raw = node.c.read(LEDGER)
    if raw is None:
        return None
    for entry in json.loads(raw).get("entries", []):
        if entry.get("kind") == kind and entry.get("id") == entry_id:
            return entry
    return None


def machine_goal(node):
    """{"applied", "applying", "failed"} of the node's machine_goal record ({} when none)."""
    return ledger_entry(node, "machine_goal", "goal") or {}


def kubelet_upgrade(node):
    """The node's kubelet_upgrade record (from, to, phase...), or None."""
    return ledger_entry(node, "kubelet_upgrade", "kubelet")


def unit_property(node, unit, prop):
    return node.c.run(["systemctl", "show", "-p", prop, "--value", unit]).stdout.strip()


def kill_unit(node, unit):
    """kill -9 of every process of `unit` that the node's PID namespace holds (its cgroup's
    cgroup.procs, cgroups(7)), as a crash or the OOM killer would end them: the pids killed.
    cgroup.procs shows 0 for a process of another PID namespace, and `kill -9 0` would signal
    the caller's own process group (kill(2)): on the host, the test's. (Containers that shared
    one cgroup, before container.own_cgroup, listed each other's processes so.)"""
    group = unit_property(node, unit, "ControlGroup")
    assert group, f"{unit} has no control group: is it running?"
    listed = node.c.run(["cat", f"/sys/fs/cgroup{group}/cgroup.procs"]).stdout.split()
    pids = [pid for pid in listed if pid.isdigit() and int(pid) > 1]
    print(f"{unit}: cgroup.procs {listed}; killing {pids}")
    assert pids, f"no process of {unit} in its cgroup {group}: {listed}"
    node.c.run(["kill", "-KILL", "--", *pids], check=False)  # one may have ended meanwhile
    return pids


# ---- the operator's side -----------------------------------------------------------------


class OperationWatch:
    """A pool operation watched to its end: every distinct view of it, each with what the
    cluster held at that moment ({name: (present, Ready, kubelet version)} of `names`' Nodes),
    and every apiserver request of the log seen meanwhile (the log keeps the last 2,000, so it
    is read at each look, not once at the end)."""

    def __init__(self, emulator, op_id, names):
        self.emulator, self.op_id, self.names = emulator, op_id, tuple(names)
        self.views = []  # (machines {name: phase}, nodes {name: (present, ready, version)})
        self.requests = {}  # a key of each request -> the request
        self.last = None
        self.started, self.ended = time.monotonic(), None  # for the record, never asserted

    def look(self):
        op = self.emulator.pool_operation(self.op_id)
        state = self.emulator.state()
        nodes = {item["metadata"]["name"]: item for item in state["nodes"].get(C.CLUSTER_NAME, [])}
        seen = {name: (name in nodes, name in nodes and n.is_ready(nodes[name]),
                       (nodes.get(name) or {}).get("status", {}).get("nodeInfo", {}).get("kubeletVersion"))
                for name in self.names}
        view = (op["machines"], seen)
        if not self.views or self.views[-1] != view:
            self.views.append(view)
        for r in state["requests"]:
            if r["server"] == "apiserver":
                self.requests[(r["time"], r["method"], r["path"], r["status"], r["client_request_id"])] = r
        self.last = op
        return op

    def wait(self, timeout=1200):
        """The operation's last view once it is no longer InProgress (or after `timeout` s)."""
        wait_for(lambda: self.look()["status"] != "InProgress", timeout=timeout, interval=0.5)
        self.ended = time.monotonic()
        print(f"pool operation {self.last['kind']} to {self.last['version']}: {self.last['status']} "
              f"after {self.ended - self.started:.0f} s")
        return self.last

    def by_nodes(self, method=None, path_contains=None):
        """The apiserver requests seen that a node's own identity (system:node:NAME) made."""
        return [r for r in self.requests.values()
                if str((r.get("detail") or {}).get("principal") or "").startswith("system:node:")
                and (method is None or r["method"] == method)
                and (path_contains is None or path_contains in r["path"])]


def operator_delete_machines(emulator, names, timeout=600):
    """`az aks nodepool delete-machines --machine-names ...` as the operator: one POST
    deleteMachines, its Azure-AsyncOperation polled to its end; that end's body."""
    status, headers, body = emulator.arm_call("POST", f"{C.FLEX_POOL_ID}/deleteMachines", C.AGENTPOOL_API,
                                              {"machineNames": list(names)})
    assert status == 202, (status, body)
    monitor = headers["Azure-AsyncOperation"]
    seen = {}

    def ended():
        code, _, answer = emulator.http("GET", monitor, headers={"Authorization": f"Bearer {emulator.arm_token()}"})
        seen["answer"] = (code, answer)
        return code == 200 and answer.get("status") != "InProgress"

    assert wait_for(ended, timeout=timeout, interval=1), f"deleteMachines still running: {seen.get('answer')}"
    return seen["answer"][1]
