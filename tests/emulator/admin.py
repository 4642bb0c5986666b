"""The admin API under /_emulator (HTTPS, no auth): what tests use to look and to steer.

GET  /state            machines, role assignments, nodes, clusters, token counts, request log...;
                       nodes and CSRs with the emulator's bookkeeping keys (_registeredBy,
                       _authenticatedBy) that API answers never carry
POST /faults           append fault rules (see faults.py); DELETE /faults clears them and lets
                       the requests a "hold" rule is holding go on
POST /reset            back to the profile's initial world (tokens and ports survive; files
                       placed with POST /artifacts are forgotten)
GET|POST /settings     read / change runtime settings (see profiles.SETTINGS)
GET|POST /clock        read the modelled world's clock, or {"advance": seconds}: move it ahead (clock.py);
                       tokens expire, operations end and replication delays pass without a sleep
DELETE /clock          back to this machine's time (a reset does it too)
POST /himds/bind       {"machine_id": ...}: this host's HIMDS now serves that machine's identity
POST /himds/unbind     forget it (the machine, if any, turns Disconnected as its heartbeat stops)
POST /clusters         {"name", "resource_group", ["subscription", "kubernetes_version", "location",
                        "azure_rbac", "local_accounts"]}: add a cluster with its own apiserver
POST /clusters/upgrade {"cluster_id", "kubernetes_version"}: the control plane moves to that version
                       (`az aks upgrade --control-plane-only`): ARM's kubernetesVersion and /version
POST /resourcegroups   {"name", ["subscription", "location"]}
POST /agentpools       {"cluster_id", "name", ["type", "mode", "max_pods", "labels", "taints"]}: add an
                       agent pool (type FlexNodes or VirtualMachineScaleSets)
POST /agentpools/upgrade  {"cluster_id", "pool", "version"}: `az aks nodepool upgrade` as the RP runs it
                       (pool_operations.py): the pool's Machines one after the other, written, drained,
                       their Nodes deleted, awaited back at the version -> {"operation": id}
POST /agentpools/rollback {"cluster_id", "pool"}: `az aks nodepool rollback`: each Machine's spec from
                       before the last upgrade, the same way -> {"operation": id}
GET  /agentpools/operations/<id>  {"id", "kind", "pool_id", "version", "status" (InProgress, Succeeded,
                       Failed), "machines": {name: phase}, "error": null or {"code", "message", "machine"}}
POST /tokens           {"principal_id", "audience", ["lifetime"]}: mint a token directly
POST /kube/objects     {"cluster_id", "object"}: put a Pod, PodDisruptionBudget or DaemonSet into that
                       cluster's apiserver stand-in as the controllers would have left it (kube_pods.py);
                       the same name again replaces it (e.g. a budget's status, to free an eviction)
DELETE /requests       clear the request log
POST /artifacts        {"name", "path"}: the mirror serves the file at `path` (on this machine) as
                       `name`, with its .sha256, instead of a generated stand-in (tests/bench.py's
                       real-size artifact)
GET  /throttling       ARM throttling (throttling.py): figures, bucket levels, 429 count and the
                       ledger of subscription-level ARM calls (`?since=N`: from entry N on; the
                       answer's `next` is where the following call should start)
DELETE /throttling     refill every bucket and clear the ledger (figures unchanged)
"""


from tests.emulator import clock, constants as c
from tests.emulator import agentpools, cluster_pki, faults, kube_pods, pool_operations, profiles, throttling
from tests.emulator.httpbase import HttpError, Response


def _bad(message, status=400):
    return HttpError(Response.json(status, {"error": message}))


def _object(req):
    body = req.json(required=False)
    if not isinstance(body, dict):
        raise _bad(f"expected a JSON object, got {type(body).__name__}")
    return body


