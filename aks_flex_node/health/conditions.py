"""Conditions on the node's own Node object: what the cluster operator sees in
`kubectl describe node` about how this node's agent is doing, without logging in.

node-problem-detector's conventions (k8s.io/node-problem-detector, pkg/exporters/
k8sexporter/condition/manager.go and docs/): one condition type per problem area, status
"True" while the problem is present, a CamelCase reason, a message saying what to do,
lastTransitionTime moving only when the status changes, lastHeartbeatTime on every report.
Our types begin with "FlexNode", a prefix no kubelet or NPD type uses: the kubelet owns
Ready, MemoryPressure, DiskPressure, PIDPressure and NetworkUnavailable, and a strategic
merge by type (kube/__init__.py patch_node_status) leaves them alone.

`conditions_of` is a pure function of facts (the run's summary as status.json holds it,
the credential lifetimes of health/credentials.py, the time) and of the conditions the Node
has now; health/node_report.py sends them, with the events of health/events.py.

A fact this pass did not establish (a pass that failed before checking for repeated
repairs, credentials that could not be read) keeps the Node's current condition as it is:
it is never reported as fixed on no evidence.
"""

import datetime
import re

from aks_flex_node.gpu import advertised

PASS_FAILED = "FlexNodePassFailed"
REPAIR_DID_NOT_STICK = "FlexNodeRepairDidNotStick"
CREDENTIAL_EXPIRING = "FlexNodeCredentialExpiring"
UPGRADE_ROLLED_BACK = "FlexNodeKubeletUpgradeRolledBack"
# Agent-pool mode: the node cannot follow its Machine (pool_follow.py: a role lost, a pin, a
# goal that failed, a value it refuses); waiting for the pool's signal is no problem.
MACHINE_GOAL_BLOCKED = "FlexNodeMachineGoalBlocked"
# A GPU node whose device plugin has not advertised all its GPUs in the Node's allocatable
# (gpu/advertised.py); never written on a machine that has never been a GPU node.
GPU_NOT_ADVERTISED = "FlexNodeGPUNotAdvertised"
TYPES = (PASS_FAILED, REPAIR_DID_NOT_STICK, CREDENTIAL_EXPIRING, UPGRADE_ROLLED_BACK, MACHINE_GOAL_BLOCKED,
         GPU_NOT_ADVERTISED)

# A credential nobody on the node renews is reported this long before it expires: a week,
# so an operator has a working week to renew it (cert-manager's default renewBefore is a
# third of the lifetime; a service principal's certificate lives a year or more).
WARN_BEFORE = datetime.timedelta(days=7)
# One the node renews (the kubelet's client certificate, the cluster CA a full pass reads
# again) is reported only when it is this close and still not renewed: renewal failed.
RENEWABLE_WARN_BEFORE = datetime.timedelta(days=1)

# errors.RepairDidNotStick.code; the runner raises it (engine/runner.py).
_REPAIR_CODE = "repair-did-not-stick"
_UPGRADE_FAILED_PHASE = "failed"  # steps/kubelet_upgrade.py FAILED: rolled back, record kept
_GPU_PHASE = "gpu"  # steps/gpu.py GpuStep.name

_WORD = re.compile(r"[A-Za-z0-9]+")
# A metav1.Time as the API server writes it (RFC 3339, seconds, UTC "Z" or an offset).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})", re.ASCII)


def _kept_time(before, status):
    """The current condition's lastTransitionTime while its status is `status`; None when it
    changed, or when what the API server holds is not an RFC 3339 time (it is read from the
    network and sent back: anything else is replaced, never echoed)."""
    if before is None or before.get("status") != status:
        return None
    stamp = before.get("lastTransitionTime")
    return stamp if isinstance(stamp, str) and _RFC3339.fullmatch(stamp) else None


def camel(text):
    """"kubelet-upgrade" -> "KubeletUpgrade": a reason is CamelCase (API conventions,
    "Typical status properties"); anything but letters and digits is dropped."""
    return "".join(w[:1].upper() + w[1:] for w in _WORD.findall(str(text))) or "Unknown"


def _iso(now):
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_, present, reason, message):
    return {"type": type_, "status": "True" if present else "False", "reason": reason, "message": message}


def _pass_failed(summary):
    if summary.get("operation") not in (None, "bootstrap") or summary.get("state") not in ("succeeded", "failed",
                                                                                        "pending"):
        return None
    if summary["state"] == "succeeded":
        return _condition(PASS_FAILED, False, "PassSucceeded", "the last pass of aks-flex-node succeeded")
    failed = [p.get("name") for p in summary.get("phases") or [] if isinstance(p, dict) and p.get("status") == "failed"]
    phase = failed[0] if failed else "run"
    error = summary.get("error") or {}
    what = "join" if summary["state"] == "pending" else "pass"
    return _condition(PASS_FAILED, True, f"{camel(phase)}Failed",
                      f"the last {what} of aks-flex-node failed in phase {phase}"
                      + (f" ({error.get('error')})" if error.get("error") else "")
                      + "; on the node: aks-flex-node status, and journalctl -u aks-flex-node-agent")


def _repair(summary):
    error = summary.get("error") or {}
    if error.get("error") == _REPAIR_CODE:
        return _condition(REPAIR_DID_NOT_STICK, True, "RepairDidNotStick",
                          "a repair the previous pass applied was needed again: something on the node undoes it; "
                          "on the node: aks-flex-node status names it, journalctl -u aks-flex-node-agent shows each pass")
    if summary.get("operation") in (None, "bootstrap") and summary.get("state") == "succeeded":
        return _condition(REPAIR_DID_NOT_STICK, False, "RepairsHeld", "no repair was needed twice in a row")
    return None  # a failed pass may have stopped before the check: not known


