"""The bootstrap workflow and its undo: every step, in the order the upstream agent runs them.

The declared order is what --sequential follows; each step's `needs` (declared on its class,
nowhere else) is what the concurrent runner follows, so the identity branch (arc, roles,
propagation), the install branch (system, runtime, binaries, CNI) and the credentials read
overlap, and only the kubelet's start waits for all of them. Every step waits for preflight,
then for the cluster read: that one call proves the operator's credential and permissions
before anything on the host changes, so a wrong secret or a missing role fails (exit 4)
with the host untouched.

One workflow serves every join mode: a step that does not apply to the configured mode says
why in its run_if (arc, roles and rbac-propagation are Arc mode's; machine is agent-pool
mode's), and the cluster and credentials phases read what their mode provides
(steps/agentpool.py).

Unbootstrap undoes the same steps in reverse order, then removes the directories that only
became empty once every phase was undone.
"""

from aks_flex_node.steps.agentpool import MachineStep
from aks_flex_node.steps.arc import ArcStep
from aks_flex_node.steps.cluster import ClusterStep, CredentialsStep
from aks_flex_node.steps.kubelet import KubeletStep
from aks_flex_node.steps.kubelet_upgrade import KubeletUpgradeStep
from aks_flex_node.steps.kubernetes import CniConfigStep, CniPluginsStep, KubernetesBinariesStep
from aks_flex_node.steps.node import NodeReadyStep, PropagationStep
from aks_flex_node.steps.preflight import PreflightStep
from aks_flex_node.steps.roles import RolesStep
from aks_flex_node.steps.runtime import ContainerdBinariesStep, ContainerdConfigStep, RuncStep
from aks_flex_node.steps.services import ServicesStep
from aks_flex_node.steps.system import SystemStep
from aks_flex_node.steps.tracked import LeftoverDirsStep

STEP_CLASSES = (
    PreflightStep, ClusterStep, ArcStep, RolesStep, MachineStep, SystemStep, RuncStep, ContainerdBinariesStep,
    ContainerdConfigStep, KubernetesBinariesStep, CniPluginsStep, CniConfigStep, CredentialsStep,
    KubeletStep, PropagationStep, ServicesStep, KubeletUpgradeStep, NodeReadyStep,
)
PHASE_NAMES = tuple(cls.name for cls in STEP_CLASSES)
PHASE_HELP = tuple((cls.name, cls.help) for cls in STEP_CLASSES)


def bootstrap_steps():
    return [cls() for cls in STEP_CLASSES]


def unbootstrap_steps():
    return [cls() for cls in reversed(STEP_CLASSES)] + [LeftoverDirsStep()]
