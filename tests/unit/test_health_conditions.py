"""health/conditions.py and health/events.py: the pure mapping from a pass's facts to the
Node's FlexNode conditions and the events of the pass."""

import datetime
import re
import types

import pytest

from aks_flex_node.health import conditions as hc
from aks_flex_node.health import events as he

NOW = datetime.datetime(2026, 11, 27, 18, 0, 0, tzinfo=datetime.timezone.utc)
EARLIER = "2026-11-01T00:00:00Z"
CAMEL = re.compile(r"[A-Z][A-Za-z0-9]*")


def summary(state="succeeded", phases=(), error=None, upgrade=None):
    out = {"operation": "bootstrap", "state": state, "phases": [dict(p) for p in phases], "error": error,
           "kubelet": {"active": "1.31.2"}}
    if upgrade:
        out["kubelet"]["upgrade"] = upgrade
    return out


def lifetime(days, renewable=False, kind="service-principal-certificate"):
    # The shape of health/credentials.Lifetime, as data.
    return types.SimpleNamespace(kind=kind, source="/etc/aks-flex-node/sp.pem", renewable=renewable,
                                 not_after=NOW + datetime.timedelta(days=days))


def by_type(conds):
    return {c["type"]: c for c in conds}


FAILED = summary("failed", [{"name": "identity", "status": "changed"}, {"name": "kubelet", "status": "failed"}],
                 {"error": "kube", "message": "x"})


def test_a_failed_pass_names_its_phase_and_a_succeeded_one_clears_it():
    failed = by_type(hc.conditions_of(FAILED, [], NOW))[hc.PASS_FAILED]
    assert failed["status"] == "True" and failed["reason"] == "KubeletFailed"
    assert "kubelet" in failed["message"] and "aks-flex-node status" in failed["message"]
    ok = by_type(hc.conditions_of(summary(), [], NOW))[hc.PASS_FAILED]
    assert ok["status"] == "False" and ok["reason"] == "PassSucceeded"


def test_a_repair_that_did_not_stick_is_true_and_unknown_after_another_failure():
    stuck = summary("failed", [{"name": "system", "status": "failed"}], {"error": "repair-did-not-stick"})
    cond = by_type(hc.conditions_of(stuck, [], NOW))[hc.REPAIR_DID_NOT_STICK]
    assert cond["status"] == "True" and cond["reason"] == "RepairDidNotStick"
    assert "journalctl" in cond["message"]
    # Another failure says nothing about repeats: the Node's condition is kept, not cleared.
    assert hc.REPAIR_DID_NOT_STICK not in by_type(hc.conditions_of(FAILED, [], NOW))
    assert by_type(hc.conditions_of(summary(), [], NOW))[hc.REPAIR_DID_NOT_STICK]["status"] == "False"


@pytest.mark.parametrize("days, renewable, status, reason", [
    (30, False, "False", "CredentialsValid"),
    (6, False, "True", "CredentialExpiresSoon"),
    (-1, False, "True", "CredentialExpired"),
    (6, True, "False", "CredentialsValid"),  # the node renews it: not yet a problem
    (0.5, True, "True", "RenewableCredentialNotRenewed"),
])
def test_a_credential_about_to_expire(days, renewable, status, reason):
    cond = by_type(hc.conditions_of(summary(), [lifetime(days, renewable)], NOW))[hc.CREDENTIAL_EXPIRING]
    assert (cond["status"], cond["reason"]) == (status, reason)
    if status == "True":
        assert "service-principal-certificate" in cond["message"] and "renew" in cond["message"]


def test_credentials_not_read_keep_the_current_condition():
    assert hc.CREDENTIAL_EXPIRING not in by_type(hc.conditions_of(summary(), None, NOW))
    unknown = types.SimpleNamespace(kind="bootstrap-token", source="x", renewable=False, not_after=None)
    assert by_type(hc.conditions_of(summary(), [unknown], NOW))[hc.CREDENTIAL_EXPIRING]["status"] == "False"


