"""The emulator's AKS resource provider for a FlexNodes pool's lifecycle (tests/emulator/
pool_operations.py, agentpools.py): a pool's own version, a pool upgrade and rollback Machine by
Machine (written with a new eTag, cordoned, drained with budgets honoured, the Node deleted and
awaited back at the version), deleteMachines leaving the Node to the agent and the RP's
stale-Node fallback, currentOrchestratorVersion read from the Node, status-only writes that
keep the eTag, and the 403 a node gets once its pool role is gone. Sources: Azure/AKSFlexNode
docs/design/agent-and-aks.md and the 2026-05-02-preview spec (cited in the modules)."""

import base64
import re

import pytest

from tests.emulator import constants as C

API = C.AGENTPOOL_API
POOL = C.FLEX_POOL_ID
OLD, NEW = C.K8S_VERSION, "1.31.2"
SPEC = {"properties": {"kubernetes": {"orchestratorVersion": OLD, "maxPods": 110}}}


@pytest.fixture
def emu(fresh_emulator):
    fresh_emulator.settings(machine_operation_delay=0)
    return fresh_emulator


@pytest.fixture
def node_token(emu):
    return emu.arm_token(C.NODE_SP_CLIENT_ID, C.NODE_SP_CLIENT_SECRET)


@pytest.fixture
def kube(emu):
    """aks-one's kube-apiserver stand-in as the cluster admin (listClusterAdminCredential)."""
    _, _, creds = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01")
    kubeconfig = base64.b64decode(creds["kubeconfigs"][0]["value"]).decode()
    token = re.search(r"^\s+token: (\S+)$", kubeconfig, re.M).group(1)

    def call(method, path, body=None, content_type=None):
        headers = {"Authorization": f"Bearer {token}"}
        if content_type:
            headers["Content-Type"] = content_type
        return emu.http(method, f"{emu.apiserver}{path}", body, headers)
    return call


def machine(emu, name, token):
    status, _, body = emu.arm_call("GET", f"{POOL}/machines/{name}", API, token=token)
    assert status == 200, body
    return body


def put_machine(emu, name, token, body=SPEC):
    status, _, answer = emu.arm_call("PUT", f"{POOL}/machines/{name}", API, body, token=token)
    assert status in (200, 201), answer
    return answer


def register(kube, name, version=OLD, ready=True):
    """A Node as its kubelet registers it: kubeletVersion and the Ready condition."""
    status, _, body = kube("POST", "/api/v1/nodes", {
        "metadata": {"name": name}, "spec": {},
        "status": {"nodeInfo": {"kubeletVersion": f"v{version}"},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})
    assert status == 201, body


def heartbeat(kube, name):
    status, _, body = kube("PATCH", f"/api/v1/nodes/{name}/status",
                           {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                           "application/strategic-merge-patch+json")
    assert status == 200, body


def put_pod(emu, name, node, **meta):
    emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": {
        "kind": "Pod", "metadata": {"name": name, "namespace": "default", **meta}, "spec": {"nodeName": node}}})


def pods(emu):
    return sorted(p["metadata"]["name"] for p in emu.state()["kube_objects"][C.CLUSTER_ID.lower()]["pods"].values())


def node_of(emu, name):
    return {n["metadata"]["name"]: n for n in emu.state()["nodes"][C.CLUSTER_NAME]}.get(name)


def control_plane_to(emu, version=NEW):
    emu.admin("POST", "clusters/upgrade", {"cluster_id": C.CLUSTER_ID, "kubernetes_version": version})


def pool_properties(emu):
    return emu.arm_call("GET", POOL, API)[2]["properties"]


def bootstrap_version(emu, token):
    return emu.arm_call("POST", f"{POOL}/listBootstrapData", API, {}, token=token)[2]["components"]["kubernetes"]


# -- the pool's version -------------------------------------------------------------------


def test_a_pool_keeps_its_own_version_and_bootstrap_data_hands_it_out(emu, node_token):
    control_plane_to(emu)  # `az aks upgrade --control-plane-only`: the pool stays
    props = pool_properties(emu)
    assert props["orchestratorVersion"] == props["currentOrchestratorVersion"] == OLD
    assert bootstrap_version(emu, node_token) == OLD

    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    assert emu.pool_operation(op) == {"id": op, "kind": "upgrade", "pool_id": POOL, "version": NEW,
                                      "status": "Succeeded", "machines": {}, "error": None}
    props = pool_properties(emu)
    assert props["orchestratorVersion"] == props["currentOrchestratorVersion"] == NEW
    assert bootstrap_version(emu, node_token) == NEW  # a node joining now joins at the pool's version
    _, _, cluster = emu.arm_call("GET", C.CLUSTER_ID, API)
    profiles = {p["name"]: p["orchestratorVersion"] for p in cluster["properties"]["agentPoolProfiles"]}
    assert profiles == {C.FLEX_POOL: NEW, C.SYSTEM_POOL: OLD}