def _credentials(lifetimes, now):
    if lifetimes is None:
        return None
    soon = []
    for lt in lifetimes:
        not_after = getattr(lt, "not_after", None)
        if not_after is None:
            continue
        window = RENEWABLE_WARN_BEFORE if lt.renewable else WARN_BEFORE
        if not_after - now <= window:
            soon.append(lt)
    if not soon:
        return _condition(CREDENTIAL_EXPIRING, False, "CredentialsValid",
                          "no credential of the node expires within "
                          f"{WARN_BEFORE.days} days (or, for one the node renews, within a day)")
    first = min(soon, key=lambda lt: lt.not_after)
    expired = first.not_after <= now
    if first.renewable:
        reason = "RenewableCredentialNotRenewed"
        todo = "the node renews it and has not: on the node, aks-flex-node status and journalctl -u kubelet"
    else:
        reason = "CredentialExpired" if expired else "CredentialExpiresSoon"
        todo = "renew it (a new certificate or token from its owner) and point the configuration at it"
    when = "expired" if expired else "expires"
    return _condition(CREDENTIAL_EXPIRING, True, reason,
                      f"{first.kind} ({first.source}) {when} {_iso(first.not_after)}; {todo}")


def _upgrade(summary):
    kubelet = summary.get("kubelet")
    if not isinstance(kubelet, dict):
        return None
    record = kubelet.get("upgrade")
    if isinstance(record, dict) and record.get("phase") == _UPGRADE_FAILED_PHASE:
        return _condition(UPGRADE_ROLLED_BACK, True, "KubeletUpgradeRolledBack",
                          f"the kubelet upgrade from {record.get('from')} to {record.get('to')} failed and was "
                          "rolled back; on the node: journalctl -u kubelet says why, then aks-flex-node upgrade")
    return _condition(UPGRADE_ROLLED_BACK, False, "NoFailedUpgrade", "no kubelet upgrade has failed")


def _machine_goal(summary):
    goal = summary.get("machine_goal")
    if not isinstance(goal, dict):
        return None  # not agent-pool mode, or nothing read yet: not known
    if goal.get("verdict") == "blocked":
        return _condition(MACHINE_GOAL_BLOCKED, True, camel(goal.get("code") or "blocked"),
                          f"this node cannot follow its Machine: {goal.get('reason')}; it keeps the version it "
                          "runs; on the node: aks-flex-node status, journalctl -u aks-flex-node-agent")
    return _condition(MACHINE_GOAL_BLOCKED, False, camel(goal.get("verdict")),
                      f"this node follows its Machine: {goal.get('reason')}")


def _gpu(summary, current_types):
    """From the run's "gpu" (steps/gpu.py advertising). A shortfall within the grace after the
    kubelet started ("waiting"), a Node not read, or an answer that is not a Node's, is not
    known: the condition stays as it is, so a kubelet restart does not flap it (the grace is
    gpu/advertised.py's: the kubelet's own for a device plugin to come back). A node that was a
    GPU node and is not now (gpu = off, the card taken out: the gpu phase ran and found none)
    clears a condition it has, and writes none it has not."""
    gpu = summary.get("gpu")
    if isinstance(gpu, dict):
        verdict, message = gpu.get("verdict"), gpu.get("message")
        if verdict == advertised.ADVERTISED:
            return _condition(GPU_NOT_ADVERTISED, False, "GPUsAdvertised",
                              f"the device plugin advertised them: {message}")
        if verdict in (advertised.FEWER, advertised.NOT_ADVERTISED):
            reason = "FewerGPUsAdvertised" if verdict == advertised.FEWER else "GPUsNotAdvertised"
            todo = f"; {gpu['remedy']}" if gpu.get("remedy") else ""
            return _condition(GPU_NOT_ADVERTISED, True, reason,
                              f"{message}{todo}; on the node: aks-flex-node status")
        return None
    ran = [p for p in summary.get("phases") or [] if isinstance(p, dict) and p.get("name") == _GPU_PHASE
           and p.get("status") in ("changed", "unchanged")]
    if ran and GPU_NOT_ADVERTISED in current_types:
        return _condition(GPU_NOT_ADVERTISED, False, "NoGPU", "this node is not a GPU node now")
    return None


def conditions_of(summary, lifetimes, now, current=()):
    """The FlexNode conditions for the Node: `summary` is the run's (status.json), `lifetimes`
    health/credentials.lifetimes() or None when not read, `now` an aware datetime, `current`
    the Node's status.conditions now. A type whose facts are unknown keeps its current
    condition (or is left out); lastTransitionTime is kept while the status is the same."""
    summary = summary if isinstance(summary, dict) else {}
    by_type = {c.get("type"): c for c in current if isinstance(c, dict)}
    wanted = [_pass_failed(summary), _repair(summary), _credentials(lifetimes, now), _upgrade(summary),
              _machine_goal(summary), _gpu(summary, by_type)]
    stamp = _iso(now)
    out = []
    for cond in filter(None, wanted):
        before = by_type.get(cond["type"])
        out.append(dict(cond, lastHeartbeatTime=stamp,
                        lastTransitionTime=_kept_time(before, cond["status"]) or stamp))
    return out


def status_patch(conditions):
    """The strategic merge patch for the Node's status: conditions merge by type (their
    patchMergeKey in k8s.io/api core/v1 NodeStatus), so the kubelet's stay as they are."""
    return {"status": {"conditions": conditions}}