def test_an_upgrade_rolled_back():
    rolled = summary("failed", [{"name": "kubelet-upgrade", "status": "failed"}], {"error": "upgrade-failed"},
                     upgrade={"from": "1.31.2", "to": "1.32.1", "phase": "failed", "why": "not Ready"})
    cond = by_type(hc.conditions_of(rolled, [], NOW))[hc.UPGRADE_ROLLED_BACK]
    assert cond["status"] == "True" and cond["reason"] == "KubeletUpgradeRolledBack"
    assert "1.32.1" in cond["message"] and "aks-flex-node upgrade" in cond["message"]
    assert by_type(hc.conditions_of(summary(), [], NOW))[hc.UPGRADE_ROLLED_BACK]["status"] == "False"
    events = he.events_of(rolled, [], hc.conditions_of(rolled, [], NOW))
    assert [(e.type, e.reason) for e in events] == [("Warning", "KubeletUpgradeRolledBack")]


def test_a_node_that_cannot_follow_its_machine_says_why_and_waiting_is_no_problem():
    lost = dict(summary(), machine_goal={"verdict": "blocked", "code": "auth",
                                         "reason": "machine n1 of agent pool flex cannot be read: 403"})
    cond = by_type(hc.conditions_of(lost, [], NOW))[hc.MACHINE_GOAL_BLOCKED]
    assert cond["status"] == "True" and cond["reason"] == "Auth" and "403" in cond["message"]
    waiting = dict(summary(), machine_goal={"verdict": "wait", "reason": "the pool has not released the node"})
    cond = by_type(hc.conditions_of(waiting, [], NOW))[hc.MACHINE_GOAL_BLOCKED]
    assert cond["status"] == "False" and cond["reason"] == "Wait"
    # Arc mode (no Machine): the type is not sent at all.
    assert hc.MACHINE_GOAL_BLOCKED not in by_type(hc.conditions_of(summary(), [], NOW))


def test_transition_time_moves_only_when_the_status_changes():
    current = [{"type": hc.PASS_FAILED, "status": "True", "reason": "KubeletFailed",
                "lastTransitionTime": EARLIER, "lastHeartbeatTime": EARLIER},
               {"type": "Ready", "status": "True", "lastTransitionTime": EARLIER}]
    same = by_type(hc.conditions_of(FAILED, [], NOW, current))[hc.PASS_FAILED]
    assert same["lastTransitionTime"] == EARLIER and same["lastHeartbeatTime"] == "2026-11-27T18:00:00Z"
    changed = by_type(hc.conditions_of(summary(), [], NOW, current))[hc.PASS_FAILED]
    assert changed["lastTransitionTime"] == changed["lastHeartbeatTime"] == "2026-11-27T18:00:00Z"
    # Only our types are sent: the kubelet's Ready is never in the patch.
    assert all(c["type"].startswith("FlexNode") for c in hc.conditions_of(summary(), [], NOW, current))


def test_every_reason_is_camel_case_and_every_true_message_says_what_to_do():
    cases = [FAILED, summary("failed", [{"name": "a-b", "status": "failed"}], {"error": "repair-did-not-stick"}),
             summary("failed", [], {"error": "upgrade-failed"},
                     upgrade={"from": "1", "to": "2", "phase": "failed"}), summary(),
             dict(summary(), machine_goal={"verdict": "blocked", "code": "pinned", "reason": "a pin"})]
    for case in cases:
        for cond in hc.conditions_of(case, [lifetime(1), lifetime(0.1, True)], NOW):
            assert CAMEL.fullmatch(cond["reason"]), cond
            if cond["status"] == "True":
                assert any(w in cond["message"] for w in ("journalctl", "renew", "aks-flex-node")), cond
    assert hc.camel("kubelet-upgrade") == "KubeletUpgrade" and hc.camel("\x1b[31m") == "31m"


