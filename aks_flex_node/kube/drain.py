"""Cordon, uncordon and drain this node through the Eviction API, as `kubectl drain` does.

The behaviour follows kubectl drain (kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/,
kubernetes.io/docs/reference/kubectl/generated/kubectl_drain/ and its library,
k8s.io/kubectl/pkg/drain: drain.go and filters.go) run as
`kubectl drain NODE --ignore-daemonsets --delete-emptydir-data --timeout=T`:

- cordon first (spec.unschedulable=true) so nothing new lands while we evict;
- pods a DaemonSet owns stay (their controller ignores unschedulable and would put them back
  at once: filters.go daemonSetFilter with --ignore-daemonsets), and so do mirror pods
  (annotation kubernetes.io/config.mirror: the API server's copy of a static pod, which only
  the kubelet's manifest directory controls: filters.go mirrorPodFilter);
- pods with no controller are refused before anything is evicted, as kubectl does without
  --force: evicted, nothing would ever recreate them (filters.go unreplicatedFilter);
- pods with emptyDir volumes are evicted (--delete-emptydir-data): the node is going away or
  restarting its kubelet, and their scratch data goes with the pod wherever it is recreated;
- every other pod gets a policy/v1 Eviction, which the API server checks against the pod's
  PodDisruptionBudget (kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/); a 429
  means "not now", and we try again with backoff (kubectl retries every 5 s) until the timeout;
- pods already terminating (deletionTimestamp set) are waited for, not evicted again;
- when the timeout passes, nothing is deleted by force: TemporaryError (exit 75) naming each
  pod still there and why (the 429's message names the budget).

Standard library only; the HTTP calls are kube.KubeClient's.
"""

import logging
import time
from dataclasses import dataclass, field

from aks_flex_node.errors import FlexNodeError, TemporaryError

log = logging.getLogger(__name__)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# kubectl drain waits 5 s between eviction attempts a budget refused (drain.go, evictPods).
RETRY_MAX = 5.0
RETRY_FIRST = 0.5


class DrainError(TemporaryError):
    """The drain did not finish in time; the pods are still there, nothing was forced."""

    code = "drain"


class UnmanagedPods(FlexNodeError):
    """Pods no controller would recreate: an eviction would lose them for good."""

    code = "drain-unmanaged-pods"


@dataclass
class DrainReport:
    node: str
    evicted: list = field(default_factory=list)  # "namespace/name"
    kept: list = field(default_factory=list)  # ("namespace/name", why)
    waited: list = field(default_factory=list)  # pods that were already terminating

    def to_dict(self):
        return {"node": self.node, "evicted": list(self.evicted),
                "kept": [{"pod": pod, "why": why} for pod, why in self.kept], "waited": list(self.waited)}


def cordon(client, name):
    """Mark the node unschedulable. True when this call cordoned it, False when it already
    was (a cordon someone else made is theirs to lift: the caller keeps that in mind)."""
    node = _node(client, name)
    if (node.get("spec") or {}).get("unschedulable") is True:
        return False
    _patched(client.patch_node(name, {"spec": {"unschedulable": True}}), name)
    return True


def uncordon(client, name):
    """Mark the node schedulable again. True when it was cordoned. The field is removed
    (null in the merge patch), as `kubectl uncordon` leaves it."""
    node = _node(client, name)
    if not (node.get("spec") or {}).get("unschedulable"):
        return False
    _patched(client.patch_node(name, {"spec": {"unschedulable": None}}), name)
    return True


def _node(client, name):
    node = client.get_node(name)
    if node is None:
        raise FlexNodeError(f"node {name!r} does not exist in the cluster: nothing to cordon or drain",
                            remedy="check machine_name in the configuration and `kubectl get nodes`")
    return node


def _patched(node, name):
    if node is None:
        raise FlexNodeError(f"node {name!r} disappeared from the cluster while it was being cordoned")


def _key(pod):
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name')}"


