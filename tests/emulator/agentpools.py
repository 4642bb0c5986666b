"""Microsoft.ContainerService/managedClusters/{cluster}/agentPools: pools, FlexNodes bootstrap
data and Machines.

Wire shapes follow the preview spec 2026-05-02-preview (Azure/azure-rest-api-specs
specification/containerservice/resource-manager/Microsoft.ContainerService/aks/preview/
2026-05-02-preview/managedClusters.json and its examples AgentPoolsListBootstrapData.json,
MachineCreate_Update.json, MachineList.json):

  GET  .../agentPools[/{pool}]                    AgentPools_List / AgentPools_Get
  POST .../agentPools/{pool}/listBootstrapData    body {} (required) -> 200 PoolBootstrapData
  GET  .../agentPools/{pool}/machines[/{name}]    Machines_List (paged) / Machines_Get
  PUT  .../agentPools/{pool}/machines/{name}      201 create / 200 update, Azure-AsyncOperation
  POST .../agentPools/{pool}/deleteMachines       {"machineNames": [...]} -> 202 LRO
  GET  .../agentPools/{pool}/operations/{id}      OperationStatusResult_GetByAgentPool

What the RP does that the spec leaves open, and what the emulator chooses (each marked
"assumption" where it is used): the answer on a pool that is not FlexNodes, unknown machine
names in deleteMachines, the error for an api-version without these operations, who may poll
an operation, the bootstrap token's lifetime and groups. The deletion itself follows upstream's
description of the RP (Azure/AKSFlexNode docs/design/agent-and-aks.md, "Reset And Delete Flow"
and "Failure Handling"; pkg/daemon/repave_reconciler.go): the Node is cordoned, tainted
kubernetes.azure.com/flex-node-deleting=true:NoSchedule and drained, then the Machine goes; the
Node stays for the agent, which confirms the Machine's 404, cleans its host and deletes its Node
where it may. The RP's fallback ("fallback cleanup for stale, NotReady nodes", "delayed enough
to avoid racing a healthy but slow agent") deletes a tainted Node whose Machine is gone once no
status write has reached it for `stale_node_grace` seconds of the emulator's clock (assumption:
the apiserver stand-in has no node lifecycle controller to turn it NotReady, so the kubelet's
silence is the NotReady; the delay is not documented).

Pool upgrades and rollbacks (the RP writing each Machine, draining and deleting its Node) are
pool_operations.py's; the pool's orchestratorVersion is its own (state.add_agent_pool).

The apiserver stand-in reads what listBootstrapData mints (state.data["bootstrap_tokens"]) and
may call `find_machine` (the CSR approver's "Machine <node> exists"); `settle` runs on every
ARM and apiserver request (server.py) and moves what is due: Machine operations, pool upgrades
and rollbacks, the stale-Node fallback.
"""

import base64
import copy
import re
import secrets
import string
import urllib.parse
import uuid

from tests.emulator import arm, clock, cluster_pki, pool_operations
from tests.emulator import constants as c
from tests.emulator.httpbase import Response
from tests.emulator.state import iso

_CS = "Microsoft.ContainerService/managedClusters"
POOL_TYPE = f"{_CS}/agentPools"
MACHINE_TYPE = f"{POOL_TYPE}/machines"
FLEX = "FlexNodes"

# api-versions that have listBootstrapData, Machines PUT and deleteMachines: 2026-05-02-preview
# (the stored spec; upstream's DefaultAPIVersion), 2026-06-02-preview (Learn's .NET reference of
# ContainerServiceAgentPoolResource.GetBootstrapData names it as the default), 2026-08-02-preview
# (azure-mgmt-containerservice 41.9.0b1's default, which has agent_pools.list_bootstrap_data).
FLEX_API_VERSIONS = ("2026-05-02-preview", "2026-06-02-preview", "2026-08-02-preview")

# Component versions listBootstrapData hands out besides Kubernetes (the pool's): the values
# of the spec example AgentPoolsListBootstrapData.json. The artifact mirror serves any version.
CONTAINERD_VERSION = "2.0.4"
RUNC_VERSION = "1.2.1"
CNI_VERSION = "1.4.1"

