"""Pods, the Eviction subresource, PodDisruptionBudgets and DaemonSets on the kube-apiserver stand-in:
what `kubectl drain` uses (k8s.io/kubectl/pkg/drain).

No scheduler, no kubelet running pods, no controllers: tests put objects in through the admin
API (`POST /_emulator/kube/objects`, `put_object`) as they would be after the controllers ran:
pods bound to a node (spec.nodeName), owned by a DaemonSet or a ReplicaSet (ownerReferences), or
mirror pods (annotation kubernetes.io/config.mirror); budgets with the status the disruption
controller would have written (given, or computed here from the matching pods when absent).

Served:
  GET    /api/v1/pods, /api/v1/namespaces/NS/pods       labelSelector, fieldSelector (metadata.name,
                                                        metadata.namespace, spec.nodeName, status.phase)
  GET    /api/v1/namespaces/NS/pods/NAME
  DELETE /api/v1/namespaces/NS/pods/NAME                the pod goes at once (no kubelet to wait for)
                                                        and the answer is the deleted Pod
  POST   /api/v1/namespaces/NS/pods/NAME/eviction      policy/v1 Eviction
  GET    /apis/policy/v1/[namespaces/NS/]poddisruptionbudgets[/NAME]
  GET    /apis/apps/v1/[namespaces/NS/]daemonsets[/NAME]
LIST ignores `limit` and never returns `continue` (allowed: a server may return everything).

Eviction (pkg/registry/core/pod/storage/eviction.go): the Eviction's name must be the pod's
(400); a pod that is not running (Pending, Succeeded, Failed) goes without consulting budgets;
more than one matching budget is a 500; a matching budget with status.disruptionsAllowed 0 is
429 TooManyRequests "Cannot evict pod as it would violate the pod's disruption budget." with a
cause of type DisruptionBudget naming the budget; otherwise the budget's disruptionsAllowed is
decremented, the pod recorded in status.disruptedPods, the pod deleted, and the answer is
201 with a Success Status. Not modelled: the disruption controller's later recount,
status.observedGeneration checks, unhealthyPodEvictionPolicy, deleteOptions preconditions.
"""

import copy
import uuid

from tests.emulator import clock, kube_select
from tests.emulator.httpbase import Response
from tests.emulator.kubeauth import status
from tests.emulator.state import iso_seconds

POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")
GENERIC_FIELDS = ("metadata.name", "metadata.namespace")
KINDS = {  # kind -> (resource, apiVersion)
    "Pod": ("pods", "v1"),
    "PodDisruptionBudget": ("poddisruptionbudgets", "policy/v1"),
    "DaemonSet": ("daemonsets", "apps/v1"),
}
_GROUP = {"pods": "", "poddisruptionbudgets": "policy", "daemonsets": "apps"}
_LIST_KIND = {"pods": "PodList", "poddisruptionbudgets": "PodDisruptionBudgetList", "daemonsets": "DaemonSetList"}


def not_found(resource, name):
    group = _GROUP.get(resource, "")
    qualified = f"{resource}.{group}" if group else resource
    details = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return status(404, "NotFound", f'{qualified} "{name}" not found', details)


def list_objects(app, cl, info, req):
    objects = app.state.kube_objects(cl["id"], info.resource)
    labels = kube_select.parse_labels(req.q("labelSelector"))
    fields = kube_select.parse_fields(req.q("fieldSelector"),
                                      POD_FIELDS if info.resource == "pods" else GENERIC_FIELDS)
    items = [o for key, o in sorted(objects.items())
             if (not info.namespace or o["metadata"]["namespace"] == info.namespace)
             and kube_select.matches(labels, o["metadata"].get("labels"))
             and kube_select.fields_match(fields, o)]
    if info.resource == "poddisruptionbudgets":
        items = [_with_status(app.state, cl["id"], o) for o in items]
    _, api_version = next(v for k, v in KINDS.items() if v[0] == info.resource)
    return Response.json(200, {"kind": _LIST_KIND[info.resource], "apiVersion": api_version,
                               "metadata": {"resourceVersion": str(app.state.data["resource_version"])},
                               "items": items})


def get_object(app, cl, info):
    obj = app.state.kube_objects(cl["id"], info.resource).get(f"{info.namespace}/{info.name}")
    if obj is None:
        raise not_found(info.resource, info.name)
    if info.resource == "poddisruptionbudgets":
        obj = _with_status(app.state, cl["id"], obj)
    return Response.json(200, obj)


def delete_pod(app, cl, info, user):
    pods = app.state.kube_objects(cl["id"], "pods")
    pod = pods.get(f"{info.namespace}/{info.name}")
    if pod is None:
        raise not_found("pods", info.name)
    _admit_node_pod(user, pod, "delete")
    del pods[f"{info.namespace}/{info.name}"]
    app.state.mark_dirty()
    return Response.json(200, pod)


def _admit_node_pod(user, pod, operation):
    """NodeRestriction (plugin/pkg/admission/noderestriction/admission.go): a node deletes and
    evicts only pods bound to itself."""
    node = user.node_name
    if node is None or (pod.get("spec") or {}).get("nodeName") == node:
        return
    name = pod["metadata"]["name"]
    # admitPodEviction formats the node with %s, admitPod's delete branch with %q.
    who = f"node {node} can only evict" if operation == "evict" else f'node "{node}" can only delete'
    raise status(403, "Forbidden", f'pods "{name}" is forbidden: {who} pods with spec.nodeName set to itself',
                 {"name": name, "kind": "pods"})