def _controller(pod):
    """The kind of the pod's controlling owner, or None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("kind")
    return None


def sort_pods(pods):
    """(to evict, terminating, kept with why, unmanaged): what drain does with each pod."""
    evict, terminating, kept, unmanaged = [], [], [], []
    for pod in pods:
        meta = pod.get("metadata") or {}
        key = _key(pod)
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            kept.append((key, "mirror pod of a static pod: the kubelet's manifest owns it"))
        elif _controller(pod) == "DaemonSet":
            kept.append((key, "DaemonSet pod: its controller ignores the cordon"))
        elif meta.get("deletionTimestamp"):
            terminating.append(pod)
        elif (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            evict.append(pod)  # finished: no budget counts it, kubectl deletes it too
        elif _controller(pod) is None:
            unmanaged.append(key)
        else:
            evict.append(pod)
    return evict, terminating, kept, unmanaged


def drain(client, name, timeout, retry_first=RETRY_FIRST, retry_max=RETRY_MAX,
          clock=time.monotonic, sleep=time.sleep):
    """Evict every pod of the node that drain moves (see the module's docstring) and wait
    until they are gone; return a DrainReport. The node should be cordoned first (cordon()).
    UnmanagedPods before any eviction when a pod has no controller; DrainError when
    `timeout` seconds pass with pods still there."""
    deadline = clock() + timeout
    report = DrainReport(name)
    delay = retry_first
    first = True
    while True:
        evict, terminating, kept, unmanaged = sort_pods(client.list_pods_on_node(name))
        if first:
            if unmanaged:
                raise UnmanagedPods(
                    f"node {name!r} runs pods no controller manages, which an eviction would lose for good: "
                    + ", ".join(unmanaged),
                    remedy="delete or move them by hand (kubectl delete pod -n NAMESPACE NAME), then run again")
            report.kept = kept
            report.waited = [_key(pod) for pod in terminating]
            first = False
        if not evict and not terminating:
            return report
        blocked = {_key(pod): "terminating: waiting for it to go" for pod in terminating}
        progressed = False
        for pod in evict:
            meta = pod["metadata"]
            answer = client.evict_pod(meta.get("namespace", "default"), meta["name"])
            if answer.outcome in ("evicted", "gone"):
                log.info("evicted pod %s from node %s", _key(pod), name)
                report.evicted.append(_key(pod))
                progressed = True
            else:
                why = answer.message if answer.outcome == "blocked" else \
                    f"eviction failed, will retry ({answer.message})"
                log.info("cannot evict pod %s yet: %s", _key(pod), why)
                blocked[_key(pod)] = why
        if progressed:
            delay = retry_first
            continue  # list again at once: what is left, and the evicted pods terminating
        remaining = deadline - clock()
        if remaining <= 0:
            raise DrainError(
                f"node {name!r} not drained after {timeout:g}s; {len(blocked)} pod(s) still there: "
                + "; ".join(f"{pod}: {why}" for pod, why in sorted(blocked.items())),
                remedy="a PodDisruptionBudget allows no disruption now: scale the workload up or wait, "
                "then run again; nothing was deleted by force")
        sleep(min(delay, remaining))
        delay = min(delay * 2, retry_max)


# Unbootstrap's default: the node is leaving, an operator is usually watching; a budget that
# stays shut this long needs them (`--skip-drain`, or free the budget), not a longer wait.
UNBOOTSTRAP_TIMEOUT = 120.0


def cordon_and_drain(client, name, timeout=UNBOOTSTRAP_TIMEOUT, **retry):
    """Cordon then drain the node; None when the Node does not exist (nothing to drain),
    else the DrainReport. DrainError / UnmanagedPods propagate: the caller must then not
    delete the Node, whose pods the garbage collector would delete without asking any budget."""
    if client.get_node(name) is None:
        return None
    cordon(client, name)
    return drain(client, name, timeout, **retry)