def snapshot(app):
    state = app.state
    with state.lock:
        agentpools.settle(state)
        d = state.data
        tokens = list(d["tokens"].values())
        by_audience, by_source = {}, {}
        for t in tokens:
            by_audience[t["audience"]] = by_audience.get(t["audience"], 0) + 1
            by_source[t["source"]] = by_source.get(t["source"], 0) + 1
        clusters = []
        for cl in d["clusters"].values():
            info = {k: v for k, v in cl.items() if k not in ("admin", "pki")}  # no keys shown
            info["ca"] = cluster_pki.ca_pem_of(app, cl).decode()
            info["certificate_rotations"] = cluster_pki.rotation_of(cl)
            info["apiserver"] = app.apiserver_url(cl["id"])
            info["nodes"] = sorted(d["nodes"].get(cl["id"].lower(), {}))
            clusters.append(info)
        return {
            "profile": d["profile"],
            "settings": dict(d["settings"]),
            "clusters": clusters,
            "resource_groups": sorted(rg["id"] for rg in d["resource_groups"].values()),
            "principals": [{k: v for k, v in p.items() if k != "secret"} for p in d["principals"].values()],
            "machines": [dict(m) for m in d["machines"].values()],
            "role_assignments": [dict(a) for a in d["role_assignments"].values()],
            "nodes": {cl["name"]: list(d["nodes"].get(cl["id"].lower(), {}).values()) for cl in d["clusters"].values()},
            "csrs": {cl["name"]: list(d.get("csrs", {}).get(cl["id"].lower(), {}).values())
                     for cl in d["clusters"].values()},
            "tokens": {"issued": len(tokens), "by_audience": by_audience, "by_source": by_source},
            "himds": {"bound_machine": d["himds"]["bound_machine"], "challenges": d["himds"]["challenges"],
                      "tokens_issued": d["himds"]["tokens_issued"], "outstanding_keys": len(d["himds"]["keys"]),
                      "key_dir": app.himds_key_dir},
            "operations": list(d["operations"].values()),
            "agent_pools": [dict(p) for p in d["agent_pools"].values()],
            "agentpool_machines": {key: [dict(m) for m in machines.values()]
                                   for key, machines in d["agentpool_machines"].items()},
            "agentpool_operations": list(d["agentpool_operations"].values()),
            "pool_operations": list(d["pool_operations"].values()),
            # Bootstrap tokens without their secrets (state.json, 0600, has them).
            "bootstrap_tokens": {key: [{k: v for k, v in t.items() if k != "token_secret"} for t in toks.values()]
                                 for key, toks in d["bootstrap_tokens"].items()},
            "kube_objects": d.get("kube_objects", {}),
            "providers": dict(d["providers"]),
            "api_versions": dict(d.get("api_versions", {})),
            "faults": list(d["faults"]),
            "fault_hits": d["fault_hits"],
            "artifact_downloads": list(d["artifact_downloads"]),
            "requests": list(d["requests"]),
        }


