"""Agent-pool nodes follow their pool: the Machine is the goal, the RP's Node signal the go-ahead.

The contract between the AKS resource provider (RP) and a FlexNodes node agent, as upstream
describes it (Azure/AKSFlexNode docs/design/agent-and-aks.md):

- Upgrade, reimage and rollback: the RP writes the Machine's settings (a new eTag), cordons
  and drains the node, then deletes the Kubernetes Node as the signal that the node may act.
  The agent sees its Node gone (a 404 when it reads it again), reads the Machine, applies the
  settings if their eTag differs from the one it applied, and the kubelet registers the Node
  again; the RP sees it Ready. Acting needs both: a goal change alone never changes the host.
- Reset or delete: the RP deletes the Machine, cordons and drains, and marks the Node (the
  doc's "Failure Handling" names the taint kubernetes.azure.com/flex-node-deleting=true:NoSchedule).
  The agent confirms the Machine's 404, cleans the host and deletes its Node where it may. A
  404 without the mark is waited on, never acted on.
- A labels- or taints-only change the RP already put on the Node is taken as applied
  ("Current Repave Implementation": acknowledged without host mutation).
- Disruption (cordon, drain) is the RP's: nothing here drains.

`decide` is a pure function of what was seen (the Machine, the Node) and what the ledger says
was applied (steps/machine_goal.py); `observe` reads them as the node: its own identity for
the Machine (machines/read, which the Flex Node Agent Role grants at the pool's scope), the
kubelet's credential for its own Node (the Node authorizer lets a node read its Node). The
agent (agent.py) carries the decision out: a bootstrap run with the goal, or a leave.

Reads are cheap where they can be: every pass reads the Node (the API server, not ARM); the
Machine (ARM, whose reads are throttled per subscription) is read on the agent's full passes,
and on any pass whose Node is gone or marked, or while a goal is being applied.
"""

import dataclasses
import logging
from typing import Optional

from aks_flex_node.cloud_values import BadCloudValue
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.errors import AuthError, FlexNodeError
from aks_flex_node.health import node_report
from aks_flex_node.steps import machine_goal as goals
from aks_flex_node.steps.kinds import open_ledger
from aks_flex_node.words import WordEnum

log = logging.getLogger(__name__)

# The RP's mark on a Node whose Machine it deleted (Azure/AKSFlexNode docs/design/agent-and-aks.md,
# "Failure Handling"; pkg/daemon/repave_reconciler.go).
DELETING_TAINT = "kubernetes.azure.com/flex-node-deleting"
# Settings the RP may change on the Node itself, which the node then takes as applied.
NODE_SIDE_KEYS = ("node_labels", "node_taints")


class Verdict(WordEnum):
    IN_STEP = "in-step"  # the node runs its Machine's settings
    APPLY = "apply"  # the pool's operation released the node: apply the Machine's settings
    ACKNOWLEDGE = "acknowledge"  # labels or taints only, already on the Node: taken as applied
    WAIT = "wait"  # the settings differ; the pool has not released the node (or may not yet)
    RESET = "reset"  # the Machine is gone and the Node is marked: leave the cluster
    BLOCKED = "blocked"  # the goal cannot be read or followed; the node keeps what it runs


@dataclasses.dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    goal: Optional[goals.Goal] = None
    code: str = ""  # BLOCKED: why, as a word (an error's code, "pinned", "goal-failed")
    released: bool = False  # APPLY: the pool's operation deleted the Node (no drain of ours)
    # (the Machine, or None when it is gone,) as `observe` read it for this decision; None when
    # it read none or its read failed. The pass's run takes it instead of reading it again.
    machine_seen: Optional[tuple] = dataclasses.field(default=None, repr=False, compare=False)

    def to_dict(self):
        out = {"verdict": str(self.verdict), "reason": self.reason}
        if self.goal is not None:
            out.update(etag=self.goal.etag, version=self.goal.version)
        if self.code:
            out["code"] = self.code
        return out


@dataclasses.dataclass(frozen=True)
class Seen:
    """What a pass read. `machine`/`node` None with no error: 404 (gone)."""

    machine: object = None  # azure/agentpool.Machine
    machine_read: bool = False  # False: not asked this pass
    machine_error: Optional[FlexNodeError] = None
    node: Optional[dict] = None
    node_error: Optional[FlexNodeError] = None


