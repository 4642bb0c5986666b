"""A kube-apiserver stand-in: what a kubelet, `aks-flex-node` and kubectl (get nodes, cordon,
drain, auth can-i) use.

One HTTPS listener per cluster (so each cluster's kubeconfig points at its own server), same
CA as everything else; client certificates the CA signed are accepted. Who the caller is and
what they may do is kubeauth.py: x509 client certificates, bootstrap tokens, the admin's static
token and Entra tokens for the AKS server application; Azure RBAC for Entra principals, the
Node authorizer and NodeRestriction for system:node:<name>, CSRs only for bootstrap tokens.

Routing follows the apiserver's RequestInfo (staging/src/k8s.io/apiserver/pkg/endpoints/request/
requestinfo.go): /api/v1 or /apis/<group>/<version>, then [namespaces/<ns>/]<resource>[/<name>
[/<subresource>]]; GET without a name is list (a fieldSelector metadata.name=<x> names the
object for authorization), DELETE without a name deletecollection. A resource or verb that
discovery (kube_discovery.py) does not list is 404 / 405.

  nodes, nodes/status          here (GET, LIST with selectors or as a Table, POST, PUT, PATCH, DELETE)
  certificatesigningrequests   certificates.py
  pods, pods/eviction, poddisruptionbudgets, daemonsets   kube_pods.py
  events (core/v1 and events.k8s.io/v1)                   kube_events.py
  selfsubjectaccessreviews     kube_reviews.py

A created Node records who created it and how ("_registeredBy": the user name, for an Entra
token the principal's object ID; "_authenticatedBy": x509, bootstrap-token, static-token or
azure-token) and when its status was last written ("_statusAt", the emulator's clock: at
registration and on every nodes/status write, the kubelet's heartbeat): emulator bookkeeping,
visible in /_emulator/state and never in API answers.
"""

import copy
import json
import re
import uuid
from dataclasses import dataclass

from tests.emulator import (certificates, kube_discovery, kube_events, kube_pods, kube_protobuf, kube_reviews,
                            kube_select, kube_table, kubeauth)
from tests.emulator.httpbase import Response
from tests.emulator.kubeauth import status
from tests.emulator.state import iso_seconds
from tests.emulator import clock

PUBLIC_PATHS = {"/version", "/readyz", "/livez", "/healthz"}
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Strategic-merge keys for the list fields a kubelet patches (k8s.io/api core/v1 types.go).
_MERGE_KEYS = {"conditions": "type", "addresses": "type"}
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
NODE_FIELDS = ("metadata.name", "spec.unschedulable")


@dataclass
class RequestInfo:
    group: str
    version: str
    namespace: str
    resource: str
    name: str
    subresource: str
    verb: str


def public(obj):
    """An object as the API shows it: without the emulator's bookkeeping keys ("_registeredBy"...),
    which stay in /_emulator/state."""
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def _not_found():
    return status(404, "NotFound", "the server could not find the requested resource")


