"""Events on the kube-apiserver stand-in, in core/v1 and events.k8s.io/v1 over one store, as the
real server keeps one storage for both (pkg/registry/core/event; events.k8s.io/v1 is a
conversion, pkg/apis/events/v1/conversion.go). What a kubelet records (client-go's
tools/record for core/v1, tools/events for events.k8s.io/v1).

Served: POST and GET (list, all namespaces or one; get by name) in both groups. Stored in the
core/v1 shape. Creation checks (pkg/apis/core/validation/events.go ValidateEventCreate), the
part this stand-in enforces: metadata.name (or generateName), involvedObject/regarding, and
for events.k8s.io/v1 eventTime, reportingController, reportingInstance, action and reason
(422 Invalid otherwise). No TTL: events stay until reset.

A list takes a fieldSelector on the fields the real registry makes selectable
(pkg/registry/core/event/strategy.go ToSelectableFields), in their core/v1 names: `kubectl
describe node` lists a Node's events with involvedObject.kind, .name and .uid (twice: once
with the Node's uid, once with its name, which the kubelet uses as uid).
"""

import copy
import secrets
import uuid

from tests.emulator.httpbase import Response
from tests.emulator.kubeauth import status
from tests.emulator.state import iso_seconds
from tests.emulator import clock, kube_select

EVENTS_GROUP = "events.k8s.io"
# events.k8s.io/v1 field -> core/v1 field; the others have the same name in both.
_RENAMED = {"regarding": "involvedObject", "note": "message", "deprecatedSource": "source",
            "deprecatedFirstTimestamp": "firstTimestamp", "deprecatedLastTimestamp": "lastTimestamp",
            "deprecatedCount": "count", "reportingController": "reportingComponent"}
EVENT_FIELDS = ("metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
                "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
                "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
                "source", "type")
_SAME = ("eventTime", "series", "action", "reason", "related", "reportingInstance", "type")


def to_events_v1(event):
    out = {"kind": "Event", "apiVersion": f"{EVENTS_GROUP}/v1", "metadata": copy.deepcopy(event["metadata"])}
    for new, old in _RENAMED.items():
        if event.get(old) not in (None, "", {}):
            out[new] = copy.deepcopy(event[old])
    for key in _SAME:
        if event.get(key) not in (None, ""):
            out[key] = copy.deepcopy(event[key])
    # eventTime is a required MicroTime (not a pointer): a core event without one shows it as null.
    out.setdefault("eventTime", None)
    return out


def to_core(event):
    out = {"kind": "Event", "apiVersion": "v1", "metadata": copy.deepcopy(event.get("metadata") or {})}
    for new, old in _RENAMED.items():
        if new in event:
            out[old] = copy.deepcopy(event[new])
    for key in _SAME:
        if key in event:
            out[key] = copy.deepcopy(event[key])
    out.setdefault("involvedObject", {})
    return out


def _invalid(name, problems):
    return status(422, "Invalid", f'Event "{name}" is invalid: ' + (problems[0] if len(problems) == 1 else
                                                                   "[" + ", ".join(problems) + "]"),
                  {"name": name, "kind": "Event",
                   "causes": [{"reason": "FieldValueRequired", "message": p, "field": p.split(":", 1)[0]}
                              for p in problems]})


def create(app, cl, info, req):
    try:
        body = req.json()
    except Exception:
        body = None
    if not isinstance(body, dict):
        raise status(400, "BadRequest", "the request body is not a JSON Event")
    v1 = info.group == EVENTS_GROUP
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    name = meta.get("name") or (f'{meta["generateName"]}{secrets.token_hex(3)[:5]}' if meta.get("generateName")
                                else "")
    problems = [] if name else ["metadata.name: Required value: name or generateName is required"]
    if meta.get("namespace") not in (None, info.namespace):
        raise status(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                                        "sent on the request")
    if v1:
        for key in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
            if not body.get(key):
                problems.append(f"{key}: Required value")
        if not body.get("regarding"):
            problems.append("regarding: Required value")
    elif not body.get("involvedObject"):
        problems.append("involvedObject: Required value")
    if problems:
        raise _invalid(name, problems)
    event = to_core(body) if v1 else {**copy.deepcopy(body), "kind": "Event", "apiVersion": "v1"}
    store = app.state.kube_objects(cl["id"], "events")
    key = f"{info.namespace}/{name}"
    if key in store:
        raise status(409, "AlreadyExists", f'events "{name}" already exists',
                     {"name": name, "kind": "events", **({"group": EVENTS_GROUP} if v1 else {})})
    event["metadata"].update(name=name, namespace=info.namespace, uid=str(uuid.uuid4()),
                             creationTimestamp=iso_seconds(clock.now()),
                             resourceVersion=app.state.next_resource_version())
    store[key] = event
    app.state.mark_dirty()
    return Response.json(201, to_events_v1(event) if v1 else event)


def _selectable(event):
    """The event with its selectable fields as the registry computes them: `source` is
    source.component."""
    return {**event, "source": (event.get("source") or {}).get("component", "")}


def read(app, cl, info, req):
    store = app.state.kube_objects(cl["id"], "events")
    v1 = info.group == EVENTS_GROUP
    if info.verb == "get":
        event = store.get(f"{info.namespace}/{info.name}")
        if event is None:
            qualified = f"events.{EVENTS_GROUP}" if v1 else "events"
            raise status(404, "NotFound", f'{qualified} "{info.name}" not found',
                         {"name": info.name, "kind": "events", **({"group": EVENTS_GROUP} if v1 else {})})
        return Response.json(200, to_events_v1(event) if v1 else event)
    fields = kube_select.parse_fields(req.q("fieldSelector"), EVENT_FIELDS)
    items = [e for _, e in sorted(store.items())
             if (not info.namespace or e["metadata"]["namespace"] == info.namespace)
             and kube_select.fields_match(fields, _selectable(e))]
    return Response.json(200, {"kind": "EventList", "apiVersion": f"{EVENTS_GROUP}/v1" if v1 else "v1",
                               "metadata": {"resourceVersion": str(app.state.data["resource_version"])},
                               "items": [to_events_v1(e) for e in items] if v1 else items})
