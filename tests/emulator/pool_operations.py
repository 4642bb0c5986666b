"""The AKS resource provider's side of a FlexNodes pool's upgrade and rollback, Machine by
Machine, and the drain it does to a Node (also deleteMachines', agentpools.py).

The sources:
- Azure/AKSFlexNode docs/design/agent-and-aks.md ("Upgrade Flow", "Rollback"): the RP writes
  the Machine's settings (a new eTag: the settings version), cordons and drains the Node, then
  deletes the Kubernetes Node as the signal; the agent applies the settings and the kubelet
  registers the Node again; "AKS RP observes the node becoming Ready". Rollback is an upgrade
  whose target is the previous settings.
- The preview spec (Azure/azure-rest-api-specs specification/containerservice/resource-manager/
  Microsoft.ContainerService/aks/preview/2026-05-02-preview/managedClusters.json):
  ManagedClusterAgentPoolProfileProperties.orchestratorVersion ("The node pool version cannot
  be greater than the control plane version", same major), AgentPoolUpgradeSettings
  .drainTimeoutInMinutes (evictions honour budgets; past it "the upgrade fails"; default 30
  minutes: the `pool_drain_timeout` setting) and undrainableNodeBehavior "Schedule" ("AKS will
  mark the blocked nodes schedulable, but the blocked nodes are not upgraded").
- Learn "Roll back node pool version" (https://learn.microsoft.com/azure/aks/roll-back-node-pool-version):
  "Only version changes", no concurrent operations during a rollback, "only available within
  7 days after the upgrade completes", no consecutive rollbacks.

Progress needs no thread: `advance` runs from agentpools.settle, which every ARM and apiserver
request (and /_emulator/state) calls under the state lock, and moves each operation as far as
the world lets it. One Machine at a time, by name (assumption: AKS's FlexNodes surge is
undocumented; one at a time is maxSurge 0 / maxUnavailable 1). Its phases:
  Pending -> Draining (written, cordoned, evicting) -> WaitingForNode (Node deleted)
          -> Succeeded (its Node back, Ready, kubelet v<version>) | Failed
A Machine without a Node is written and Succeeded at once; one deleted meanwhile is Skipped.
"""

import copy
import uuid

from tests.emulator import clock, kube_pods
from tests.emulator.httpbase import HttpError

ROLLBACK_WINDOW = 7 * 86400  # Learn: "only available within 7 days after the upgrade completes"


class Refused(ValueError):
    """An upgrade or rollback the RP refuses: `status` 400 (bad request) or 409 (busy)."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


# -- versions -----------------------------------------------------------------------------


def _triple(version):
    parts = version.split(".") if isinstance(version, str) else []
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def kubelet_version(node):
    """The version a Node's kubelet runs ("1.31.2"), from status.nodeInfo.kubeletVersion, or None."""
    reported = ((node or {}).get("status") or {}).get("nodeInfo", {}).get("kubeletVersion")
    if not isinstance(reported, str) or not reported:
        return None
    return reported[1:] if reported.startswith("v") else reported


def runs(node, wanted):
    """Does the Node's kubelet run `wanted` (<major.minor.patch> exactly, <major.minor> any patch)?"""
    running = kubelet_version(node)
    if running is None or not wanted:
        return False
    return running == wanted or (wanted.count(".") == 1 and running.startswith(wanted + "."))


def is_ready(node):
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# -- what the RP does to a Node -------------------------------------------------------------


def cordon(state, node, unschedulable=True):
    spec = node.setdefault("spec", {})
    if unschedulable:
        spec["unschedulable"] = True
    else:
        spec.pop("unschedulable", None)
    node["metadata"]["resourceVersion"] = state.next_resource_version()


def drain(state, cluster_id, node_name):
    """One pass of the RP's drain: evict every pod `kubectl drain` would (kube_pods.evict_pod,
    budgets honoured); returns {"namespace/name": why it is still there} for those refused."""
    blocked = {}
    for key in kube_pods.drainable_pods(state, cluster_id, node_name):
        namespace, name = key.split("/", 1)
        try:
            kube_pods.evict_pod(state, cluster_id, namespace, name)
        except HttpError as e:
            if e.response.status != 404:
                blocked[key] = f"eviction answered {e.response.status}"
    return blocked