@pytest.mark.parametrize("body,status,fragment", [
    ({"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL, "version": "1.31"}, 400, "version = '1.31'"),
    ({"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL, "version": "1.32.0"}, 400, "control plane runs 1.31.2"),
    ({"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL, "version": "1.29.9"}, 400, "the pool runs 1.30.4"),
    ({"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL, "version": OLD}, 400, "the pool runs 1.30.4"),
    ({"cluster_id": C.CLUSTER_ID, "pool": "nopool", "version": NEW}, 400, "pool = 'nopool'"),
    ({"cluster_id": "/nope", "pool": C.FLEX_POOL, "version": NEW}, 400, "cluster_id = '/nope'"),
    ({"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL, "version": NEW, "surge": 1}, 400, "surge: unknown key"),
])
def test_upgrade_refusals_name_the_field_and_change_nothing(emu, body, status, fragment):
    control_plane_to(emu)
    answer, _, payload = emu.http("POST", f"{emu.admin_url}/agentpools/upgrade", body)
    assert answer == status and fragment in payload["error"], payload
    assert pool_properties(emu)["orchestratorVersion"] == OLD and emu.state()["pool_operations"] == []


def test_one_operation_at_a_time_and_nothing_to_roll_back(emu, node_token, kube):
    control_plane_to(emu)
    status, _, payload = emu.http("POST", f"{emu.admin_url}/agentpools/rollback",
                                  {"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL})
    assert status == 400 and "no upgrade to roll back" in payload["error"]
    put_machine(emu, "edge1", node_token)
    register(kube, "edge1")
    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    assert emu.pool_operation(op)["status"] == "InProgress"
    for route, body in (("upgrade", {"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL, "version": NEW}),
                        ("rollback", {"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL})):
        status, _, payload = emu.http("POST", f"{emu.admin_url}/agentpools/{route}", body)
        assert status == 409 and "in progress" in payload["error"], route


# -- a pool upgrade -----------------------------------------------------------------------


def test_upgrade_moves_the_machines_one_after_the_other(emu, node_token, kube):
    control_plane_to(emu)
    etags = {}
    for name in ("edge2", "edge1"):
        etags[name] = put_machine(emu, name, node_token)["properties"]["eTag"]
        register(kube, name)
    put_pod(emu, "web", "edge1", ownerReferences=[{"kind": "ReplicaSet", "name": "web", "controller": True}])
    put_pod(emu, "agent", "edge1", ownerReferences=[{"kind": "DaemonSet", "name": "agent", "controller": True}])
    put_pod(emu, "static", "edge1", annotations={"kubernetes.io/config.mirror": "x"})
    put_pod(emu, "other", "edge2")

    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    # edge1 first (by name): written with a new eTag, drained (not its DaemonSet or mirror
    # pod), its Node deleted as the signal; edge2 untouched.
    assert emu.pool_operation(op)["machines"] == {"edge1": "WaitingForNode", "edge2": "Pending"}
    first = machine(emu, "edge1", node_token)["properties"]
    assert first["kubernetes"]["orchestratorVersion"] == NEW and first["eTag"] != etags["edge1"]
    assert first["provisioningState"] == "Updating"
    assert pods(emu) == ["agent", "other", "static"]
    assert node_of(emu, "edge1") is None
    second = machine(emu, "edge2", node_token)["properties"]
    assert second["eTag"] == etags["edge2"] and second["kubernetes"]["orchestratorVersion"] == OLD
    assert "unschedulable" not in node_of(emu, "edge2")["spec"]
    assert pool_properties(emu)["orchestratorVersion"] == NEW  # set when the operation starts
    assert pool_properties(emu)["currentOrchestratorVersion"] == OLD

    register(kube, "edge1", version=OLD)  # back, but at the old version: not done
    assert emu.pool_operation(op)["machines"]["edge1"] == "WaitingForNode"
    kube("DELETE", "/api/v1/nodes/edge1")
    register(kube, "edge1", version=NEW, ready=False)  # the new version, not Ready yet
    assert emu.pool_operation(op)["machines"]["edge1"] == "WaitingForNode"
    heartbeat(kube, "edge1")  # Ready: edge1 done, edge2's turn
    assert emu.pool_operation(op)["machines"] == {"edge1": "Succeeded", "edge2": "WaitingForNode"}
    assert machine(emu, "edge1", node_token)["properties"]["provisioningState"] == "Succeeded"
    assert pods(emu) == ["agent", "static"] and node_of(emu, "edge2") is None

    register(kube, "edge2", version=NEW)
    view = emu.pool_operation(op)
    assert view["status"] == "Succeeded" and view["error"] is None
    assert pool_properties(emu)["currentOrchestratorVersion"] == NEW
    done = machine(emu, "edge2", node_token)["properties"]
    assert done["provisioningState"] == "Succeeded" and done["eTag"] != etags["edge2"]


def test_a_budget_holds_the_drain_until_it_allows_an_eviction(emu, node_token, kube):
    control_plane_to(emu)
    put_machine(emu, "edge1", node_token)
    register(kube, "edge1")
    put_pod(emu, "db", "edge1", labels={"app": "db"})
    budget = {"kind": "PodDisruptionBudget", "metadata": {"name": "db", "namespace": "default"},
              "spec": {"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1},
              "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}
    emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": budget})
    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    assert emu.pool_operation(op)["machines"] == {"edge1": "Draining"}
    assert node_of(emu, "edge1")["spec"]["unschedulable"] is True and pods(emu) == ["db"]

    budget["status"]["disruptionsAllowed"] = 1  # the disruption controller's recount
    emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": budget})
    assert emu.pool_operation(op)["machines"] == {"edge1": "WaitingForNode"}
    assert pods(emu) == [] and node_of(emu, "edge1") is None


def test_a_drain_that_cannot_finish_fails_the_upgrade_and_leaves_the_node_schedulable(emu, node_token, kube):
    control_plane_to(emu)
    emu.settings(pool_drain_timeout=60)
    for name in ("edge1", "edge2"):
        put_machine(emu, name, node_token)
        register(kube, name)
    put_pod(emu, "db", "edge1", labels={"app": "db"})
    emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": {
        "kind": "PodDisruptionBudget", "metadata": {"name": "db", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1}}})  # 1 pod: 0 allowed
    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    emu.advance_clock(59)
    assert emu.pool_operation(op)["status"] == "InProgress"
    emu.advance_clock(2)
    view = emu.pool_operation(op)
    assert view["status"] == "Failed" and view["machines"] == {"edge1": "Failed", "edge2": "Pending"}
    assert view["error"]["code"] == "DrainTimeout" and view["error"]["machine"] == "edge1"
    assert "default/db" in view["error"]["message"]
    assert "unschedulable" not in node_of(emu, "edge1")["spec"]  # undrainableNodeBehavior Schedule
    assert machine(emu, "edge1", node_token)["properties"]["provisioningState"] == "Failed"
    assert machine(emu, "edge2", node_token)["properties"]["kubernetes"]["orchestratorVersion"] == OLD


def test_a_node_that_does_not_come_back_fails_the_upgrade_naming_the_machine(emu, node_token, kube):
    control_plane_to(emu)
    emu.settings(pool_node_timeout=300)
    put_machine(emu, "edge1", node_token)
    register(kube, "edge1")
    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    register(kube, "edge1", version=OLD)  # the agent's local rollback: the old kubelet again
    emu.advance_clock(299)
    assert emu.pool_operation(op)["status"] == "InProgress"
    emu.advance_clock(2)
    view = emu.pool_operation(op)
    assert view["status"] == "Failed" and view["error"]["code"] == "NodeNotReady"
    assert view["error"]["machine"] == "edge1" and "kubelet 1.30.4" in view["error"]["message"]
    assert machine(emu, "edge1", node_token)["properties"]["provisioningState"] == "Failed"
    assert pool_properties(emu)["currentOrchestratorVersion"] == OLD


# -- rollback -----------------------------------------------------------------------------


def test_rollback_restores_each_machines_previous_spec_with_a_new_etag(emu, node_token):
    control_plane_to(emu)
    before = {"properties": {"kubernetes": {"orchestratorVersion": "1.30", "maxPods": 50}}}
    original = put_machine(emu, "edge1", node_token, before)["properties"]
    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)  # no Node: written and done at once
    assert emu.pool_operation(op)["machines"] == {"edge1": "Succeeded"}
    upgraded = machine(emu, "edge1", node_token)["properties"]
    assert upgraded["kubernetes"]["orchestratorVersion"] == NEW and upgraded["kubernetes"]["maxPods"] == 50
    put_machine(emu, "late", node_token)  # joined after the upgrade: nothing to restore

    back = emu.rollback_pool(C.CLUSTER_ID, C.FLEX_POOL)
    assert emu.pool_operation(back) == {"id": back, "kind": "rollback", "pool_id": POOL, "version": OLD,
                                        "status": "Succeeded", "machines": {"edge1": "Succeeded"}, "error": None}
    restored = machine(emu, "edge1", node_token)["properties"]
    assert restored["kubernetes"]["orchestratorVersion"] == "1.30" and restored["kubernetes"]["maxPods"] == 50
    assert restored["eTag"] not in (original["eTag"], upgraded["eTag"])  # a spec write: a new eTag
    assert pool_properties(emu)["orchestratorVersion"] == pool_properties(emu)["currentOrchestratorVersion"] == OLD

    status, _, payload = emu.http("POST", f"{emu.admin_url}/agentpools/rollback",
                                  {"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL})
    assert status == 400 and "rolled back already" in payload["error"]
    emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    emu.advance_clock(7 * 86400 + 1)
    status, _, payload = emu.http("POST", f"{emu.admin_url}/agentpools/rollback",
                                  {"cluster_id": C.CLUSTER_ID, "pool": C.FLEX_POOL})
    assert status == 400 and "7 days" in payload["error"]


def test_rollback_drives_the_nodes_like_an_upgrade(emu, node_token, kube):
    control_plane_to(emu)
    put_machine(emu, "edge1", node_token)
    register(kube, "edge1")
    emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    register(kube, "edge1", version=NEW)
    etag = machine(emu, "edge1", node_token)["properties"]["eTag"]
    back = emu.rollback_pool(C.CLUSTER_ID, C.FLEX_POOL)
    assert emu.pool_operation(back)["machines"] == {"edge1": "WaitingForNode"} and node_of(emu, "edge1") is None
    restored = machine(emu, "edge1", node_token)["properties"]
    assert restored["kubernetes"]["orchestratorVersion"] == OLD and restored["eTag"] != etag
    register(kube, "edge1", version=OLD)
    assert emu.pool_operation(back)["status"] == "Succeeded"


# -- the Machine's answer -----------------------------------------------------------------


def test_current_orchestrator_version_is_what_the_node_runs(emu, node_token, kube):
    put_machine(emu, "edge1", node_token)
    props = machine(emu, "edge1", node_token)["properties"]
    assert props["kubernetes"]["currentOrchestratorVersion"] == OLD  # no Node: from orchestratorVersion
    assert props["status"]["driftAction"] == "Synced"
    register(kube, "edge1", version="1.29.9")
    props = machine(emu, "edge1", node_token)["properties"]
    assert props["kubernetes"]["currentOrchestratorVersion"] == "1.29.9"
    assert props["status"]["driftAction"] == "Recreate" and "1.29.9" in props["status"]["driftReason"]


def test_status_only_writes_keep_the_etag(emu, node_token):
    for name, body in (("edge1", SPEC), ("bare", {"properties": {}})):
        got = put_machine(emu, name, node_token, body)
        etag = got["properties"]["eTag"]
        got["properties"].update(provisioningState="Failed", eTag="settings-42",
                                 status={"driftAction": "Recreate", "driftReason": "x"})
        got["properties"]["kubernetes"].update(currentOrchestratorVersion="1.0.0", nodeName="elsewhere")
        back = put_machine(emu, name, node_token, got)  # what the client GOT, read-only fields changed
        assert back["properties"]["eTag"] == etag, name
        assert machine(emu, name, node_token)["properties"]["eTag"] == etag, name


def test_a_status_write_amid_an_upgrade_leaves_the_rps_provisioning_state(emu, node_token, kube):
    control_plane_to(emu)
    put_machine(emu, "edge1", node_token)
    register(kube, "edge1")
    op = emu.upgrade_pool(C.CLUSTER_ID, C.FLEX_POOL, NEW)
    got = machine(emu, "edge1", node_token)
    put_machine(emu, "edge1", node_token, got)
    props = machine(emu, "edge1", node_token)["properties"]
    assert props["provisioningState"] == "Updating" and props["eTag"] == got["properties"]["eTag"]
    assert emu.pool_operation(op)["machines"] == {"edge1": "WaitingForNode"}


def test_a_node_that_lost_its_pool_role_gets_arms_403_on_its_machine(emu, node_token):
    put_machine(emu, "edge1", node_token)
    assert emu.remove_role_assignments(C.NODE_SP_OBJECT_ID, scope=POOL) == 1
    for method, path, body in (("GET", f"{POOL}/machines/edge1", None), ("GET", f"{POOL}/machines", None),
                               ("PUT", f"{POOL}/machines/edge1", SPEC)):
        status, _, answer = emu.arm_call(method, path, API, body, token=node_token)
        assert status == 403 and answer["error"]["code"] == "AuthorizationFailed", (method, path)
        assert "agentPools/machines/" in answer["error"]["message"]


# -- deleteMachines and the RP's fallback ---------------------------------------------------


def delete_machines(emu, *names):
    status, headers, body = emu.arm_call("POST", f"{POOL}/deleteMachines", API, {"machineNames": list(names)})
    assert status == 202, body
    return headers["Azure-AsyncOperation"]


def operation(emu, url):
    return emu.http("GET", url, headers={"Authorization": f"Bearer {emu.arm_token()}"})[2]


def test_delete_machines_drains_and_deletes_the_machine_and_leaves_the_node(emu, node_token, kube):
    put_machine(emu, "edge1", node_token)
    register(kube, "edge1")
    put_pod(emu, "web", "edge1")
    put_pod(emu, "agent", "edge1", ownerReferences=[{"kind": "DaemonSet", "name": "agent", "controller": True}])
    url = delete_machines(emu, "edge1")
    assert operation(emu, url)["status"] == "Succeeded"
    assert emu.arm_call("GET", f"{POOL}/machines/edge1", API, token=node_token)[0] == 404
    node = node_of(emu, "edge1")  # the agent's to delete, tainted and cordoned
    assert node["spec"]["unschedulable"] is True
    assert {"key": "kubernetes.azure.com/flex-node-deleting", "value": "true", "effect": "NoSchedule"} \
        in node["spec"]["taints"]
    assert pods(emu) == ["agent"]


def test_the_fallback_deletes_a_silent_tainted_node_whose_machine_is_gone(emu, node_token, kube):
    emu.settings(stale_node_grace=100)
    for name in ("edge1", "edge2", "keep"):
        put_machine(emu, name, node_token)
        register(kube, name)
    register(kube, "loose")  # no Machine, no taint: not the RP's
    emu.settings(machine_operation_delay=1000)
    pending = delete_machines(emu, "edge2")  # tainted, its Machine still there
    emu.settings(machine_operation_delay=0)
    delete_machines(emu, "edge1")
    emu.advance_clock(60)
    heartbeat(kube, "edge1")  # its kubelet still reports: a healthy but slow agent
    emu.advance_clock(60)
    assert node_of(emu, "edge1") is not None
    emu.advance_clock(41)
    assert node_of(emu, "edge1") is None  # silent for 100 s
    assert operation(emu, pending)["status"] == "InProgress" and node_of(emu, "edge2") is not None
    assert node_of(emu, "keep") is not None and node_of(emu, "loose") is not None


def test_a_delete_that_cannot_drain_fails_and_keeps_the_machine(emu, node_token, kube):
    emu.settings(pool_drain_timeout=60)
    put_machine(emu, "edge1", node_token)
    register(kube, "edge1")
    put_pod(emu, "db", "edge1", labels={"app": "db"})
    emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": {
        "kind": "PodDisruptionBudget", "metadata": {"name": "db", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1}}})
    url = delete_machines(emu, "edge1")
    assert operation(emu, url)["status"] == "InProgress"
    emu.advance_clock(61)
    body = operation(emu, url)
    assert body["status"] == "Failed" and body["error"]["code"] == "DrainTimeout"
    assert machine(emu, "edge1", node_token)["properties"]["provisioningState"] == "Failed"
    assert pods(emu) == ["db"]


def test_the_heartbeat_is_bookkeeping_never_in_api_answers(emu, kube):
    register(kube, "edge1")
    assert "_statusAt" in node_of(emu, "edge1")  # /_emulator/state shows it
    _, _, node = kube("GET", "/api/v1/nodes/edge1")
    assert not [k for k in node if k.startswith("_")]


def test_the_rp_settings_defaults_and_validation(emu):
    settings = emu.state()["settings"]
    assert (settings["pool_drain_timeout"], settings["pool_node_timeout"], settings["stale_node_grace"]) == \
        (1800.0, 600.0, 600.0)
    status, _, body = emu.http("POST", f"{emu.admin_url}/settings", {"pool_drain_timeout": -1, "stale_node_grace": "x"})
    assert status == 400
    assert "pool_drain_timeout = -1: expected a non-negative number" in body["error"]
    assert "stale_node_grace = 'x': expected a non-negative number" in body["error"]