def marked_for_deletion(node):
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return any(isinstance(t, dict) and t.get("key") == DELETING_TAINT for t in taints)


def _on_node(node, goal):
    """Whether the Node carries every label and taint of `goal` (the RP reconciled them)."""
    meta = (node or {}).get("metadata") or {}
    labels = meta.get("labels") or {}
    for item in goal.values.get("node_labels") or []:
        key, _, value = item.partition("=")
        if labels.get(key) != value:
            return False
    have = {(t.get("key"), t.get("value") or "", t.get("effect")) for t in ((node or {}).get("spec") or {}).get(
        "taints") or [] if isinstance(t, dict)}
    for item in goal.values.get("node_taints") or []:
        pair, _, effect = item.rpartition(":")
        key, _, value = pair.partition("=")
        if (key, value, effect) not in have:
            return False
    return True


def in_step(goal):
    """The Decision of a node that runs `goal`: what a pass that applied it hands on to the
    passes after it, which do not read the Machine again (observe)."""
    return Decision(Verdict.IN_STEP, f"the node runs the settings of eTag {goal.etag}", goal)


def decide(seen, applied, applying, failed, pin=None, what="the Machine", applying_released=True):
    """The Decision for one pass. `applied`/`applying`: steps/machine_goal.Goal or None;
    `failed`: {"etag", "why"} or None; `pin`: the operator's kubernetes_version, if set;
    `applying_released`: whether the goal being applied was begun on the pool's release (or on
    an operator's `upgrade`, which drains)."""
    node_gone = seen.node is None and seen.node_error is None
    if applying is not None:
        # Released before, not finished (a run killed or failed half-way): finish it, with the
        # RP's latest settings when they can be read.
        if seen.machine_read and seen.machine_error is None and seen.machine is None:
            if marked_for_deletion(seen.node):
                return Decision(Verdict.RESET, "the pool deleted this node's Machine and marked its Node")
            return Decision(Verdict.APPLY, f"finishing the settings of eTag {applying.etag}", applying,
                            released=applying_released)
        goal = applying
        if seen.machine is not None:
            try:
                goal = goals.goal_of(seen.machine, what)
            except BadCloudValue:
                pass
        return Decision(Verdict.APPLY, f"finishing the settings begun (eTag {goal.etag})", goal,
                        released=applying_released)
    if seen.machine_error is not None:
        err = seen.machine_error
        return Decision(Verdict.BLOCKED, f"{what} cannot be read: {err.message}", code=err.code)
    if seen.machine is None:
        if marked_for_deletion(seen.node):
            return Decision(Verdict.RESET, "the pool deleted this node's Machine and marked its Node "
                            f"({DELETING_TAINT})")
        if seen.node_error is not None:
            return Decision(Verdict.BLOCKED, f"{what} is gone, and the Node cannot be read "
                            f"({seen.node_error.message}): waiting", code=seen.node_error.code)
        return Decision(Verdict.WAIT, f"{what} is gone but the Node carries no deletion mark ({DELETING_TAINT}): "
                        "waiting for the pool; nothing is removed on a 404 alone")
    try:
        goal = goals.goal_of(seen.machine, what)
    except BadCloudValue as err:
        return Decision(Verdict.BLOCKED, err.message, code=err.code)
    if applied is not None and goal.etag == applied.etag:
        return in_step(goal)
    if failed is not None and failed.get("etag") == goal.etag:
        return Decision(Verdict.BLOCKED, f"the settings of eTag {goal.etag} did not come up ({failed.get('why')}); "
                        "the node keeps what it ran; a new goal, or `aks-flex-node upgrade`, tries again",
                        goal, code="goal-failed")
    if pin and goal.version and pin != goal.version:
        return Decision(Verdict.BLOCKED, f"{what} asks for Kubernetes {goal.version} (eTag {goal.etag}) but "
                        f"kubernetes_version = {pin} in the configuration pins this node; remove the pin to "
                        "follow the pool", goal, code="pinned")
    differs = goal.differs_from(applied)
    if seen.node_error is not None:
        return Decision(Verdict.BLOCKED, f"{what} asks for other settings ({', '.join(differs)}) and the Node "
                        f"cannot be read ({seen.node_error.message}): waiting", goal, code=seen.node_error.code)
    if node_gone:
        return Decision(Verdict.APPLY, f"the pool's operation deleted the Node: applying eTag {goal.etag} "
                        f"({', '.join(differs) or 'the same settings'})", goal, released=True)
    if marked_for_deletion(seen.node):
        return Decision(Verdict.WAIT, f"the Node is marked for deletion ({DELETING_TAINT}) while {what} is "
                        "still there: waiting for the pool", goal)
    if applied is not None and differs and set(differs) <= set(NODE_SIDE_KEYS) and _on_node(seen.node, goal):
        return Decision(Verdict.ACKNOWLEDGE, f"the pool put the new {' and '.join(differs)} on the Node itself: "
                        f"eTag {goal.etag} taken as applied", goal)
    return Decision(Verdict.WAIT, f"{what} asks for other settings ({', '.join(differs) or 'a new eTag'}; "
                    f"eTag {goal.etag}); the pool's operation has not released the node (its Node is still "
                    "registered)", goal)


