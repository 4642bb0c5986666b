"""A kube-apiserver stand-in: just the Node API a kubelet and `aks-flex-node` use.

One HTTPS listener per cluster (so each cluster's kubeconfig points at its own server),
same CA as everything else. Authentication: Bearer tokens the emulator minted for the AKS
server application (Azure/kubelogin docs/book/src/concepts/aks.md), the cluster admin's
static token, or the admin client certificate (O=system:masters). Authorization mimics AKS with Azure RBAC: the
token's principal needs AKS RBAC Cluster Admin or the Flex Node Agent role at the cluster
or a parent scope, and only after `rbac_propagation_delay` seconds (Learn: role changes can
take minutes to apply, https://learn.microsoft.com/azure/role-based-access-control/troubleshooting).
"""

import copy
import json
import re
import time
import uuid

from tests.emulator import constants as c
from tests.emulator import roles
from tests.emulator.httpbase import HttpError, Response
from tests.emulator.state import iso_seconds

PUBLIC_PATHS = {"/version", "/readyz", "/livez", "/healthz"}
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Strategic-merge keys for the list fields a kubelet patches (k8s.io/api core/v1 types.go).
_MERGE_KEYS = {"conditions": "type", "addresses": "type"}


def status(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return HttpError(Response.json(code, body))


def _authenticate(app, cl, req):
    """Returns (principal, is_admin); principal None means anonymous."""
    if "system:masters" in req.peer_subject.get("organizationName", []):
        return "masterclient", True
    header = req.header("Authorization") or ""
    if not header:
        return None, False
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        if cl.get("admin") and token == cl["admin"]["token"]:
            return "clusterAdmin", True
        record = app.state.lookup_token(token)
        if record and record["expires_on"] > time.time() and record["audience"] == c.AKS_SERVER_APP_ID:
            return record["principal"], False
    raise status(401, "Unauthorized", "Unauthorized")


def _authorize(app, cl, principal, verb, resource, name=None):
    state = app.state
    if cl["azure_rbac"]:
        now = time.time()
        delay = state.settings["rbac_propagation_delay"]
        for a in roles.assignments_covering(state.data["role_assignments"].values(), principal, cl["id"]):
            if a["role_guid"] in c.APISERVER_ROLES and now - a["created"] >= delay:
                return
    what = f'{resource.split("/")[0]} "{name}"' if name else resource.split("/")[0]
    raise status(403, "Forbidden",
                 f'{what} is forbidden: User "{principal}" cannot {verb} resource "{resource}" in API group "" '
                 "at the cluster scope: User does not have access to the resource in Azure. "
                 "Update role assignment to allow access.",
                 {"name": name, "kind": resource.split("/")[0]} if name else {"kind": resource})


def handle(app, server, req):
    state = app.state
    cl = state.cluster(server.cluster_id)
    if cl is None:
        raise status(503, "ServiceUnavailable", f"cluster {server.cluster_id} no longer exists in the emulator")
    principal, admin = _authenticate(app, cl, req)
    req.detail = {"principal": principal}
    path = req.path
    if path in PUBLIC_PATHS and req.method == "GET":
        if path == "/version":
            v = cl["kubernetes_version"]
            major, minor = v.split(".")[:2]
            return Response.json(200, {"major": major, "minor": minor, "gitVersion": f"v{v}",
                                       "gitCommit": "0" * 40, "gitTreeState": "clean",
                                       "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.22.5",
                                       "compiler": "gc", "platform": "linux/amd64"})
        return Response(200, "ok", content_type="text/plain; charset=utf-8")
    if principal is None:
        raise status(401, "Unauthorized", "Unauthorized")

    seg = req.segments
    if seg == ["api"]:
        return Response.json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
    if seg[:3] != ["api", "v1", "nodes"] or len(seg) > 5 or (len(seg) == 5 and seg[4] != "status"):
        raise status(404, "NotFound", "the server could not find the requested resource")
    nodes = state.data["nodes"].setdefault(cl["id"].lower(), {})
    name = seg[3] if len(seg) >= 4 else None
    resource = "nodes/status" if len(seg) == 5 else "nodes"
    verb = {("GET", False): "list", ("GET", True): "get", ("POST", False): "create", ("DELETE", True): "delete",
            ("PATCH", True): "patch", ("PUT", True): "update"}.get((req.method, name is not None))
    if verb is None:
        raise status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    if not admin:
        _authorize(app, cl, principal, verb, resource, name)

    if verb == "list":
        items = [n for n in nodes.values() if _selected(n, req)]
        return Response.json(200, {"kind": "NodeList", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": str(state.data["resource_version"])},
                                   "items": sorted(items, key=lambda n: n["metadata"]["name"])})
    if verb == "create":
        return _create(app, nodes, req, principal)
    node = nodes.get(name)
    if node is None:
        raise status(404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
    if verb == "get":
        return Response.json(200, node)
    if verb == "delete":
        del nodes[name]
        state.mark_dirty()
        return Response.json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                   "details": {"name": name, "kind": "nodes", "uid": node["metadata"]["uid"]}})
    return _modify(app, nodes, node, req, status_only=resource == "nodes/status")