def test_events_of_a_join_a_repair_and_a_recovery():
    joined = he.events_of(summary(), [], hc.conditions_of(summary(), [], NOW))
    assert [(e.type, e.reason, e.action) for e in joined] == [("Normal", "NodeJoined", "Join")]
    ours_ok = [{"type": hc.PASS_FAILED, "status": "False"}]
    repair = summary(phases=[{"name": "system", "status": "changed"}, {"name": "cni", "status": "unchanged"}])
    assert [e.reason for e in he.events_of(repair, ours_ok, [])] == ["DriftRepaired"]
    assert he.events_of(summary(phases=[{"name": "cni", "status": "unchanged"}]), ours_ok, []) == []
    recovered = he.events_of(summary(), [{"type": hc.PASS_FAILED, "status": "True"}], [])
    assert [e.reason for e in recovered] == ["PassRecovered"]
    upgraded = summary(phases=[{"name": "kubelet-upgrade", "status": "changed", "message": "kubelet 1 -> 2"}])
    assert [e.reason for e in he.events_of(upgraded, ours_ok, [])] == ["KubeletUpgraded"]
    assert he.events_of(dict(summary(), dry_run=True), [], []) == []


def test_a_credential_that_starts_to_expire_is_one_warning_event():
    after = hc.conditions_of(summary(), [lifetime(6)], NOW)
    ok = [{"type": hc.PASS_FAILED, "status": "False"}]
    first = he.events_of(summary(), ok, after)
    assert [(e.type, e.reason) for e in first] == [("Warning", "CredentialExpiring")]
    assert "service-principal-certificate" in first[0].note
    # The next pass finds it True already: the condition says it, no second event.
    still = ok + [c for c in after if c["type"] == hc.CREDENTIAL_EXPIRING]
    assert he.events_of(summary(), still, after) == []


def test_event_body_follows_the_kubelets_conventions():
    node = {"metadata": {"name": "n1", "uid": "u-1"}}
    body = he.event_body(node, he.leave_event(), NOW, seq=1)
    assert body["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1", "namespace": ""}
    assert body["metadata"]["namespace"] == "default" and body["metadata"]["name"].startswith("n1.")
    assert (body["reportingController"], body["reportingInstance"], body["reason"], body["type"]) == \
        ("aks-flex-node", "n1", "NodeLeaving", "Normal")
    assert body["eventTime"] == "2026-11-27T18:00:00.000000Z"
    long = he.Event("Warning", "X", "Y", "é" * 2000)
    assert len(he.event_body(node, long, NOW)["note"].encode()) <= he.NOTE_LIMIT


def test_events_of_two_passes_in_one_second_have_names_of_their_own():
    """A pass's time is whole seconds (status.json's `finished`): a bootstrap and the agent's
    pass after it can end in the same second. Their events must not share a name (the second
    would be refused, 409 AlreadyExists, and lost); client-go names an event by the moment it
    is made, in nanoseconds (tools/events/event_recorder.go)."""
    node = {"metadata": {"name": "n1", "uid": "u-1"}}
    first = he.event_body(node, he.leave_event(), NOW, seq=0, name="n1")["metadata"]["name"]
    second = he.event_body(node, he.leave_event(), NOW, seq=0, name="n1")["metadata"]["name"]
    assert first != second


@pytest.mark.parametrize("hostile", [{"a": 1}, "\x1b[2J", "x" * 100000, 17, "2026-11-01"])
def test_a_transition_time_that_is_not_a_time_is_not_sent_back(hostile):
    """The Node's current conditions come from the API server: a lastTransitionTime that is not
    an RFC 3339 time is replaced by now, never copied into our patch."""
    current = [{"type": hc.PASS_FAILED, "status": "True", "lastTransitionTime": hostile}]
    cond = by_type(hc.conditions_of(FAILED, [], NOW, current))[hc.PASS_FAILED]
    assert cond["lastTransitionTime"] == "2026-11-27T18:00:00Z"


@pytest.mark.parametrize("uid", [{"a": 1}, "\x1b]0;x\x07", "u" * 1000, None])
def test_an_event_never_echoes_a_uid_that_is_not_one(uid):
    node = {"metadata": {"name": "n1", "uid": uid}}
    assert he.event_body(node, he.leave_event(), NOW, name="n1")["regarding"]["uid"] == ""


def test_an_event_names_the_node_asked_for_not_what_the_answer_says():
    node = {"metadata": {"name": {"evil": 1}, "uid": "u-1"}}
    body = he.event_body(node, he.leave_event(), NOW, name="n1")
    assert body["regarding"]["name"] == body["reportingInstance"] == "n1"
    assert body["metadata"]["name"].startswith("n1.")