# -- starting an operation ------------------------------------------------------------------


def running_on(state, pool):
    """The pool's upgrade or rollback in progress, or None."""
    for op in state.data["pool_operations"].values():
        if op["pool_id"].lower() == pool["id"].lower() and op["status"] == "InProgress":
            return op
    return None


def _machines_of(state, pool):
    return state.data["agentpool_machines"].setdefault(pool["id"].lower(), {})


def _new_operation(state, pool, kind, version, names):
    op_id = str(uuid.uuid4())
    now = clock.now()
    op = {"id": op_id, "kind": kind, "pool_id": pool["id"], "cluster_id": pool["cluster_id"],
          "version": version, "status": "InProgress", "order": list(names),
          "machines": {name: "Pending" for name in names}, "current": None, "since": now,
          "error": None, "start": now, "end": None}
    state.data["pool_operations"][op_id] = op
    state.mark_dirty()
    return op


def upgrade(state, pool, version):
    """`az aks nodepool upgrade --kubernetes-version <version>`: the pool's orchestratorVersion
    moves now, its Machines one after the other (advance)."""
    if running_on(state, pool):
        raise Refused(f"agent pool {pool['name']!r} has an operation in progress", 409)
    cluster = state.cluster(pool["cluster_id"])
    new, old, plane = _triple(version), _triple(pool["orchestrator_version"]), _triple(cluster["kubernetes_version"])
    if new is None:
        raise Refused(f"version = {version!r}: expected MAJOR.MINOR.PATCH such as '1.31.2'")
    if new <= old or new[0] != old[0]:
        raise Refused(f"version = {version!r}: the pool runs {pool['orchestrator_version']}; an upgrade goes to a "
                      "newer version of the same major")
    if new > plane:
        raise Refused(f"version = {version!r}: the control plane runs {cluster['kubernetes_version']}, and a node "
                      "pool's version cannot be greater than the control plane's (upgrade it first: "
                      "POST /_emulator/clusters/upgrade)")
    op = _new_operation(state, pool, "upgrade", version, sorted(_machines_of(state, pool)))
    pool["last_upgrade"] = {"operation": op["id"], "version": pool["orchestrator_version"], "specs": {},
                            "ended": None, "rolled_back": False}
    pool["orchestrator_version"] = version
    advance(state)
    return op


def rollback(state, pool):
    """`az aks nodepool rollback`: every Machine the last upgrade wrote gets its spec from
    before it back (a spec write: a new eTag), and the pool its previous version."""
    last = pool.get("last_upgrade")
    if running_on(state, pool):
        raise Refused(f"agent pool {pool['name']!r} has an operation in progress", 409)
    if last is None:
        raise Refused(f"agent pool {pool['name']!r} has no upgrade to roll back")
    if last["rolled_back"]:
        raise Refused(f"agent pool {pool['name']!r}: its last upgrade was rolled back already (no consecutive "
                      "rollbacks)")
    if clock.now() - last["ended"] > ROLLBACK_WINDOW:
        raise Refused(f"agent pool {pool['name']!r}: its last upgrade ended more than 7 days ago")
    machines = _machines_of(state, pool)
    op = _new_operation(state, pool, "rollback", last["version"], sorted(n for n in last["specs"] if n in machines))
    last["rolled_back"] = True
    pool["orchestrator_version"] = last["version"]
    advance(state)
    return op


# -- progress -------------------------------------------------------------------------------


def advance(state):
    """Move every operation in progress as far as the world lets it (from agentpools.settle)."""
    for op in list(state.data["pool_operations"].values()):
        if op["status"] == "InProgress":
            _advance(state, op)