def _selected(node, req):
    labels = node["metadata"].get("labels", {})
    for clause in filter(None, (req.q("labelSelector") or "").split(",")):
        key, op, value = re.match(r"^([^=!]+)(==|=|!=)?(.*)$", clause).groups()
        if op is None and key not in labels:
            return False
        if op in ("=", "==") and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
    field = req.q("fieldSelector") or ""
    if field.startswith("metadata.name=") and node["metadata"]["name"] != field.split("=", 1)[1]:
        return False
    return True


def _body(req):
    try:
        return json.loads(req.body or b"null")
    except ValueError as e:
        raise status(400, "BadRequest", f"the request body is not valid JSON: {e}")


def _create(app, nodes, req, principal):
    node = _body(req)
    name = (node or {}).get("metadata", {}).get("name") if isinstance(node, dict) else None
    if not isinstance(name, str) or not _DNS1123.match(name) or len(name) > 253:
        raise status(422, "Invalid", f'Node "{name}" is invalid: metadata.name: Invalid value: {json.dumps(name)}: '
                                     "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                     "characters, '-' or '.', and must start and end with an alphanumeric character")
    if name in nodes:
        raise status(409, "AlreadyExists", f'nodes "{name}" already exists', {"name": name, "kind": "nodes"})
    node.update(kind="Node", apiVersion="v1")
    meta = node.setdefault("metadata", {})
    meta.update(uid=str(uuid.uuid4()), creationTimestamp=iso_seconds(time.time()),
                resourceVersion=app.state.next_resource_version())
    meta.setdefault("labels", {})
    node.setdefault("spec", {})
    node.setdefault("status", {})
    node["_registeredBy"] = principal  # emulator bookkeeping, visible in /_emulator/state
    nodes[name] = node
    app.state.mark_dirty()
    return Response.json(201, node)


def _merge(target, patch, strategic):
    """RFC 7386 merge patch; with `strategic`, lists with a known merge key merge by that key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif strategic and key in _MERGE_KEYS and isinstance(value, list) and isinstance(result.get(key), list):
            mk = _MERGE_KEYS[key]
            merged = {item.get(mk): item for item in result[key] if isinstance(item, dict)}
            for item in value:
                if isinstance(item, dict):
                    merged[item.get(mk)] = _merge(merged.get(item.get(mk), {}), item, strategic)
            result[key] = list(merged.values())
        else:
            result[key] = _merge(result.get(key), value, strategic)
    return result


def _json_patch(doc, ops):
    doc = copy.deepcopy(doc)
    for op in ops if isinstance(ops, list) else []:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op.get("path", "").split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1] if parts else None
        if op.get("op") in ("add", "replace"):
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                parent.insert(idx, op["value"]) if op["op"] == "add" else parent.__setitem__(idx, op["value"])
            else:
                parent[last] = op["value"]
        elif op.get("op") == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last, None)
        else:
            raise status(422, "Invalid", f"unsupported JSON patch operation {op.get('op')!r}")
    return doc


def _modify(app, nodes, node, req, status_only):
    content_type = (req.header("Content-Type") or "").split(";")[0].strip()
    patch = _body(req)
    if req.method == "PUT":
        updated = patch if isinstance(patch, dict) else {}
    elif content_type == "application/json-patch+json":
        updated = _json_patch(node, patch)
    elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        updated = _merge(node, patch, strategic=content_type.startswith("application/strategic"))
    else:
        raise status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                                  f"accepted media types include: application/json-patch+json, "
                                                  f"application/merge-patch+json, "
                                                  f"application/strategic-merge-patch+json ({content_type!r} given)")
    result = copy.deepcopy(node)
    if status_only:
        result["status"] = updated.get("status", {})
    else:
        result["spec"] = updated.get("spec", {})
        meta = updated.get("metadata", {})
        for key in ("labels", "annotations"):
            if key in meta:
                result["metadata"][key] = meta[key] or {}
    result["metadata"]["resourceVersion"] = app.state.next_resource_version()
    nodes[node["metadata"]["name"]] = result
    app.state.mark_dirty()
    return Response.json(200, result)
