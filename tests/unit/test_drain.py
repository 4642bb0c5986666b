"""What drain does with each pod (kubectl drain --ignore-daemonsets, k8s.io/kubectl/pkg/drain/filters.go)."""

from aks_flex_node import kube
from aks_flex_node.kube import drain


def pod(name, owner=None, annotations=None, phase="Running", deleting=False):
    meta = {"name": name, "namespace": "ns"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Other", "name": "x"}, {"kind": owner, "name": "o", "controller": True}]
    if annotations:
        meta["annotations"] = annotations
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_pods_are_sorted_as_kubectl_drain_does():
    pods = [pod("ds", owner="DaemonSet"), pod("mirror", annotations={drain.MIRROR_ANNOTATION: "h"}),
            pod("rs", owner="ReplicaSet"), pod("job", owner="Job"), pod("bare"), pod("done", phase="Succeeded"),
            pod("leaving", owner="ReplicaSet", deleting=True),
            pod("mirror-ds", owner="DaemonSet", annotations={drain.MIRROR_ANNOTATION: "h"})]
    evict, terminating, kept, unmanaged = drain.sort_pods(pods)
    assert [p["metadata"]["name"] for p in evict] == ["rs", "job", "done"]
    assert [p["metadata"]["name"] for p in terminating] == ["leaving"]
    assert dict(kept).keys() == {"ns/ds", "ns/mirror", "ns/mirror-ds"}
    assert "DaemonSet" in dict(kept)["ns/ds"] and "mirror" in dict(kept)["ns/mirror"]
    assert unmanaged == ["ns/bare"]


def test_an_owner_that_is_not_the_controller_does_not_make_a_pod_managed():
    bare = pod("bare")
    bare["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "r"}]  # no controller: true
    assert drain.sort_pods([bare])[3] == ["ns/bare"]


def test_a_429_status_message_names_the_budget():
    status = {"kind": "Status", "message": "Cannot evict pod as it would violate the pod's disruption budget.",
              "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 1"}]}}
    text = kube._message(status, causes=True)
    assert text.startswith("Cannot evict pod") and text.endswith("The disruption budget web needs 1")
    assert kube._message(None) == "no Status in the answer"
