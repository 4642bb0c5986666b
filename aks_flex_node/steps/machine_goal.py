"""The goal an agent-pool node follows: its Machine's settings, and what this node did with them.

The AKS resource provider keeps each FlexNodes node's goal state in its Machine
(`.../agentPools/<pool>/machines/<name>`, AKS preview API 2026-05-02-preview): the Kubernetes
version, max pods, labels and taints, and `properties.eTag`, the settings version: it changes
when the settings do and never for a status-only update (Azure/AKSFlexNode
docs/design/agent-and-aks.md, "Current Repave Implementation": "The ETag is the drift key").
The node keeps, in one ledger record (Kind.MACHINE_GOAL):

- `applied`: the goal this node runs (eTag and settings), recorded at the join and after each
  goal it applied;
- `applying`: a goal being applied (the RP released the node, or an operator's `upgrade`
  asked), recorded before the first change it causes with whether the node was released, so
  that a run killed half-way is finished by the next pass as it was begun;
- `failed`: the last goal whose kubelet did not come Ready (the old one is back); not tried
  again on its own: a new goal, or `aks-flex-node upgrade`, tries again.

The settings are config keys (configspec.ini), laid over the pool's bootstrap data by the
cluster phase (steps/agentpool.py), so the whole node converges to them as a join would.
"""

import dataclasses
from typing import Optional

from aks_flex_node.cloud_values import BadCloudValue
from aks_flex_node.kubeversion import KubeVersion, VersionError
from aks_flex_node.steps.kinds import Kind

STEP, ID = "machine", "goal"  # the machine phase owns the record; its undo forgets it
GOAL_KEYS = ("kubernetes_version", "max_pods", "node_labels", "node_taints")


@dataclasses.dataclass(frozen=True)
class Goal:
    etag: str
    values: dict  # config keys (GOAL_KEYS) -> typed values

    def to_dict(self):
        return {"etag": self.etag, "values": dict(self.values)}

    @classmethod
    def from_dict(cls, doc):
        if not isinstance(doc, dict) or not isinstance(doc.get("etag"), str) or not isinstance(doc.get("values"), dict):
            return None
        return cls(doc["etag"], {k: v for k, v in doc["values"].items() if k in GOAL_KEYS})

    @property
    def version(self):
        return self.values.get("kubernetes_version")

    def differs_from(self, other):
        """The config keys whose values differ from `other`'s (a Goal or None)."""
        theirs = other.values if other is not None else {}
        return sorted(k for k in GOAL_KEYS if self.values.get(k) != theirs.get(k))


def goal_of(machine, what):
    """The Goal of a Machine (azure/agentpool.py), or BadCloudValue naming the field.

    orchestratorVersion may name a minor line alone (<major.minor>: the spec's description);
    then currentOrchestratorVersion, the patch the RP resolved it to, is the version, when it
    is of that line."""
    if not machine.etag:
        raise BadCloudValue(what, "properties.eTag", machine.etag, "the Machine's settings version")
    values = {}
    wanted = machine.orchestrator_version
    if wanted is not None:
        values["kubernetes_version"] = _release(wanted, machine.current_orchestrator_version, what)
    spec = machine.spec
    if spec.get("maxPods") is not None:
        values["max_pods"] = spec["maxPods"]
    if spec.get("nodeLabels") is not None:
        values["node_labels"] = [f"{k}={v}" for k, v in sorted(spec["nodeLabels"].items())]
    if spec.get("nodeTaints") is not None:
        values["node_taints"] = list(spec["nodeTaints"])
    return Goal(machine.etag, values)


def _release(wanted, current, what):
    field = "properties.kubernetes.orchestratorVersion"
    try:
        version = KubeVersion.parse(wanted)
        if version.patch is not None:
            return str(version.without_suffix).lstrip("v")
        resolved = KubeVersion.parse(current) if current else None
    except VersionError:
        raise BadCloudValue(what, field, wanted, "a Kubernetes version") from None
    if resolved is None or resolved.patch is None or resolved.minor_line != version.minor_line:
        raise BadCloudValue(what, field, wanted, "MAJOR.MINOR.PATCH, or MAJOR.MINOR with a "
                            "currentOrchestratorVersion of that minor (the RP has not resolved it yet)")
    return str(resolved.without_suffix).lstrip("v")


# ---- the ledger record ------------------------------------------------------------------


def _record(ledger):
    entry = ledger.get(Kind.MACHINE_GOAL, ID) or {}
    return {k: entry[k] for k in ("applied", "applying", "failed") if entry.get(k) is not None}


def _save(ledger, fields):
    if fields:
        ledger.replace(STEP, Kind.MACHINE_GOAL, ID, **fields)
    else:
        ledger.forget(Kind.MACHINE_GOAL, ID)


def applied(ledger) -> Optional[Goal]:
    return Goal.from_dict(_record(ledger).get("applied"))


def applying(ledger) -> Optional[Goal]:
    return Goal.from_dict(_record(ledger).get("applying"))


def failed(ledger) -> Optional[dict]:
    """{"etag", "why"} of the last goal that did not come up, or None."""
    doc = _record(ledger).get("failed")
    return doc if isinstance(doc, dict) and isinstance(doc.get("etag"), str) else None


def in_force(ledger) -> Optional[Goal]:
    """The goal a run builds the node to: one being applied, else the one applied."""
    return applying(ledger) or applied(ledger)


def set_applied(ledger, goal):
    """This node runs `goal` (a join registered it, or the RP's settings were taken as run)."""
    fields = _record(ledger)
    fields["applied"] = goal.to_dict()
    if (fields.get("applying") or {}).get("etag") == goal.etag:
        fields.pop("applying")
    _save(ledger, fields)


def begin(ledger, goal, released):
    """Written before the first change that applying `goal` makes; `released`: the pool's
    operation deleted the Node (no drain of ours), which a run that finishes it must know."""
    fields = _record(ledger)
    fields["applying"] = dict(goal.to_dict(), released=bool(released))
    _save(ledger, fields)


def applying_released(ledger):
    """Whether the goal being applied was released by the pool's operation (no drain of ours)."""
    return bool((_record(ledger).get("applying") or {}).get("released"))


def finish(ledger):
    """The goal being applied is the node's now."""
    fields = _record(ledger)
    if "applying" in fields:
        fields["applied"] = fields.pop("applying")
        fields.pop("failed", None)
        _save(ledger, fields)


def fail(ledger, why):
    """The goal being applied did not come up (the old kubelet is back): the node stays on
    the applied goal, and this eTag is not tried again on its own."""
    fields = _record(ledger)
    goal = fields.pop("applying", None)
    if goal is not None:
        fields["failed"] = {"etag": goal["etag"], "why": why}
        _save(ledger, fields)


def forget(ledger):
    ledger.forget(Kind.MACHINE_GOAL, ID)