# The RP's deletion taint (Azure/AKSFlexNode pkg/daemon/repave_reconciler.go).
DELETING_TAINT = {"key": "kubernetes.azure.com/flex-node-deleting", "value": "true", "effect": "NoSchedule"}
# The group upstream's self-minted tokens carry (Azure/AKSFlexNode scripts/aks-flex-config); the
# groups of the RP's tokens are undocumented (assumption: the same).
BOOTSTRAP_GROUP = "system:bootstrappers:aks-flex-node"

POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
_MACHINE_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$|^[a-zA-Z0-9][-_a-zA-Z0-9]{0,39}$")  # spec machineName
_K8S_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")  # <major.minor> or <major.minor.patch> (the spec's text)
TAINT_FORMAT = re.compile(r"^[^=:\s]+(=[^:\s]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$")
_TOKEN_CHARS = string.ascii_lowercase + string.digits
# Machine properties the RP computes: dropped from a PUT body (clients send back what they GOT).
_READ_ONLY = ("provisioningState", "eTag", "status", "nodeImageVersion", "resourceId")
_READ_ONLY_K8S = ("currentOrchestratorVersion", "nodeName")


# -- lookups shared with other modules ----------------------------------------------------


def pool_id(cluster_id, name):
    return f"{cluster_id}/agentPools/{name}"


def find_machine(state, cluster_id, name):
    """The Machine record named `name` (as the node name) in any pool of the cluster, or None."""
    prefix = f"{cluster_id.lower()}/agentpools/"
    for key, machines in state.data["agentpool_machines"].items():
        if key.startswith(prefix) and name in machines:
            return machines[name]
    return None


def settle(state):
    """Move what is due: Machine operations whose time has come (a deleteMachines once its
    Nodes are drained), pool upgrades and rollbacks, the RP's stale-Node fallback."""
    now = clock.now()
    for op in state.data["agentpool_operations"].values():
        if op["status"] != "InProgress":
            continue
        machines = state.data["agentpool_machines"].get(op["pool_id"].lower(), {})
        if op["kind"] == "delete" and not _drained(state, op, machines, now):
            continue
        if now < op["done_at"]:
            continue
        op["status"], op["end"] = "Succeeded", now
        for name in op["machines"]:
            record = machines.get(name)
            if record is None:
                continue
            if op["kind"] == "delete":
                del machines[name]  # the Machine only: its Node is the agent's to delete
            elif record["operation"] == op["id"]:
                record["provisioning_state"] = "Succeeded"
        state.mark_dirty()
    pool_operations.advance(state)
    _clean_stale_nodes(state, now)


def _drained(state, op, machines, now):
    """One drain pass over a deleteMachines' Nodes: True when none holds an evictable pod.
    Past `pool_drain_timeout` the operation fails and the Machines stay (assumption: the
    spec's drainTimeoutInMinutes is written for upgrades; the RP's delete is not documented)."""
    blocked = {}
    for name in op["machines"]:
        record = machines.get(name)
        nodes = state.data["nodes"].get(record["cluster_id"].lower(), {}) if record else {}
        if record is not None and record["node_name"] in nodes:
            blocked.update(pool_operations.drain(state, record["cluster_id"], record["node_name"]))
    if not blocked:
        return True
    if now - op["start"] >= state.settings["pool_drain_timeout"]:
        op["status"], op["end"] = "Failed", now
        op["error"] = {"code": "DrainTimeout",
                       "message": f"the Nodes of {', '.join(op['machines'])} could not be drained within "
                                  f"{state.settings['pool_drain_timeout']:g} s: "
                                  + ", ".join(f"{pod} ({why})" for pod, why in sorted(blocked.items()))}
        for name in op["machines"]:
            if name in machines:
                machines[name]["provisioning_state"] = "Failed"
        state.mark_dirty()
    return False


def _clean_stale_nodes(state, now):
    """The RP's fallback: a Node tainted for deletion whose Machine is gone goes once its
    kubelet has been silent (no status write) for `stale_node_grace` seconds."""
    grace = state.settings["stale_node_grace"]
    for cluster_key, nodes in state.data["nodes"].items():
        for name, node in list(nodes.items()):
            taints = (node.get("spec") or {}).get("taints") or []
            if not any(t.get("key") == DELETING_TAINT["key"] for t in taints):
                continue
            if find_machine(state, cluster_key, name) is not None:
                continue
            if "_statusAt" not in node:  # a Node saved before the emulator kept the time
                node["_statusAt"] = now
                state.mark_dirty()
            if now - node["_statusAt"] >= grace:
                del nodes[name]
                state.mark_dirty()


