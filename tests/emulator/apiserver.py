"""A kube-apiserver stand-in: the Node API a kubelet and `aks-flex-node` use, and the
certificates.k8s.io CSR API a kubelet's TLS bootstrap uses (certificates.py).

One HTTPS listener per cluster (so each cluster's kubeconfig points at its own server), same
CA as everything else; client certificates the CA signed are accepted. Who the caller is and
what they may do is kubeauth.py: x509 client certificates, bootstrap tokens, the admin's static
token and Entra tokens for the AKS server application; Azure RBAC for Entra principals, the
Node authorizer and NodeRestriction for system:node:<name>, CSRs only for bootstrap tokens.

A created Node records who created it and how ("_registeredBy": the user name, for an Entra
token the principal's object ID; "_authenticatedBy": x509, bootstrap-token, static-token or
azure-token): emulator bookkeeping, visible in /_emulator/state.
"""

import copy
import json
import re
import time
import uuid

from tests.emulator import certificates, kubeauth
from tests.emulator.httpbase import Response
from tests.emulator.kubeauth import status
from tests.emulator.state import iso_seconds

PUBLIC_PATHS = {"/version", "/readyz", "/livez", "/healthz"}
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Strategic-merge keys for the list fields a kubelet patches (k8s.io/api core/v1 types.go).
_MERGE_KEYS = {"conditions": "type", "addresses": "type"}


def handle(app, server, req):
    state = app.state
    cl = state.cluster(server.cluster_id)
    if cl is None:
        raise status(503, "ServiceUnavailable", f"cluster {server.cluster_id} no longer exists in the emulator")
    user = kubeauth.authenticate(app, cl, req)
    req.detail = {"principal": user.name if user else None, "auth": user.kind if user else None}
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
    if user is None:
        raise kubeauth.unauthorized()

    seg = req.segments
    if seg == ["api"]:
        return Response.json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
    if seg[:1] == ["apis"]:
        found = certificates.discovery(seg)
        if found is not None and req.method == "GET":
            return found
        if seg[1:4] == [certificates.GROUP, certificates.VERSION, certificates.RESOURCE]:
            return certificates.handle(app, cl, user, req, seg)
        raise status(404, "NotFound", "the server could not find the requested resource")
    if seg[:3] != ["api", "v1", "nodes"] or len(seg) > 5 or (len(seg) == 5 and seg[4] != "status"):
        raise status(404, "NotFound", "the server could not find the requested resource")
    nodes = state.data["nodes"].setdefault(cl["id"].lower(), {})
    name = seg[3] if len(seg) >= 4 else None
    resource = "nodes/status" if len(seg) == 5 else "nodes"
    verb = {("GET", False): "list", ("GET", True): "get", ("POST", False): "create", ("DELETE", True): "delete",
            ("PATCH", True): "patch", ("PUT", True): "update"}.get((req.method, name is not None))
    if verb is None:
        raise status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    kubeauth.authorize(app, cl, user, verb, resource, name)

    if verb == "list":
        items = [n for n in nodes.values() if _selected(n, req)]
        return Response.json(200, {"kind": "NodeList", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": str(state.data["resource_version"])},
                                   "items": sorted(items, key=lambda n: n["metadata"]["name"])})
    if verb == "create":
        return _create(app, nodes, req, user)
    node = nodes.get(name)
    if node is None:
        raise status(404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
    if verb == "get":
        return Response.json(200, node)
    if verb == "delete":
        kubeauth.admit_node(user, "delete", name)
        del nodes[name]
        state.mark_dirty()
        return Response.json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                   "details": {"name": name, "kind": "nodes", "uid": node["metadata"]["uid"]}})
    return _modify(app, nodes, node, req, user, status_only=resource == "nodes/status")


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


def _create(app, nodes, req, user):
    node = _body(req)
    name = (node or {}).get("metadata", {}).get("name") if isinstance(node, dict) else None
    if not isinstance(name, str) or not _DNS1123.match(name) or len(name) > 253:
        raise status(422, "Invalid", f'Node "{name}" is invalid: metadata.name: Invalid value: {json.dumps(name)}: '
                                     "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                     "characters, '-' or '.', and must start and end with an alphanumeric character")
    kubeauth.admit_node(user, "create", name, new=node)
    if name in nodes:
        raise status(409, "AlreadyExists", f'nodes "{name}" already exists', {"name": name, "kind": "nodes"})
    node.update(kind="Node", apiVersion="v1")
    meta = node.setdefault("metadata", {})
    meta.update(uid=str(uuid.uuid4()), creationTimestamp=iso_seconds(time.time()),
                resourceVersion=app.state.next_resource_version())
    meta.setdefault("labels", {})
    node.setdefault("spec", {})
    node.setdefault("status", {})
    # Emulator bookkeeping, visible in /_emulator/state.
    node["_registeredBy"] = user.name
    node["_authenticatedBy"] = user.kind
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


def _modify(app, nodes, node, req, user, status_only):
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
    kubeauth.admit_node(user, "update", node["metadata"]["name"], new=result, old=node)
    result["metadata"]["resourceVersion"] = app.state.next_resource_version()
    nodes[node["metadata"]["name"]] = result
    app.state.mark_dirty()
    return Response.json(200, result)
