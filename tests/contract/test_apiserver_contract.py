"""The kube-apiserver stand-in's answers against the Kubernetes v1.32.0 API schemas.

Like the ARM contract tests: raw HTTPS (no client library forgives a wrong shape here), each
answer validated against the schema of the kind it claims, strictly (a property the schema does
not declare fails too), and errors checked as metav1.Status with the reason and code the API
conventions give each status (https://github.com/kubernetes/community/blob/master/contributors/
devel/sig-architecture/api-conventions.md#http-status-codes). Schemas: tests/data/k8s-openapi/
(its README names the source and the trimming).
"""

import base64
import datetime
import json
import os
import re

import pytest
import yaml

from tests.emulator import constants as C

SCHEMAS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "k8s-openapi", "v1.32.0-definitions.json")
with open(SCHEMAS) as _f:
    DEFS = json.load(_f)["$defs"]
CORE, META, POLICY = "io.k8s.api.core.v1.", "io.k8s.apimachinery.pkg.apis.meta.v1.", "io.k8s.api.policy.v1."
_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}
_INT_RANGE = {"int32": 2 ** 31, "int64": 2 ** 63}


def validate(schema, value, where="$"):
    """Problems with `value` against a JSON Schema of DEFS (the subset these schemas use)."""
    if "$ref" in schema:
        return validate(DEFS[schema["$ref"].split("/")[-1]], value, where)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            passing = [s for s in schema[key] if not validate(s, value, where)]
            if not passing or (key == "oneOf" and len(passing) > 1):
                return [f"{where}: {value!r} matches {len(passing)} of the {key} schemas"]
            return []
    errors = []
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types or []
    if value is None:
        return [] if not types or "null" in types else [f"{where}: null is not allowed"]
    if types and not any(isinstance(value, _TYPES[t]) and not (t in ("integer", "number") and isinstance(value, bool))
                         for t in types if t != "null"):
        return [f"{where}: expected {types}, got {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    fmt = schema.get("format")
    if fmt == "date-time" and isinstance(value, str):
        try:
            # RFC 3339; MicroTime (eventTime) carries microseconds.
            datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ" if "." in value else "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            errors.append(f"{where}: {value!r} is not an RFC 3339 date-time")
    if fmt in _INT_RANGE and isinstance(value, int) and not -_INT_RANGE[fmt] <= value < _INT_RANGE[fmt]:
        errors.append(f"{where}: {value} is out of {fmt}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{where}: required property {name!r} is missing")
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            if name in props:
                errors += validate(props[name], item, f"{where}.{name}")
            elif isinstance(extra, dict):
                errors += validate(extra, item, f"{where}.{name}")
            elif props or extra is False:
                errors.append(f"{where}: property {name!r} is not declared in the schema")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(schema["items"], item, f"{where}[{i}]")
    return errors


def check(kind, body):
    assert validate({"$ref": f"#/$defs/{kind}"}, body) == [], json.dumps(body)[:2000]


def check_status(body, code, reason):
    check(f"{META}Status", body)
    assert body["status"] == "Failure" and body["code"] == code and body["reason"] == reason, body


@pytest.fixture
def kube(fresh_emulator):
    """Raw calls to aks-one's apiserver as the cluster admin (listClusterAdminCredential's token)."""
    emu = fresh_emulator
    status, _, creds = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01")
    token = yaml.safe_load(base64.b64decode(creds["kubeconfigs"][0]["value"]))["users"][0]["user"]["token"]

    def call(method, path, body=None, content_type="application/json", token=token, accept="application/json"):
        headers = {"Content-Type": content_type, "Accept": accept}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        status, _, payload = emu.http(method, f"{emu.apiserver}{path}", body, headers)
        return status, payload
    return call


def put(emu, obj):
    return emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": obj})


def pod(name, node="n1", labels=None):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": labels or {"app": "web"}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "pause"}]}}


def test_discovery_documents(kube):
    status, body = kube("GET", "/version")
    assert status == 200
    check("io.k8s.apimachinery.pkg.version.Info", body)
    status, body = kube("GET", "/api")
    assert status == 200
    check(f"{META}APIVersions", body)
    status, groups = kube("GET", "/apis")
    assert status == 200
    check(f"{META}APIGroupList", groups)
    served = {g["name"] for g in groups["groups"]}
    assert {"authorization.k8s.io", "policy", "events.k8s.io", "certificates.k8s.io", "apps"} <= served
    status, core = kube("GET", "/api/v1")
    check(f"{META}APIResourceList", core)
    eviction = next(r for r in core["resources"] if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"]) == ("policy", "v1", "Eviction")
    for group in groups["groups"]:
        status, body = kube("GET", f"/apis/{group['name']}")
        assert status == 200
        check(f"{META}APIGroup", body)
        status, body = kube("GET", f"/apis/{group['preferredVersion']['groupVersion']}")
        assert status == 200
        check(f"{META}APIResourceList", body)
    status, body = kube("GET", "/apis/batch/v1")
    check_status(body, 404, "NotFound")


def test_nodes_get_list_and_both_patch_types(kube):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"team": "a"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    status, created = kube("POST", "/api/v1/nodes", node)
    assert status == 201
    check(f"{CORE}Node", created)
    status, body = kube("PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}},
                        "application/strategic-merge-patch+json")
    assert status == 200 and body["spec"]["unschedulable"] is True
    check(f"{CORE}Node", body)
    status, body = kube("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"team": None, "tier": "edge"}}},
                        "application/merge-patch+json")
    assert status == 200 and body["metadata"]["labels"] == {"tier": "edge"}
    check(f"{CORE}Node", body)
    for query in ("labelSelector=tier%3Dedge", "fieldSelector=metadata.name%3Dn1", "labelSelector=tier+in+(edge,x)"):
        status, listing = kube("GET", f"/api/v1/nodes?{query}")
        assert status == 200 and [n["metadata"]["name"] for n in listing["items"]] == ["n1"], query
        check(f"{CORE}NodeList", listing)
    status, listing = kube("GET", "/api/v1/nodes?labelSelector=tier%3Dcore")
    assert listing["items"] == []

    # Errors: 415 for an unknown patch type, 409 for a stale resourceVersion, 404, 422.
    status, body = kube("PATCH", "/api/v1/nodes/n1", {"spec": {}}, "application/yaml")
    check_status(body, 415, "UnsupportedMediaType")
    status, body = kube("PATCH", "/api/v1/nodes/n1", {"metadata": {"resourceVersion": "1"}, "spec": {}},
                        "application/merge-patch+json")
    check_status(body, 409, "Conflict")
    status, body = kube("GET", "/api/v1/nodes/nope")
    check_status(body, 404, "NotFound")
    assert body["details"] == {"name": "nope", "kind": "nodes"}
    status, body = kube("POST", "/api/v1/nodes", {"metadata": {"name": "Not_Valid"}})
    check_status(body, 422, "Invalid")


def test_pods_by_node_eviction_and_budgets(fresh_emulator, kube):
    emu = fresh_emulator
    put(emu, pod("web-1"))
    put(emu, pod("web-2", node="n2"))
    put(emu, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
              "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
    status, listing = kube("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")
    assert status == 200 and [p["metadata"]["name"] for p in listing["items"]] == ["web-1"]
    check(f"{CORE}PodList", listing)
    status, body = kube("GET", "/api/v1/namespaces/default/pods/web-1")
    check(f"{CORE}Pod", body)
    status, body = kube("GET", "/api/v1/pods?fieldSelector=spec.hostIP%3Dx")
    check_status(body, 400, "BadRequest")

    # The budget (computed from the two running pods: minAvailable 2) allows no disruption.
    status, budgets = kube("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets")
    check(f"{POLICY}PodDisruptionBudgetList", budgets)
    assert budgets["items"][0]["status"]["disruptionsAllowed"] == 0
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1", "namespace": "default"}}
    check(f"{POLICY}Eviction", eviction)
    status, body = kube("POST", "/api/v1/namespaces/default/pods/web-1/eviction", eviction)
    check_status(body, 429, "TooManyRequests")
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "The disruption budget web needs 2 healthy pods and has 2 currently" == body["details"]["causes"][0]["message"]

    put(emu, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    status, body = kube("POST", "/api/v1/namespaces/default/pods/web-1/eviction", eviction)
    assert status == 201 and body["status"] == "Success"
    check(f"{META}Status", body)
    status, budget = kube("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")
    check(f"{POLICY}PodDisruptionBudget", budget)
    assert budget["status"]["disruptionsAllowed"] == 0 and "web-1" in budget["status"]["disruptedPods"]
    status, body = kube("GET", "/api/v1/namespaces/default/pods/web-1")
    check_status(body, 404, "NotFound")
    status, body = kube("POST", "/api/v1/namespaces/default/pods/web-2/eviction",
                        {**eviction, "metadata": {"name": "other"}})
    check_status(body, 400, "BadRequest")
    status, body = kube("DELETE", "/api/v1/namespaces/default/pods/web-2")
    assert status == 200
    check(f"{CORE}Pod", body)


def test_daemonsets_read(fresh_emulator, kube):
    put(fresh_emulator, {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
                         "spec": {"selector": {"matchLabels": {"app": "agent"}},
                                  "template": {"metadata": {"labels": {"app": "agent"}},
                                               "spec": {"containers": [{"name": "a", "image": "x"}]}}}})
    status, body = kube("GET", "/apis/apps/v1/namespaces/default/daemonsets/agent")
    assert status == 200
    check("io.k8s.api.apps.v1.DaemonSet", body)
    status, body = kube("GET", "/apis/apps/v1/namespaces/default/daemonsets/gone")
    check_status(body, 404, "NotFound")
    assert body["message"] == 'daemonsets.apps "gone" not found'


@pytest.mark.parametrize("who", ["admin", "no-role"])
def test_self_subject_access_review(fresh_emulator, kube, who):
    token = None if who == "admin" else fresh_emulator.mint_token(C.SP_OBJECT_ID)
    kwargs = {} if who == "admin" else {"token": token}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": "create", "resource": "pods", "subresource": "eviction",
                                              "group": "", "namespace": "default"}}}
    status, body = kube("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review, **kwargs)
    assert status == 201
    check("io.k8s.api.authorization.v1.SelfSubjectAccessReview", body)
    assert body["status"]["allowed"] is (who == "admin")
    # What the review said is what the server does.
    status, answer = kube("POST", "/api/v1/namespaces/default/pods/none/eviction",
                          {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "none"}}, **kwargs)
    if who == "admin":
        check_status(answer, 404, "NotFound")
    else:
        check_status(answer, 403, "Forbidden")
        assert re.match(r'^pods "none" is forbidden: User "[^"]+" cannot create resource "pods/eviction" in API '
                        r'group "" in the namespace "default"', answer["message"]), answer
    status, body = kube("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                        {"kind": "SelfSubjectAccessReview", "spec": {}}, **kwargs)
    check_status(body, 422, "Invalid")


def test_events_core_and_events_k8s_io(kube):
    regarding = {"kind": "Node", "name": "n1", "uid": "n1"}
    status, event = kube("POST", "/api/v1/namespaces/default/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "n1.cordon"}, "involvedObject": regarding,
        "reason": "NodeNotSchedulable", "message": "Node n1 status is now: NodeNotSchedulable", "type": "Normal",
        "source": {"component": "kubelet", "host": "n1"}, "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"})
    assert status == 201
    check(f"{CORE}Event", event)
    status, event = kube("POST", "/apis/events.k8s.io/v1/namespaces/default/events", {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"generateName": "n1."},
        "eventTime": "2026-01-01T00:00:01.000000Z", "reportingController": "kubelet", "reportingInstance": "n1",
        "action": "Drain", "reason": "Evicted", "regarding": regarding, "note": "evicted", "type": "Normal"})
    assert status == 201
    check("io.k8s.api.events.v1.Event", event)
    status, core = kube("GET", "/api/v1/events")
    check(f"{CORE}EventList", core)
    assert sorted(e["reason"] for e in core["items"]) == ["Evicted", "NodeNotSchedulable"]
    status, listing = kube("GET", "/apis/events.k8s.io/v1/namespaces/default/events")
    check("io.k8s.api.events.v1.EventList", listing)
    assert {e.get("note") for e in listing["items"]} == {"evicted", "Node n1 status is now: NodeNotSchedulable"}
    status, body = kube("POST", "/apis/events.k8s.io/v1/namespaces/default/events",
                        {"metadata": {"name": "x"}, "regarding": regarding})
    check_status(body, 422, "Invalid")