# -- rendering ----------------------------------------------------------------------------


def pool_properties(state, pool):
    """ManagedClusterAgentPoolProfileProperties of a pool (also the cluster's agentPoolProfiles)."""
    props = {"type": pool["type"], "mode": pool["mode"], "maxPods": pool["max_pods"],
             "orchestratorVersion": pool["orchestrator_version"],
             "currentOrchestratorVersion": pool["current_orchestrator_version"],
             "provisioningState": "Succeeded", "powerState": {"code": "Running"}}
    if pool["type"] != FLEX:
        # VMSS-only fields: a FlexNodes pool has no VMs (upstream rejects them on create:
        # Azure/AKSFlexNode docs/usage/getting-started.md).
        props.update(count=1, vmSize="Standard_D2s_v5", osDiskSizeGB=128, osType="Linux", osSKU="Ubuntu")
    if pool["labels"]:
        props["nodeLabels"] = dict(pool["labels"])
    if pool["taints"]:
        props["nodeTaints"] = list(pool["taints"])
    return props


def render_pool(state, pool):
    return {"id": pool["id"], "name": pool["name"], "type": POOL_TYPE,
            "properties": {**pool_properties(state, pool), "eTag": pool["etag"]}}


def _current_version(cluster_version, wanted):
    """currentOrchestratorVersion: <major.minor> resolves to a patch (the cluster's when the
    minor matches, else .0); a full version stays as given (the spec's description)."""
    if not wanted:
        return cluster_version
    if wanted.count(".") == 2:
        return wanted
    return cluster_version if cluster_version.startswith(wanted + ".") else f"{wanted}.0"


def render_machine(state, record):
    """currentOrchestratorVersion, "the version of Kubernetes running on the machine" (the
    spec): the emulator reads it as the kubelet version its registered Node reports
    (status.nodeInfo.kubeletVersion, without the "v"), and computes it from orchestratorVersion
    while no Node is registered. driftAction is Recreate, with a driftReason, while that Node
    runs another version than the Machine wants (assumption: the spec says only "deviated from
    its expected state ... requiring corrective action"; for a FlexNode the correction is the
    agent's repave)."""
    props = copy.deepcopy(record["spec"])
    kube = props.setdefault("kubernetes", {})
    wanted = kube.get("orchestratorVersion")
    node = state.data["nodes"].get(record["cluster_id"].lower(), {}).get(record["node_name"])
    running = pool_operations.kubelet_version(node)
    kube["currentOrchestratorVersion"] = running or _current_version(
        state.cluster(record["cluster_id"])["kubernetes_version"], wanted)
    kube["nodeName"] = record["node_name"]
    props.setdefault("mode", "User")
    status = {"creationTimestamp": iso(record["created"]), "driftAction": "Synced"}
    if running and wanted and not pool_operations.runs(node, wanted):
        status.update(driftAction="Recreate",
                      driftReason=f"orchestratorVersion {wanted} is wanted; the node runs {running}")
    props.update(provisioningState=record["provisioning_state"], eTag=record["etag"], status=status)
    return {"id": record["id"], "name": record["name"], "type": MACHINE_TYPE, "properties": props}


# -- routing ------------------------------------------------------------------------------


def _not_found(req):
    arm.fail(404, "NotFound", f"No HTTP resource was found that matches the request URI '{req.path}'.")


def _method(req, expected):
    if req.method != expected:
        arm.fail(405, "MethodNotAllowed", f"The HTTP method '{req.method}' is not supported here; use {expected}.")


def _require_flex_api_version(req, operation):
    """Assumption: ARM's InvalidResourceType answer (as arm.py gives for an unknown type) for an
    api-version whose spec lacks the operation; what the RP answers there is undocumented."""
    version = req.q("api-version")
    if version not in FLEX_API_VERSIONS:
        arm.fail(400, "InvalidResourceType",
                 f"The resource type 'managedClusters/agentPools/{operation}' could not be found in the namespace "
                 f"'Microsoft.ContainerService' for api version '{version}'. The supported api-versions are "
                 f"'{', '.join(FLEX_API_VERSIONS)}'.")