def handle(app, req):
    state = app.state
    route = "/".join(req.lower[1:])
    method = req.method
    if route == "state" and method == "GET":
        return Response.json(200, snapshot(app))
    if route == "faults":
        if method == "GET":
            return Response.json(200, state.data["faults"])
        if method == "DELETE":
            state.data["faults"].clear()
            state.mark_dirty()
            app.release_holds()
            return Response.json(200, [])
        if method == "POST":
            try:
                rules = faults.validate(req.json())
            except faults.FaultError as e:
                raise _bad(str(e))
            state.data["faults"].extend(rules)
            state.mark_dirty()
            return Response.json(200, state.data["faults"])
    if route == "reset" and method == "POST":
        clock.rewind()
        state.reset()
        app.mirror.forget_placed()
        app.release_holds()
        return Response.json(200, {"reset": True, "profile": state.profile})
    if route == "settings":
        if method == "POST":
            try:
                changes = profiles.validate_settings(_object(req))
            except profiles.SettingsError as e:
                raise _bad(str(e))
            state.settings.update(changes)
            state.mark_dirty()
        return Response.json(200, state.settings)
    if route == "clock":
        if method == "DELETE":
            clock.rewind()
        if method == "POST":
            try:
                clock.advance(_object(req).get("advance"))
            except ValueError as e:
                raise _bad(str(e))
        return Response.json(200, {"now": clock.now(), "offset": clock.offset()})
    if route == "himds/bind" and method == "POST":
        machine_id = _object(req).get("machine_id")
        if not isinstance(machine_id, str) or machine_id.lower() not in state.data["machines"]:
            raise _bad(f"machine_id = {machine_id!r}: expected the resource ID of an existing Arc machine", 404)
        state.data["himds"]["bound_machine"] = state.data["machines"][machine_id.lower()]["id"]
        state.mark_dirty()
        return Response.json(200, {"bound_machine": state.data["himds"]["bound_machine"]})
    if route == "himds/unbind" and method == "POST":
        bound = state.data["himds"]["bound_machine"]
        machine = state.data["machines"].get((bound or "").lower())
        if machine and machine["status"] != "Disconnected":
            machine["status"], machine["last_status_change"] = "Disconnected", clock.now()
        state.data["himds"]["bound_machine"] = None
        state.mark_dirty()
        return Response.json(200, {"bound_machine": None, "was": bound})
    if route == "clusters" and method == "POST":
        return _add_cluster(app, _object(req))
    if route == "clusters/upgrade" and method == "POST":
        return _upgrade_control_plane(state, _object(req))
    if route == "artifacts" and method == "POST":
        body = _object(req)
        name, path = body.get("name"), body.get("path")
        if not isinstance(name, str) or not name or "/" in name or name.endswith(".sha256"):
            raise _bad(f"name = {name!r}: expected an artifact file name (no '/', not a .sha256)")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except (OSError, TypeError) as e:
            raise _bad(f"path = {path!r}: expected a readable file ({e})")
        app.mirror.place(name, data)
        return Response.json(201, {"name": name, "bytes": len(data)})
    if route == "agentpools" and method == "POST":
        return _add_agent_pool(app, _object(req))
    if route in ("agentpools/upgrade", "agentpools/rollback") and method == "POST":
        return _pool_operation(state, route.split("/")[1], _object(req))
    if route.startswith("agentpools/operations/") and len(req.segments) == 4 and method == "GET":
        agentpools.settle(state)
        op = state.data["pool_operations"].get(req.segments[3])
        if op is None:
            raise _bad(f"operation = {req.segments[3]!r}: no such pool operation", 404)
        return Response.json(200, pool_operations.view(op))
    if route == "resourcegroups" and method == "POST":
        body = _object(req)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"name = {name!r}: expected a resource group name")
        rid = state.add_resource_group(body.get("subscription", c.SUBSCRIPTION_ID), name,
                                       body.get("location", c.LOCATION))
        return Response.json(201, {"id": rid})
    if route == "tokens" and method == "POST":
        body = _object(req)
        principal, audience = body.get("principal_id"), body.get("audience")
        lifetime = body.get("lifetime", 3600)
        problems = []
        if not isinstance(principal, str) or not principal:
            problems.append(f"principal_id = {principal!r}: expected a principal object ID")
        if not isinstance(audience, str) or not audience:
            problems.append(f"audience = {audience!r}: expected an audience such as {c.AKS_SERVER_APP_ID!r}")
        if not isinstance(lifetime, (int, float)) or isinstance(lifetime, bool):
            problems.append(f"lifetime = {lifetime!r}: expected seconds (may be negative for an expired token)")
        if problems:
            raise _bad("; ".join(problems))
        token, record = state.mint_token(principal, audience, lifetime, "admin")
        return Response.json(200, {"access_token": token, "expires_on": record["expires_on"]})
    if route == "throttling" and method == "GET":
        try:
            since = int(req.q("since") or 0)
        except ValueError:
            raise _bad(f"since = {req.q('since')!r}: expected a ledger index (an integer)")
        return Response.json(200, throttling.snapshot(state, since))
    if route == "throttling" and method == "DELETE":
        throttling.reset(state)
        state.mark_dirty()
        return Response.json(200, throttling.snapshot(state))
    if route == "kube/objects" and method == "POST":
        body = _object(req)
        cl = state.cluster(body.get("cluster_id") if isinstance(body.get("cluster_id"), str) else None)
        if cl is None:
            raise _bad(f"cluster_id = {body.get('cluster_id')!r}: expected the resource ID of an existing cluster")
        try:
            return Response.json(201, kube_pods.put_object(app, cl, body.get("object")))
        except ValueError as e:
            raise _bad(str(e))
    if route == "requests" and method == "DELETE":
        state.data["requests"].clear()
        return Response.json(200, [])
    raise _bad(f"no admin endpoint {method} {req.path}", 404)


def _add_cluster(app, body):
    state = app.state
    problems = []
    name, rg = body.get("name"), body.get("resource_group")
    for key, value in (("name", name), ("resource_group", rg)):
        if not isinstance(value, str) or not value:
            problems.append(f"{key} = {value!r}: expected a non-empty string")
    version = body.get("kubernetes_version", c.K8S_VERSION)
    if not isinstance(version, str) or len(version.split(".")) != 3:
        problems.append(f"kubernetes_version = {version!r}: expected MAJOR.MINOR.PATCH such as {c.K8S_VERSION!r}")
    unknown = set(body) - {"name", "resource_group", "subscription", "kubernetes_version", "location",
                           "azure_rbac", "local_accounts"}
    for key in sorted(unknown):
        problems.append(f"{key}: unknown key")
    if problems:
        raise _bad("; ".join(problems))
    sub = body.get("subscription", c.SUBSCRIPTION_ID)
    state.data["subscriptions"].setdefault(sub.lower(), {"id": sub})
    cl = state.add_cluster(subscription=sub, resource_group=rg, name=name,
                           location=body.get("location", c.LOCATION), kubernetes_version=version,
                           azure_rbac=body.get("azure_rbac", True), local_accounts=body.get("local_accounts", True))
    url = app.ensure_apiserver(cl["id"])
    return Response.json(201, {"id": cl["id"], "apiserver": url})