def request_info(req):
    """The RequestInfo of a resource path, or None for a path that is not one."""
    seg = req.segments
    if seg[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", seg[2:]
    elif seg[:1] == ["apis"] and len(seg) >= 4:
        group, version, rest = seg[1], seg[2], seg[3:]
    else:
        return None
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    verb = _VERBS.get(req.method)
    if verb == "get" and not name:
        verb = "watch" if req.q("watch") in ("1", "true") else "list"
    elif verb == "delete" and not name:
        verb = "deletecollection"
    return RequestInfo(group, version, namespace, resource, name, sub, verb)


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
    if req.method == "GET":
        found = kube_discovery.answer(seg, f"127.0.0.1:{server.port}")
        if found is not None:
            return found
    info = request_info(req)
    if info is None:
        raise _not_found()
    if (info.group, info.resource) == (certificates.GROUP, certificates.RESOURCE) and info.version == "v1":
        if info.namespace:
            raise _not_found()
        return certificates.handle(app, cl, user, req, seg)
    entry = kube_discovery.served(info.group, info.version,
                                  f"{info.resource}/{info.subresource}" if info.subresource else info.resource)
    if entry is None or (info.namespace and not entry["namespaced"]) or \
            (entry["namespaced"] and not info.namespace and info.verb != "list"):
        raise _not_found()
    if info.verb == "watch":
        raise status(405, "MethodNotAllowed", "the emulator's apiserver does not serve watches: poll with GET")
    if info.verb not in entry["verbs"]:
        raise status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    field_selector = req.q("fieldSelector") or ""
    name = info.name or (kubeauth.field_equals(field_selector, "metadata.name") or "" if info.verb == "list" else "")
    kubeauth.check(app, cl, user, kubeauth.Attributes(
        info.verb, info.resource, info.subresource, info.group, info.namespace, name, field_selector))

    if (req.header("Content-Type") or "").split(";")[0].strip() == kube_protobuf.CONTENT_TYPE:
        try:
            req.body = json.dumps(kube_protobuf.decode(req.body or b"")).encode()
        except (ValueError, IndexError) as e:
            raise status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                                      f"accepted media types include: application/json ({e})")
    if info.resource == "nodes":
        return _nodes(app, cl, user, req, info)
    if info.resource == "selfsubjectaccessreviews":
        return kube_reviews.create(app, cl, user, req)
    if info.resource == "events":
        return kube_events.create(app, cl, info, req) if info.verb == "create" else kube_events.read(app, cl, info, req)
    if info.subresource == "eviction":
        return kube_pods.evict(app, cl, info, req, user)
    if info.verb == "list":
        return kube_pods.list_objects(app, cl, info, req)
    if info.verb == "get":
        return kube_pods.get_object(app, cl, info)
    return kube_pods.delete_pod(app, cl, info, user)


def _nodes(app, cl, user, req, info):
    state = app.state
    nodes = state.data["nodes"].setdefault(cl["id"].lower(), {})
    name = info.name
    if info.verb == "list":
        items = [n for n in nodes.values() if _selected(n, req)]
        items = sorted(items, key=lambda n: n["metadata"]["name"])
        if kube_table.wants_table(req):
            return kube_table.nodes(items, str(state.data["resource_version"]))
        return Response.json(200, {"kind": "NodeList", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": str(state.data["resource_version"])},
                                   "items": [public(n) for n in items]})
    if info.verb == "create":
        return _create(app, nodes, req, user)
    node = nodes.get(name)
    if node is None:
        raise status(404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
    if info.verb == "get":
        return Response.json(200, public(node))
    if info.verb == "delete":
        kubeauth.admit_node(user, "delete", name)
        del nodes[name]
        state.mark_dirty()
        return Response.json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                   "details": {"name": name, "kind": "nodes", "uid": node["metadata"]["uid"]}})
    return _modify(app, nodes, node, req, user, status_only=info.subresource == "status")


def _selected(node, req):
    labels = kube_select.parse_labels(req.q("labelSelector"))
    fields = kube_select.parse_fields(req.q("fieldSelector"), NODE_FIELDS)
    return kube_select.matches(labels, node["metadata"].get("labels")) and kube_select.fields_match(fields, node)


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
    meta.update(uid=str(uuid.uuid4()), creationTimestamp=iso_seconds(clock.now()),
                resourceVersion=app.state.next_resource_version())
    meta.setdefault("labels", {})
    node.setdefault("spec", {})
    node.setdefault("status", {})
    # Emulator bookkeeping, visible in /_emulator/state.
    node["_registeredBy"] = user.name
    node["_authenticatedBy"] = user.kind
    node["_statusAt"] = clock.now()
    nodes[name] = node
    app.state.mark_dirty()
    return Response.json(201, public(node))


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
    # A resourceVersion in the body is a precondition (optimistic concurrency, API conventions
    # "Concurrency Control and Consistency"): a stale one is 409 Conflict.
    sent = ((patch if isinstance(patch, dict) else {}).get("metadata") or {}).get("resourceVersion")
    if sent and sent != node["metadata"].get("resourceVersion"):
        name = node["metadata"]["name"]
        raise status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                                      "modified; please apply your changes to the latest version and try again",
                     {"name": name, "kind": "nodes"})
    result = copy.deepcopy(node)
    if status_only:
        result["status"] = updated.get("status", {})
        # When its kubelet last reported (emulator clock): the RP's stale-Node fallback reads
        # it (pool_operations.py). Bookkeeping, like _registeredBy.
        result["_statusAt"] = clock.now()
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
    return Response.json(200, public(result))