def _resource_not_found(rg, what):
    arm.fail(404, "ResourceNotFound",
             f"The Resource '{what}' under resource group '{rg}' was not found. "
             "For more details please go to https://aka.ms/ARMResourceNotFoundFix")


# Path after .../agentPools/{pool} (lower case, "*" a machine name) -> method -> (the name of an
# operation only FLEX_API_VERSIONS have, or None; the action authorized, after .../agentPools/).
_ROUTES = {
    (): {"GET": (None, "read")},
    ("listbootstrapdata",): {"POST": ("listBootstrapData", "listBootstrapData/action")},
    ("machines",): {"GET": (None, "machines/read")},
    ("machines", "*"): {"GET": (None, "machines/read"), "PUT": ("machines", "machines/write")},
    ("deletemachines",): {"POST": ("deleteMachines", "deleteMachines/action")},
}


def handle(app, req, caller, rg, cid, cl, rest):
    """`rest`: the path segments after .../managedClusters/{cluster}/agentPools."""
    state = app.state
    settle(state)
    cluster_name = cid.rsplit("/", 1)[-1]
    if not rest:
        _method(req, "GET")
        arm.authorize(state, caller, cid, f"{POOL_TYPE}/read")
        if cl is None:
            _resource_not_found(rg, f"{_CS}/{cluster_name}")
        items = [render_pool(state, p) for p in state.agent_pools_of(cl["id"])]
        return Response.json(200, arm.paged(req, state, items))

    name, tail = rest[0], [s.lower() for s in rest[1:]]
    pid = pool_id(cl["id"] if cl else cid, name)
    if len(tail) == 2 and tail[0] in ("operations", "operationresults"):
        return _operation(app, req, caller, pid, rest[2], results=tail[0] == "operationresults")
    methods = _ROUTES.get(("machines", "*") if len(tail) == 2 and tail[0] == "machines" else tuple(tail))
    if methods is None:
        _not_found(req)
    if req.method not in methods:
        arm.fail(405, "MethodNotAllowed",
                 f"The HTTP method '{req.method}' is not supported here; use {' or '.join(methods)}.")
    flex_operation, action = methods[req.method]
    if flex_operation:
        _require_flex_api_version(req, flex_operation)
    scope = f"{pid}/machines/{rest[2]}" if len(tail) == 2 else pid
    arm.authorize(state, caller, scope, f"{POOL_TYPE}/{action}")
    if cl is None:
        _resource_not_found(rg, f"{_CS}/{cluster_name}")
    pool = state.data["agent_pools"].get(pid.lower())
    if pool is None:
        _resource_not_found(rg, f"{_CS}/{cl['name']}/agentPools/{name}")

    if not tail:
        return Response.json(200, render_pool(state, pool))
    if tail == ["listbootstrapdata"]:
        return _list_bootstrap_data(app, req, caller, cl, pool)
    if tail == ["deletemachines"]:
        return _delete_machines(app, req, caller, cl, pool)
    machines = state.data["agentpool_machines"].setdefault(pool["id"].lower(), {})
    if tail == ["machines"]:
        items = [render_machine(state, m) for _, m in sorted(machines.items())]
        return Response.json(200, arm.paged(req, state, items))
    machine_name = rest[2]
    if req.method == "PUT":
        return _put_machine(app, req, caller, cl, pool, machine_name)
    record = machines.get(machine_name)
    if record is None:
        _resource_not_found(rg, f"{_CS}/{cl['name']}/agentPools/{pool['name']}/machines/{machine_name}")
    return Response.json(200, render_machine(state, record))


def _require_flex(pool, operation):
    """Assumption: the spec documents these operations only for FlexNodes pools and says nothing
    of the others; the emulator refuses them with 400 OperationNotAllowed."""
    if pool["type"] != FLEX:
        arm.fail(400, "OperationNotAllowed",
                 f"{operation} is only supported on agent pools of type '{FLEX}'; agent pool '{pool['name']}' "
                 f"has type '{pool['type']}'.")


# -- listBootstrapData --------------------------------------------------------------------


