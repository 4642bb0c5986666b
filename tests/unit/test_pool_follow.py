"""An agent-pool node follows its Machine (pool_follow.decide): it acts only when the
Machine's settings differ from what it applied AND the pool's operation released it (its
Node deleted), leaves only when the Machine is gone AND the Node is marked, and says why
it does nothing otherwise. Machines are parsed from the wire shape of the 2026-05-02-preview
schema, as ARM answers them."""

import pytest

from aks_flex_node.azure.agentpool import parse_machine
from aks_flex_node.cloud_values import BadCloudValue
from aks_flex_node.engine.ledger import Ledger
from aks_flex_node.errors import AuthError, FlexNodeError
from aks_flex_node.host import Host
from aks_flex_node.pool_follow import DELETING_TAINT, Seen, Verdict, decide
from aks_flex_node.steps import machine_goal as goals
from aks_flex_node.steps.kinds import KINDS

POOL = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c/agentPools/flex"
LABELS = {"team": "edge"}
TAINTS = ["dedicated=edge:NoSchedule"]


def machine(version="1.31.2", etag="e2", labels=LABELS, taints=TAINTS, max_pods=110, current=None):
    kube = {"orchestratorVersion": version, "maxPods": max_pods, "nodeLabels": labels, "nodeTaints": taints}
    if current:
        kube["currentOrchestratorVersion"] = current
    return parse_machine({"id": f"{POOL}/machines/node1", "name": "node1", "properties": {
        "kubernetes": kube, "eTag": etag, "provisioningState": "Succeeded",
        "status": {"driftAction": "Synced"}}}, "test")


def applied(version="1.30.4", etag="e1", labels=LABELS, taints=TAINTS):
    return goals.goal_of(machine(version, etag, labels, taints), "test")


def node(labels=LABELS, taints=(("dedicated", "edge", "NoSchedule"),), deleting=False):
    spec = {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints]}
    if deleting:
        spec["taints"].append({"key": DELETING_TAINT, "value": "true", "effect": "NoSchedule"})
        spec["unschedulable"] = True
    return {"metadata": {"name": "node1", "labels": dict(labels, **{"kubernetes.io/hostname": "node1"})},
            "spec": spec}


def seen(m="absent", n="absent", machine_error=None, node_error=None):
    """m / n: a Machine / Node, None for a 404, "absent" for the defaults."""
    return Seen(machine=machine() if m == "absent" else m, machine_read=True, machine_error=machine_error,
                node=node() if n == "absent" else n, node_error=node_error)


def test_same_etag_is_in_step():
    got = decide(seen(machine(etag="e1", version="1.30.4")), applied(), None, None)
    assert got.verdict is Verdict.IN_STEP


def test_a_new_goal_with_the_node_registered_waits_for_the_pool():
    got = decide(seen(), applied(), None, None)
    assert got.verdict is Verdict.WAIT and got.goal.etag == "e2" and got.goal.version == "1.31.2"
    assert "kubernetes_version" in got.reason


def test_the_node_deleted_by_the_pool_releases_the_new_goal():
    got = decide(seen(n=None), applied(), None, None)
    assert got.verdict is Verdict.APPLY and got.goal.values["kubernetes_version"] == "1.31.2"
    assert got.released  # the RP drained it: no drain of ours


def test_the_node_deleted_with_the_goal_applied_does_nothing():
    """A Node deleted by hand (or a re-read 404) is no signal without a new goal."""
    got = decide(seen(machine(etag="e1", version="1.30.4"), n=None), applied(), None, None)
    assert got.verdict is Verdict.IN_STEP


def test_a_rollback_is_a_goal_like_any_other():
    got = decide(seen(machine(version="1.30.4", etag="e3"), n=None), applied("1.31.2", "e2"), None, None)
    assert got.verdict is Verdict.APPLY and got.goal.version == "1.30.4"


def test_the_machine_gone_and_the_node_marked_is_a_reset():
    got = decide(seen(None, node(deleting=True)), applied(), None, None)
    assert got.verdict is Verdict.RESET


@pytest.mark.parametrize("the_node", [None, node()], ids=["node-gone", "node-unmarked"])
def test_the_machine_gone_without_the_mark_waits_and_removes_nothing(the_node):
    got = decide(seen(None, the_node), applied(), None, None)
    assert got.verdict is Verdict.WAIT and DELETING_TAINT in got.reason


def test_the_node_marked_while_the_machine_is_still_there_waits():
    got = decide(seen(n=node(deleting=True)), applied(), None, None)
    assert got.verdict is Verdict.WAIT


def test_a_machine_this_identity_may_not_read_blocks_and_says_why():
    err = AuthError("403 AuthorizationFailed: machines/read", code="auth")
    got = decide(seen(m=None, machine_error=err, n=None), applied(), None, None)
    assert got.verdict is Verdict.BLOCKED and got.code == "auth" and "machines/read" in got.reason