# ---- reading what the pass needs --------------------------------------------------------


def _read_node(cfg, host):
    """(node or None, error or None), as the node."""
    try:
        client = node_report.node_client(cfg, host)
        if client is None:
            return None, FlexNodeError("the kubelet has no credential yet", code="no-credential")
        return client.get_node(cfg.machine_name), None
    except FlexNodeError as err:
        return None, err
    except (OSError, ValueError) as err:  # a kubeconfig of the kubelet's we cannot use
        return None, FlexNodeError(f"the kubelet's kubeconfig: {err}", code="kube")


def _read_machine(cfg, host):
    """(machine or None, error or None), with the node's own identity."""
    # The Azure SDK comes only with the Machine read: a local pass reads the Node alone, and
    # importing the SDK in its forked child was most of that pass's CPU (make bench: agent
    # CPU per hour).
    from aks_flex_node.azure import agentpool
    from aks_flex_node.azure.session import AzureSession

    session = None
    try:
        session = AzureSession.from_config(cfg, host)
        return agentpool.get_machine(session.clients, cfg.cluster, cfg.agent_pool, cfg.machine_name), None
    except AuthError as err:
        return None, AuthError(err.message, remedy=(
            "give this node's identity the Azure Kubernetes Service Flex Node Agent Role on its pool (it "
            "grants machines/read); until then the node keeps the version it runs"), code=err.code)
    except FlexNodeError as err:
        return None, err
    finally:
        if session is not None:
            session.close()


def goal_to_apply(cfg, host):
    """For `aks-flex-node upgrade` on a node that follows its Machine (agent-pool mode): the
    Machine's goal when its eTag is not the one applied (one that failed included: the operator
    asks again), else None; None too in the other modes and before the node has applied a goal.
    The operator's run drains the node itself, as an upgrade does (docs/upgrade.md). An
    unreadable or missing Machine raises."""
    if cfg.mode is not JoinMode.AGENT_POOL:
        return None
    applied = goals.applied(open_ledger(host))
    if applied is None:
        return None
    what = f"machine {cfg.machine_name} of agent pool {cfg.agent_pool}"
    machine, error = _read_machine(cfg, host)
    if error is not None:
        raise error
    if machine is None:
        raise FlexNodeError(f"{what} is gone: the pool is taking this node out; there is nothing to upgrade to",
                            remedy="aks-flex-node status; the agent leaves once the pool marks the Node",
                            code="machine-gone")
    goal = goals.goal_of(machine, what)
    return None if goal.etag == applied.etag else goal


def observe(cfg, host, ledger, full):
    """The pass's Decision, or None when a local pass had no reason to read the Machine (its
    Node is there and unmarked, and no goal is being applied): nothing new."""
    applied, applying, failed = goals.applied(ledger), goals.applying(ledger), goals.failed(ledger)
    node, node_error = _read_node(cfg, host)
    node_signal = node_error is None and (node is None or marked_for_deletion(node))
    if not (full or applying is not None or node_signal):
        return None
    machine, machine_error = _read_machine(cfg, host)
    seen = Seen(machine=machine, machine_read=True, machine_error=machine_error, node=node, node_error=node_error)
    what = f"machine {cfg.machine_name} of agent pool {cfg.agent_pool}"
    pin = cfg.kubernetes_version if cfg.is_set("kubernetes_version") else None
    decision = decide(seen, applied, applying, failed, pin=pin, what=what,
                      applying_released=goals.applying_released(ledger))
    return decision if machine_error is not None else dataclasses.replace(decision, machine_seen=(machine,))