def cluster_fqdn(app, cl):
    """node.kubelet.clusterFQDN. AKS gives the API server's host name and clients build
    https://<clusterFQDN>:443 (Azure/AKSFlexNode's bootstrap kubeconfig). The stand-in listens on
    127.0.0.1:<ephemeral port>, so by default ("host-port") the emulator answers "127.0.0.1:<port>":
    still a plain string as the spec types it, reachable on loopback, and a client that reads it
    as host[:port] (port 443 when absent) handles both forms. "fqdn" answers the cluster's
    properties.fqdn, host only, exactly as AKS would (unreachable here: for tests of overrides)."""
    if app.state.settings["apiserver_fqdn_mode"] == "fqdn":
        return cl["fqdn"]
    return urllib.parse.urlsplit(app.ensure_apiserver(cl["id"])).netloc


def mint_bootstrap_token(state, cl, pool, principal_id):
    """A Kubernetes bootstrap token (id [a-z0-9]{6}, secret [a-z0-9]{16}: Kubernetes
    "Authenticating with Bootstrap Tokens") in state.data["bootstrap_tokens"]; returns the record."""
    tokens = state.data["bootstrap_tokens"].setdefault(cl["id"].lower(), {})
    token_id = "".join(secrets.choice(_TOKEN_CHARS) for _ in range(6))
    while token_id in tokens:
        token_id = "".join(secrets.choice(_TOKEN_CHARS) for _ in range(6))
    now = clock.now()
    tokens[token_id] = {
        "token_id": token_id,
        "token_secret": "".join(secrets.choice(_TOKEN_CHARS) for _ in range(16)),
        "expiration": now + state.settings["bootstrap_token_ttl"],
        "usage_bootstrap_authentication": True,
        "usage_bootstrap_signing": True,
        "auth_extra_groups": [BOOTSTRAP_GROUP],
        "pool": pool["name"],
        "minted_by": principal_id,
        "created": now,
    }
    state.mark_dirty()
    return tokens[token_id]


def _list_bootstrap_data(app, req, caller, cl, pool):
    state = app.state
    body = req.json()  # ListBootstrapDataRequest is a required (empty) body: none is a 400
    if not isinstance(body, dict):
        arm.fail(400, "InvalidRequestContent", f"The request content must be a JSON object ({{}}), got {body!r}.")
    _require_flex(pool, "listBootstrapData")
    token = mint_bootstrap_token(state, cl, pool, caller.principal_id)
    networking = {"dnsServiceIP": c.DNS_SERVICE_IP, "cniVersion": CNI_VERSION}  # the cluster's networkProfile
    # The secret goes only into this answer and state.json (0600); the request log keeps no
    # bodies (server.py _record), so the token never reaches emulator.log or /_emulator/state.
    return Response.json(200, {
        "azure": {
            "resourceManagerEndpoint": f"{arm.base_url(req)}/",
            "targetCluster": {"resourceId": cl["id"]},
            "targetAgentPoolName": pool["name"],
            "bootstrapToken": {"token": f"{token['token_id']}.{token['token_secret']}"},
        },
        # The pool's version: a node joining after a pool upgrade joins at the pool's.
        "components": {"kubernetes": pool["orchestrator_version"], "containerd": CONTAINERD_VERSION,
                       "runc": RUNC_VERSION},
        "networking": networking,
        "node": {
            "maxPods": pool["max_pods"],
            "labels": dict(pool["labels"]),
            "taints": list(pool["taints"]),
            "kubelet": {"clusterFQDN": cluster_fqdn(app, cl),
                        "caCertData": base64.b64encode(cluster_pki.ca_pem_of(app, cl)).decode()},
        },
    })


# -- Machines -----------------------------------------------------------------------------