def _upgrade_control_plane(state, body):
    """`az aks upgrade --control-plane-only`: the cluster's kubernetesVersion (ARM) and its API
    server's /version move to `kubernetes_version`. As AKS: no downgrade, and no minor version
    skipped (Learn, "Upgrade an Azure Kubernetes Service (AKS) cluster": "Kubernetes minor
    versions can't be skipped")."""
    cl = state.cluster(body.get("cluster_id") if isinstance(body.get("cluster_id"), str) else None)
    if cl is None:
        raise _bad(f"cluster_id = {body.get('cluster_id')!r}: expected the resource ID of an existing cluster")
    version = body.get("kubernetes_version")
    parts = version.split(".") if isinstance(version, str) else []
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise _bad(f"kubernetes_version = {version!r}: expected MAJOR.MINOR.PATCH such as '1.31.2'")
    old = tuple(int(p) for p in cl["kubernetes_version"].split("."))
    new = tuple(int(p) for p in parts)
    if new < old or new[0] != old[0] or new[1] - old[1] > 1:
        raise _bad(f"kubernetes_version = {version!r}: the control plane runs {cl['kubernetes_version']}; "
                   "an upgrade goes to a newer version of the same or the next minor")
    cl["kubernetes_version"] = version
    state.mark_dirty()
    return Response.json(200, {"id": cl["id"], "kubernetes_version": version})


def _add_agent_pool(app, body):
    state = app.state
    problems = []
    cid, name = body.get("cluster_id"), body.get("name")
    if not isinstance(cid, str) or state.cluster(cid) is None:
        problems.append(f"cluster_id = {cid!r}: expected the resource ID of an existing cluster")
    if not isinstance(name, str) or not agentpools.POOL_NAME.match(name):
        problems.append(f"name = {name!r}: expected an agent pool name ^[a-z][a-z0-9]{{0,11}}$")
    kind = body.get("type", agentpools.FLEX)
    if kind not in (agentpools.FLEX, "VirtualMachineScaleSets"):
        problems.append(f"type = {kind!r}: expected FlexNodes or VirtualMachineScaleSets")
    mode = body.get("mode")
    if mode not in (None, "System", "User"):
        problems.append(f"mode = {mode!r}: expected System or User")
    max_pods = body.get("max_pods", 110)
    if not isinstance(max_pods, int) or isinstance(max_pods, bool) or max_pods < 1:
        problems.append(f"max_pods = {max_pods!r}: expected a positive integer")
    labels, taints = body.get("labels", {}), body.get("taints", [])
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        problems.append(f"labels = {labels!r}: expected an object of string values")
    if not isinstance(taints, list) or not all(isinstance(t, str) and agentpools.TAINT_FORMAT.match(t)
                                               for t in taints):
        problems.append(f"taints = {taints!r}: expected a list of key=value:Effect")
    for key in sorted(set(body) - {"cluster_id", "name", "type", "mode", "max_pods", "labels", "taints"}):
        problems.append(f"{key}: unknown key")
    if problems:
        raise _bad("; ".join(problems))
    pool = state.add_agent_pool(cid, name=name, type=kind, mode=mode, max_pods=max_pods, labels=labels,
                                taints=taints)
    return Response.json(201, {"id": pool["id"]})


def _pool_operation(state, kind, body):
    """Start a pool upgrade or rollback (pool_operations.py): 400 naming every bad field, 409
    while the pool has one in progress."""
    agentpools.settle(state)  # an operation that is due ends before another may start
    wanted = {"cluster_id", "pool", "version"} if kind == "upgrade" else {"cluster_id", "pool"}
    problems = [f"{key}: unknown key" for key in sorted(set(body) - wanted)]
    cid, name = body.get("cluster_id"), body.get("pool")
    cl = state.cluster(cid) if isinstance(cid, str) else None
    if cl is None:
        problems.append(f"cluster_id = {cid!r}: expected the resource ID of an existing cluster")
    pool = state.data["agent_pools"].get(agentpools.pool_id(cl["id"], name).lower()) \
        if cl is not None and isinstance(name, str) else None
    if cl is not None and pool is None:
        problems.append(f"pool = {name!r}: expected the name of an agent pool of {cl['name']}")
    if kind == "upgrade" and not isinstance(body.get("version"), str):
        problems.append(f"version = {body.get('version')!r}: expected MAJOR.MINOR.PATCH such as '1.31.2'")
    if problems:
        raise _bad("; ".join(problems))
    try:
        op = (pool_operations.upgrade(state, pool, body["version"]) if kind == "upgrade"
              else pool_operations.rollback(state, pool))
    except pool_operations.Refused as e:
        raise _bad(str(e), e.status)
    return Response.json(202, {"operation": op["id"]})
