"""The emulated cluster's workloads as a drain meets them, put in through the emulator's admin
API as the controllers would have left them (tests/emulator/kube_pods.py), and what is left
of them and of the joined node's Node object. Shared by tests/integration/test_drain.py and
test_kubelet_upgrade.py."""

from tests.emulator import constants as C
from tests.harness import MACHINE_NAME

OTHER_NODE = "other-node"


def put(emu, obj):
    return emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": obj})


def pod(name, node=MACHINE_NAME, namespace="default", labels=None, owner=None, annotations=None, **meta):
    metadata = {"name": name, "namespace": namespace, "labels": labels or {}, **meta}
    if owner:
        kind, owner_name = owner
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner_name,
                                        "uid": f"uid-{owner_name}", "controller": True}]
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]},
            "status": {"phase": "Running"}}


def budget(name, selector, disruptions_allowed):
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},
            "status": {"disruptionsAllowed": disruptions_allowed, "currentHealthy": 1,
                       "desiredHealthy": 1 if not disruptions_allowed else 0, "expectedPods": 1,
                       "observedGeneration": 1}}


def workloads(emu, blocked):
    """A DaemonSet pod and a mirror pod (both stay), two ReplicaSet pods (evicted; `web-1`
    under a budget allowing no disruption when `blocked`), and a pod of another node."""
    put(emu, {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}}}})
    put(emu, pod("agent-x1", namespace="kube-system", labels={"app": "agent"}, owner=("DaemonSet", "agent")))
    put(emu, pod(f"static-web-{MACHINE_NAME}", namespace="kube-system",
                 annotations={"kubernetes.io/config.mirror": "abc", "kubernetes.io/config.source": "file"}))
    put(emu, pod("web-1", labels={"app": "web"}, owner=("ReplicaSet", "web-5d4f")))
    put(emu, pod("api-1", labels={"app": "api"}, owner=("ReplicaSet", "api-7c9b")))
    put(emu, pod("web-2", node=OTHER_NODE, labels={"app": "web"}, owner=("ReplicaSet", "web-5d4f")))
    put(emu, budget("web", {"app": "web"}, 0 if blocked else 1))


def pods(emu):
    return set(emu.state()["kube_objects"].get(C.CLUSTER_ID.lower(), {}).get("pods", {}))


def node_object(emu):
    return {n["metadata"]["name"]: n for n in emu.state()["nodes"][C.CLUSTER_NAME]}[MACHINE_NAME]


def registered_node(emu, name=MACHINE_NAME):
    """The cluster's Node `name`, or None when it is not registered (deleted, or not yet)."""
    return {n["metadata"]["name"]: n for n in emu.state()["nodes"].get(C.CLUSTER_NAME, [])}.get(name)


def pool_machines(emu):
    """The Machines of every agent pool in the emulator's state, by name."""
    state = emu.state()
    return {m["name"]: m for pool in state.get("agentpool_machines", {}).values()
            for m in (pool.values() if isinstance(pool, dict) else pool)}