def _check_machine_body(body):
    """The writable properties of a Machine PUT body, or a 400 naming every problem."""
    problems = []
    if not isinstance(body, dict):
        arm.fail(400, "InvalidRequestContent", f"The request content must be a JSON object, got {body!r}.")
    props = body.get("properties", {})
    if not isinstance(props, dict):
        arm.fail(400, "InvalidParameter", f"properties = {props!r}: expected an object.")
    spec = {k: copy.deepcopy(v) for k, v in props.items() if k not in _READ_ONLY}
    kube = spec.get("kubernetes", {})
    if not isinstance(kube, dict):
        problems.append(f"properties.kubernetes = {kube!r}: expected an object")
        kube = {}
    for key in _READ_ONLY_K8S:
        kube.pop(key, None)
    version = kube.get("orchestratorVersion")
    if version is not None and not (isinstance(version, str) and _K8S_VERSION.match(version)):
        problems.append(f"properties.kubernetes.orchestratorVersion = {version!r}: expected <major.minor> or "
                        "<major.minor.patch>")
    max_pods = kube.get("maxPods")
    if max_pods is not None and (not isinstance(max_pods, int) or isinstance(max_pods, bool) or max_pods < 1):
        problems.append(f"properties.kubernetes.maxPods = {max_pods!r}: expected a positive integer")
    labels = kube.get("nodeLabels")
    if labels is not None and not (isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())):
        problems.append(f"properties.kubernetes.nodeLabels = {labels!r}: expected an object of string values")
    taints = kube.get("nodeTaints")
    if taints is not None and not (isinstance(taints, list)
                                   and all(isinstance(t, str) and TAINT_FORMAT.match(t) for t in taints)):
        problems.append(f"properties.kubernetes.nodeTaints = {taints!r}: expected a list of key=value:Effect "
                        "(Effect NoSchedule, PreferNoSchedule or NoExecute)")
    tags = spec.get("tags")
    if tags is not None and not (isinstance(tags, dict) and all(isinstance(v, str) for v in tags.values())):
        problems.append(f"properties.tags = {tags!r}: expected an object of string values")
    if problems:
        arm.fail(400, "InvalidParameter", "; ".join(problems) + ".")
    # Stored as rendered (an empty kubernetes profile, mode User: render_machine's defaults),
    # so that a client PUTting back what it GOT changes no writable field and keeps the eTag.
    spec["kubernetes"] = kube
    spec.setdefault("mode", "User")
    return spec


def _etag_value(header):
    value = (header or "").strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')


def _preconditions(req, record):
    """If-Match / If-None-Match (spec parameters of Machines_CreateOrUpdate): 412 when unmet."""
    if_match, if_none_match = req.header("If-Match"), req.header("If-None-Match")
    if if_none_match and _etag_value(if_none_match) == "*" and record is not None:
        arm.fail(412, "PreconditionFailed", "The machine already exists and If-None-Match is '*'.")
    if if_match:
        wanted = _etag_value(if_match)
        if record is None or (wanted != "*" and wanted != record["etag"]):
            arm.fail(412, "PreconditionFailed",
                     f"If-Match '{wanted}' does not match the machine's eTag "
                     f"'{record['etag'] if record else '(no machine)'}'.")


def _start_operation(app, req, caller, pool, kind, names):
    state = app.state
    op_id = str(uuid.uuid4())
    now = clock.now()
    state.data["agentpool_operations"][op_id] = {
        "id": op_id, "kind": kind, "pool_id": pool["id"], "cluster_id": pool["cluster_id"], "machines": list(names),
        "status": "InProgress", "start": now, "done_at": now + state.settings["machine_operation_delay"],
        "end": None, "error": None, "started_by": caller.principal_id}
    state.mark_dirty()
    base, version = f"{arm.base_url(req)}{pool['id']}", urllib.parse.quote(req.q("api-version"))
    headers = {"Azure-AsyncOperation": f"{base}/operations/{op_id}?api-version={version}"}
    if kind == "delete":
        headers["Location"] = f"{base}/operationresults/{op_id}?api-version={version}"
    if state.settings["lro_retry_after"] is not None:
        headers["Retry-After"] = str(state.settings["lro_retry_after"])
    return op_id, headers


