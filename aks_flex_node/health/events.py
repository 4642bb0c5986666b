"""Events about the node, as the kubelet records its own (client-go tools/events,
events.k8s.io/v1): regarding the Node (kind Node, its name and uid, no namespace), created in
namespace "default" (the kubelet's node events go there: pkg/kubelet/kubelet.go makes its
nodeRef with Namespace ""; client-go records an event of a cluster-scoped object in
metav1.NamespaceDefault), named <node>.<hex nanoseconds> as client-go names them,
reportingController "aks-flex-node" and reportingInstance the node's name. The Node
authorizer lets a node create events (plugin/pkg/auth/authorizer/node: nodes may
create/update/patch events in both groups).

`events_of` is pure: what this pass did (its summary) and the Node's conditions before and
after our patch (health/conditions.py) decide what happened:
  NodeJoined                 Normal   a pass succeeded and the Node carried no FlexNode condition yet
  PassRecovered              Normal   a pass succeeded after a failed one
  DriftRepaired              Normal   a pass of a joined node changed something (a repair)
  KubeletUpgradeStarted      Normal   sent by upgrade_started_event() when an upgrade is recorded as begun
  KubeletUpgraded            Normal   the kubelet-upgrade phase switched the kubelet's version
  KubeletUpgradeRolledBack   Warning  the upgrade failed and the old kubelet is back
  RepairDidNotStick          Warning  a repair was needed twice in a row
  CredentialExpiring         Warning  FlexNodeCredentialExpiring turned True (once, on the change)
  NodeLeaving                Normal   sent by leave_event() before the node's credential goes
"""

import datetime
import re
import time

from aks_flex_node.health import conditions as cond

NAMESPACE = "default"
CONTROLLER = "aks-flex-node"
# events.k8s.io/v1 validation: a note of at most 1 KiB (pkg/apis/core/validation/events.go,
# NoteLengthLimit).
NOTE_LIMIT = 1024
_UPGRADE_PHASE = "kubelet-upgrade"  # steps/kubelet_upgrade.py KubeletUpgradeStep.name


class Event:
    def __init__(self, type_, reason, action, note):
        self.type, self.reason, self.action, self.note = type_, reason, action, note

    def __repr__(self):
        return f"Event({self.type}, {self.reason}, {self.action})"


def _status_of(conditions, type_):
    for c in conditions or ():
        if isinstance(c, dict) and c.get("type") == type_:
            return c.get("status")
    return None


def events_of(summary, before, after):
    """The events of a pass whose summary is `summary`; `before`/`after`: the Node's
    conditions before our patch and the FlexNode conditions we set."""
    summary = summary if isinstance(summary, dict) else {}
    if summary.get("operation") not in (None, "bootstrap") or summary.get("dry_run"):
        return []
    phases = [p for p in summary.get("phases") or [] if isinstance(p, dict)]
    out = []
    was_failed = _status_of(before, cond.PASS_FAILED)
    if summary.get("state") == "succeeded":
        if was_failed is None:
            out.append(Event("Normal", "NodeJoined", "Join", "aks-flex-node joined this node to the cluster"))
        elif was_failed == "True":
            out.append(Event("Normal", "PassRecovered", "Reconcile", "aks-flex-node's pass succeeded again"))
        else:
            repaired = [p["name"] for p in phases if p.get("status") == "changed" and p.get("name") != _UPGRADE_PHASE]
            if repaired:
                out.append(Event("Normal", "DriftRepaired", "Repair",
                                 "aks-flex-node repaired drift in phase(s) " + ", ".join(map(str, repaired))))
    upgrade = next((p for p in phases if p.get("name") == _UPGRADE_PHASE), None)
    if upgrade is not None and upgrade.get("status") == "changed":
        out.append(Event("Normal", "KubeletUpgraded", "Upgrade", f"{upgrade.get('message') or 'kubelet upgraded'}"))
    if upgrade is not None and upgrade.get("status") == "failed" and \
            _status_of(after, cond.UPGRADE_ROLLED_BACK) == "True":
        out.append(Event("Warning", "KubeletUpgradeRolledBack", "Upgrade",
                         next(c["message"] for c in after if c["type"] == cond.UPGRADE_ROLLED_BACK)))
    # A credential nobody renews is the operator's to replace: the condition holds it while it
    # lasts, the event marks the moment it began (once, like a condition's transition).
    if _status_of(after, cond.CREDENTIAL_EXPIRING) == "True" and \
            _status_of(before, cond.CREDENTIAL_EXPIRING) != "True":
        out.append(Event("Warning", "CredentialExpiring", "Check",
                         next(c["message"] for c in after if c["type"] == cond.CREDENTIAL_EXPIRING)))
    if _status_of(after, cond.REPAIR_DID_NOT_STICK) == "True":
        out.append(Event("Warning", "RepairDidNotStick", "Repair",
                         next(c["message"] for c in after if c["type"] == cond.REPAIR_DID_NOT_STICK)))
    return out


def leave_event():
    """The event sent before the node leaves (its credential is removed after it)."""
    return Event("Normal", "NodeLeaving", "Leave", "aks-flex-node is removing this node from the cluster")


def upgrade_started_event(previous, target):
    """The event sent when a kubelet upgrade begins (steps/kubelet_upgrade.py start), before
    the cordon: the pass's own events (KubeletUpgraded, KubeletUpgradeRolledBack) come after it."""
    return Event("Normal", "KubeletUpgradeStarted", "Upgrade",
                 f"aks-flex-node is upgrading the kubelet from {previous} to {target}: cordon, drain, switch, restart")


def _micro(now):
    """A MicroTime, as client-go writes eventTime."""
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# A uid as the API server makes them (a UUID, k8s.io/apimachinery util/uuid); anything else
# in the answer is not echoed back.
_UID = re.compile(r"[0-9A-Za-z-]{1,64}", re.ASCII)


def event_body(node, event, now, seq=0, name=None):
    """The events.k8s.io/v1 Event for `event` regarding the Node object `node` (as read from
    the API server), whose name is `name` (the one we asked for; the answer's when None);
    `seq` keeps apart the names of the events of one pass (on a coarse clock they may share
    a nanosecond)."""
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    name = name if name is not None else meta.get("name")
    uid = meta.get("uid")
    uid = uid if isinstance(uid, str) and _UID.fullmatch(uid) else ""
    note = event.note if len(event.note.encode()) <= NOTE_LIMIT else event.note.encode()[:NOTE_LIMIT - 3].decode(
        "utf-8", "ignore") + "..."
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            # Named by the moment it is made, as client-go names one (tools/events/event_recorder.go:
            # "%v.%x", the name and UnixNano()), not by `now`: a pass's time is whole seconds, and
            # two passes ending in one second would make the second event's name taken (409).
            "metadata": {"name": f"{name}.{time.time_ns() + seq:x}", "namespace": NAMESPACE},
            "eventTime": _micro(now), "reportingController": CONTROLLER, "reportingInstance": name,
            "action": event.action, "reason": event.reason, "type": event.type, "note": note,
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid, "namespace": ""}}