def test_an_unreadable_node_never_counts_as_deleted():
    err = FlexNodeError("the API server is unreachable", code="temporary")
    got = decide(seen(n=None, node_error=err), applied(), None, None)
    assert got.verdict is Verdict.BLOCKED and got.code == "temporary"


def test_a_labels_only_change_the_pool_put_on_the_node_is_acknowledged():
    moved = {"team": "edge", "zone": "b"}
    got = decide(seen(machine(version="1.30.4", etag="e2", labels=moved), node(labels=moved)),
                 applied(), None, None)
    assert got.verdict is Verdict.ACKNOWLEDGE and got.goal.etag == "e2"


def test_a_labels_only_change_not_on_the_node_waits():
    got = decide(seen(machine(version="1.30.4", etag="e2", labels={"team": "core"})), applied(), None, None)
    assert got.verdict is Verdict.WAIT


def test_a_goal_that_failed_is_not_tried_again_on_its_own():
    got = decide(seen(n=None), applied(), None, {"etag": "e2", "why": "kubelet 1.31.2 was not Ready"})
    assert got.verdict is Verdict.BLOCKED and got.code == "goal-failed"


def test_an_operator_pin_wins_and_is_said():
    got = decide(seen(n=None), applied(), None, None, pin="1.30.4")
    assert got.verdict is Verdict.BLOCKED and got.code == "pinned" and "1.30.4" in got.reason


def test_a_goal_being_applied_is_finished_whatever_the_node_shows():
    """A run killed half-way: the kubelet may have registered the Node again already."""
    being = applied("1.31.2", "e2")
    got = decide(seen(), applied(), being, None)
    assert got.verdict is Verdict.APPLY and got.goal.etag == "e2" and got.released
    # One an operator's `upgrade` began (which drains) is finished as it was begun.
    got = decide(seen(), applied(), being, None, applying_released=False)
    assert got.verdict is Verdict.APPLY and not got.released
    # Machine unreadable: finished with the settings recorded when it began.
    err = FlexNodeError("ARM unreachable", code="temporary")
    got = decide(seen(m=None, machine_error=err), applied(), being, None)
    assert got.verdict is Verdict.APPLY and got.goal == being
    # Machine gone and Node marked meanwhile: the pool wants the node out.
    got = decide(seen(None, node(deleting=True)), applied(), being, None)
    assert got.verdict is Verdict.RESET


def test_a_bad_machine_value_blocks_naming_the_field():
    got = decide(seen(machine(version="1.31", current=None), n=None), applied(), None, None)
    assert got.verdict is Verdict.BLOCKED and got.code == "bad-cloud-value"
    assert "orchestratorVersion" in got.reason


def test_a_minor_line_takes_the_patch_the_rp_resolved():
    goal = goals.goal_of(machine(version="1.31", current="1.31.7"), "test")
    assert goal.version == "1.31.7"
    with pytest.raises(BadCloudValue):
        goals.goal_of(machine(version="1.31", current="1.30.4"), "test")


def test_the_goal_is_config_keys():
    goal = goals.goal_of(machine(labels={"b": "2", "a": "1"}), "test")
    assert goal.values == {"kubernetes_version": "1.31.2", "max_pods": 110, "node_labels": ["a=1", "b=2"],
                           "node_taints": TAINTS}


def test_machine_values_of_the_wrong_type_are_refused_naming_the_field():
    for field, bad in (("nodeLabels", ["team=edge"]), ("nodeTaints", "a=b:NoSchedule")):
        doc = {"id": f"{POOL}/machines/node1", "name": "node1",
               "properties": {"eTag": "e", "kubernetes": {field: bad}}}
        with pytest.raises(BadCloudValue) as err:
            parse_machine(doc, "test")
        assert err.value.field == f"properties.kubernetes.{field}"


def test_the_ledger_record_moves_applying_to_applied_or_failed(tmp_path):
    ledger = Ledger(Host(str(tmp_path)), kinds=KINDS)
    first, second = applied(), applied("1.31.2", "e2")
    goals.set_applied(ledger, first)
    goals.begin(ledger, second, True)
    assert goals.applied(ledger) == first and goals.in_force(ledger) == second
    assert goals.applying_released(ledger)
    goals.fail(ledger, "not Ready")
    assert goals.applying(ledger) is None and goals.in_force(ledger) == first
    assert goals.failed(ledger) == {"etag": "e2", "why": "not Ready"}
    goals.begin(ledger, second, False)
    assert not goals.applying_released(ledger)
    goals.finish(ledger)
    assert goals.applied(ledger) == second and goals.failed(ledger) is None and goals.applying(ledger) is None
    # Read back from disk as the next run would.
    again = Ledger(Host(str(tmp_path)), kinds=KINDS)
    assert goals.applied(again) == second