def _put_machine(app, req, caller, cl, pool, name):
    state = app.state
    if not _MACHINE_NAME.match(name):
        arm.fail(400, "InvalidParameter",
                 f"machineName = {name!r}: expected ^[a-z][a-z0-9]{{0,11}}$ or ^[a-zA-Z0-9][-_a-zA-Z0-9]{{0,39}}$.")
    spec = _check_machine_body(req.json())
    _require_flex(pool, "Machines_CreateOrUpdate")
    machines = state.data["agentpool_machines"].setdefault(pool["id"].lower(), {})
    record = machines.get(name)
    _preconditions(req, record)
    now = clock.now()
    if record is None:
        record = {"id": f"{pool['id']}/machines/{name}", "name": name, "cluster_id": cl["id"],
                  "pool": pool["name"], "node_name": name, "spec": spec, "etag": str(uuid.uuid4()),
                  "created": now, "updated": now, "created_by": caller.principal_id}
        machines[name] = record
        status, record["provisioning_state"] = 201, "Creating"
    else:
        changed = record["spec"] != spec
        if changed:  # eTag: "changes when the resource is updated" (the spec)
            record["spec"], record["etag"], record["updated"] = spec, str(uuid.uuid4()), now
        status = 200
        if changed or not pool_operations.machine_busy(state, record):
            record["provisioning_state"] = "Updating"
        else:  # a status-only write amid the RP's upgrade: provisioningState stays the RP's
            _, headers = _start_operation(app, req, caller, pool, "put", [name])
            settle(state)
            return Response.json(status, render_machine(state, record), headers)
    record["operation"], headers = _start_operation(app, req, caller, pool, "put", [name])
    settle(state)
    return Response.json(status, render_machine(state, record), headers)


def _delete_machines(app, req, caller, cl, pool):
    state = app.state
    body = req.json()
    names = body.get("machineNames") if isinstance(body, dict) else None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        arm.fail(400, "InvalidParameter", f"machineNames = {names!r}: expected a non-empty list of machine names.")
    machines = state.data["agentpool_machines"].setdefault(pool["id"].lower(), {})
    unknown = [n for n in names if n not in machines]
    if unknown:
        # Assumption (undocumented): all or nothing, a 400 naming the machines the pool lacks.
        arm.fail(400, "InvalidParameter",
                 f"machineNames: no machine {', '.join(repr(n) for n in unknown)} in agent pool '{pool['name']}'.")
    nodes = state.data["nodes"].get(cl["id"].lower(), {})
    for name in dict.fromkeys(names):
        machines[name]["provisioning_state"] = "Deleting"
        node = nodes.get(machines[name]["node_name"])
        if node is not None:  # cordon and taint now; settle drains, and the Machine goes when the operation ends
            taints = node.setdefault("spec", {}).setdefault("taints", [])
            if not any(t.get("key") == DELETING_TAINT["key"] for t in taints):
                taints.append(dict(DELETING_TAINT))
            pool_operations.cordon(state, node)
    _, headers = _start_operation(app, req, caller, pool, "delete", list(dict.fromkeys(names)))
    settle(state)
    return Response.empty(202, headers)


# -- operation status ---------------------------------------------------------------------


def _operation(app, req, caller, pid, op_id, results):
    """The Azure-AsyncOperation status monitor (OperationStatusResult) and the Location URL
    (202 while running, 204 when done: Learn "Track asynchronous Azure operations",
    https://learn.microsoft.com/azure/azure-resource-manager/management/async-operations).
    Assumption (undocumented): the caller that started the operation may poll it; anyone else
    needs agentPools/read on the pool."""
    state = app.state
    _method(req, "GET")
    op = state.data["agentpool_operations"].get(op_id)
    if op is None or op["pool_id"].lower() != pid.lower():
        arm.fail(404, "OperationNotFound", f"The operation '{op_id}' could not be found.")
    if op["started_by"].lower() != caller.principal_id.lower():
        arm.authorize(state, caller, op["pool_id"], f"{POOL_TYPE}/read")
    if results:
        running = op["status"] == "InProgress"
        return Response.empty(202 if running else 204,
                              {"Location": f"{arm.base_url(req)}{req.path}?{req.query_string}"} if running else None)
    target = f"{op['pool_id']}/machines/{op['machines'][0]}" if op["kind"] == "put" else op["pool_id"]
    body = {"id": f"{op['pool_id']}/operations/{op['id']}", "name": op["id"], "status": op["status"],
            "startTime": iso(op["start"]), "resourceId": target}
    if op["end"]:
        body["endTime"] = iso(op["end"])
    if op.get("error"):
        body["error"] = {"code": op["error"]["code"], "message": op["error"]["message"]}
    return Response.json(200, body)