def evict(app, cl, info, req, user):
    pods = app.state.kube_objects(cl["id"], "pods")
    try:
        body = req.json()
    except Exception:
        body = None
    if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
        raise status(400, "BadRequest", "the request body is not a policy/v1 Eviction")
    meta = body.get("metadata") or {}
    if meta.get("name") != info.name:
        raise status(400, "BadRequest", "name in URL does not match name in Eviction object")
    pod = pods.get(f"{info.namespace}/{info.name}")
    if pod is None:
        raise not_found("pods", info.name)
    _admit_node_pod(user, pod, "evict")
    evict_pod(app.state, cl["id"], info.namespace, info.name)
    return Response.json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})


def evict_pod(state, cluster_id, namespace, name):
    """The Eviction subresource's decision for one pod (the apiserver's and the AKS RP's drain,
    pool_operations.py): the pod goes, or an HttpError (404, 429 a budget refuses, 500 more than
    one budget) and nothing changes."""
    pods = state.kube_objects(cluster_id, "pods")
    key = f"{namespace}/{name}"
    pod = pods.get(key)
    if pod is None:
        raise not_found("pods", name)
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Pending", "Succeeded", "Failed"):
        budgets = [b for b in state.kube_objects(cluster_id, "poddisruptionbudgets").values()
                   if b["metadata"]["namespace"] == namespace and _selects(b, pod)]
        if len(budgets) > 1:
            raise status(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                                               "eviction subresource does not support.")
        if budgets:
            budget = _with_status(state, cluster_id, budgets[0])
            if budget["status"].get("disruptionsAllowed", 0) <= 0:
                raise status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption "
                                                     "budget.", {"causes": [{
                                                         "reason": "DisruptionBudget",
                                                         "message": f"The disruption budget {budget['metadata']['name']}"
                                                                    f" needs {budget['status'].get('desiredHealthy', 0)}"
                                                                    f" healthy pods and has "
                                                                    f"{budget['status'].get('currentHealthy', 0)} "
                                                                    f"currently"}]})
            stored = budgets[0]
            stored["status"] = budget["status"]
            stored["status"]["disruptionsAllowed"] -= 1
            stored["status"].setdefault("disruptedPods", {})[name] = iso_seconds(clock.now())
            stored["metadata"]["resourceVersion"] = state.next_resource_version()
    del pods[key]
    state.mark_dirty()


def drainable_pods(state, cluster_id, node_name):
    """The pods `kubectl drain --ignore-daemonsets` evicts from a Node, as "namespace/name"
    (k8s.io/kubectl/pkg/drain/filters.go): those bound to it, less DaemonSet pods and mirror
    pods (annotation kubernetes.io/config.mirror)."""
    names = []
    for key, pod in sorted(state.kube_objects(cluster_id, "pods").items()):
        meta = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node_name:
            continue
        if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            continue
        if any(ref.get("kind") == "DaemonSet" and ref.get("controller") for ref in meta.get("ownerReferences") or []):
            continue
        names.append(key)
    return names


def _selects(budget, pod):
    requirements = kube_select.selector_object((budget.get("spec") or {}).get("selector"))
    return requirements is not None and kube_select.matches(requirements, pod["metadata"].get("labels"))


def _running(pod):
    return (pod.get("status") or {}).get("phase", "Running") == "Running"


def _with_status(state, cluster_id, budget):
    """The budget with a status: the one put in, or what the disruption controller computes
    (pkg/controller/disruption/disruption.go) for integer or percentage minAvailable/maxUnavailable
    over the running pods it selects (expected = selected pods: the emulator has no scale
    subresources to read)."""
    if budget.get("status"):
        return budget
    pods = [p for p in state.kube_objects(cluster_id, "pods").values()
            if p["metadata"]["namespace"] == budget["metadata"]["namespace"] and _selects(budget, p)]
    healthy, expected = sum(1 for p in pods if _running(p)), len(pods)
    spec = budget.get("spec") or {}
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], expected, round_up=True)
    else:
        desired = expected - _scaled(spec.get("maxUnavailable", 0), expected, round_up=True)
    result = copy.deepcopy(budget)
    result["status"] = {"observedGeneration": budget["metadata"].get("generation", 1),
                        "disruptionsAllowed": max(0, healthy - desired), "currentHealthy": healthy,
                        "desiredHealthy": desired, "expectedPods": expected}
    return result


def _scaled(value, total, round_up):
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, str) and value.endswith("%"):
        exact = int(value[:-1]) * total / 100
        return int(-(-exact // 1)) if round_up else int(exact)
    return int(value)


# -- the admin side ---------------------------------------------------------------------------

def put_object(app, cl, obj):
    """Create or replace a Pod, PodDisruptionBudget or DaemonSet as the controllers would have
    left it; returns the stored object. ValueError naming the problem."""
    if not isinstance(obj, dict):
        raise ValueError(f"object = {obj!r}: expected a Kubernetes object")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind = {kind!r}: expected one of {sorted(KINDS)}")
    resource, api_version = KINDS[kind]
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"metadata.name = {name!r}: expected a name")
    meta.setdefault("namespace", "default")
    store = app.state.kube_objects(cl["id"], resource)
    key = f"{meta['namespace']}/{name}"
    old = store.get(key)
    obj["apiVersion"] = api_version
    meta["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
    meta["creationTimestamp"] = old["metadata"]["creationTimestamp"] if old else iso_seconds(clock.now())
    meta["resourceVersion"] = app.state.next_resource_version()
    meta.setdefault("generation", 1)
    obj.setdefault("spec", {})
    if kind == "Pod":
        obj.setdefault("status", {}).setdefault("phase", "Running")
    store[key] = obj
    app.state.mark_dirty()
    return obj