def _advance(state, op):
    pool = state.data["agent_pools"].get(op["pool_id"].lower())
    machines = state.data["agentpool_machines"].get(op["pool_id"].lower(), {})
    nodes = state.data["nodes"].setdefault(op["cluster_id"].lower(), {})
    while op["status"] == "InProgress":
        name = op["current"]
        if name is None:
            pending = [n for n in op["order"] if op["machines"][n] == "Pending"]
            if not pending:
                _finish(state, op, pool)
                return
            _begin(state, op, pool, pending[0], machines, nodes)
            continue
        record = machines.get(name)
        if record is None:  # deleted meanwhile (deleteMachines)
            _set(state, op, name, "Skipped")
            continue
        node = nodes.get(record["node_name"])
        now = clock.now()
        phase = op["machines"][name]
        if phase == "Draining":
            blocked = drain(state, op["cluster_id"], record["node_name"]) if node else {}
            if not blocked:
                if node is not None:
                    del nodes[record["node_name"]]  # the signal: the agent may act
                    state.mark_dirty()
                _set(state, op, name, "WaitingForNode")
                continue
            if now - op["since"] < state.settings["pool_drain_timeout"]:
                return
            cordon(state, node, unschedulable=False)  # undrainableNodeBehavior Schedule
            _fail(state, op, record, "DrainTimeout",
                  f"machine {name!r}: its Node could not be drained within {state.settings['pool_drain_timeout']:g} s: "
                  + ", ".join(f"{pod} ({why})" for pod, why in sorted(blocked.items())))
            return
        # WaitingForNode: back, Ready, at the wanted version
        wanted = _wanted_version(op, record)
        if node is not None and is_ready(node) and runs(node, wanted):
            record["provisioning_state"] = "Succeeded"
            _set(state, op, name, "Succeeded")
            continue
        if now - op["since"] < state.settings["pool_node_timeout"]:
            return
        seen = ("no Node" if node is None else
                f"Node Ready={is_ready(node)}, kubelet {kubelet_version(node) or 'unknown'}")
        _fail(state, op, record, "NodeNotReady",
              f"machine {name!r}: its Node did not come back Ready at v{wanted} within "
              f"{state.settings['pool_node_timeout']:g} s ({seen})")
        return


def _wanted_version(op, record):
    return (record["spec"].get("kubernetes") or {}).get("orchestratorVersion") or op["version"]


def _begin(state, op, pool, name, machines, nodes):
    """Write the Machine's new settings (always a new eTag: the RP's write is an update), then
    cordon its Node; a Machine without a Node is done at once."""
    op["current"] = name
    record = machines.get(name)
    if record is None:
        _set(state, op, name, "Skipped")
        return
    if op["kind"] == "upgrade":
        pool["last_upgrade"]["specs"][name] = copy.deepcopy(record["spec"])
        spec = copy.deepcopy(record["spec"])
        spec.setdefault("kubernetes", {})["orchestratorVersion"] = op["version"]
    else:
        spec = copy.deepcopy(pool["last_upgrade"]["specs"][name])
    record["spec"], record["etag"], record["updated"] = spec, str(uuid.uuid4()), clock.now()
    record["provisioning_state"], record["pool_operation"] = "Updating", op["id"]
    node = nodes.get(record["node_name"])
    if node is None:
        record["provisioning_state"] = "Succeeded"
        _set(state, op, name, "Succeeded")
        return
    cordon(state, node)
    _set(state, op, name, "Draining")


def _set(state, op, name, phase):
    op["machines"][name] = phase
    op["since"] = clock.now()
    if phase in ("Succeeded", "Skipped", "Failed"):
        op["current"] = None
    state.mark_dirty()


def _fail(state, op, record, code, message):
    record["provisioning_state"] = "Failed"
    _set(state, op, record["name"], "Failed")
    op["status"], op["end"] = "Failed", clock.now()
    op["error"] = {"code": code, "message": message, "machine": record["name"]}
    _ended(state, op)


def _finish(state, op, pool):
    op["status"], op["end"] = "Succeeded", clock.now()
    if pool is not None:
        pool["current_orchestrator_version"] = pool["orchestrator_version"]
    _ended(state, op)


def _ended(state, op):
    pool = state.data["agent_pools"].get(op["pool_id"].lower())
    last = pool and pool.get("last_upgrade")
    if last and last["operation"] == op["id"]:
        last["ended"] = op["end"]
    state.mark_dirty()


def machine_busy(state, record):
    """Is the Machine inside a pool operation in progress (its provisioningState is the RP's)?"""
    op = state.data["pool_operations"].get(record.get("pool_operation") or "")
    return op is not None and op["status"] == "InProgress" and op["current"] == record["name"]


def view(op):
    """The admin API's answer for an operation."""
    return {"id": op["id"], "kind": op["kind"], "pool_id": op["pool_id"], "version": op["version"],
            "status": op["status"], "machines": dict(op["machines"]), "error": op["error"]}
