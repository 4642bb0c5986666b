"""The bootstrap workflow and its undo: every step, in the order the upstream agent runs them.

The declared order is what --sequential follows; each step's `needs` (declared on its class,
nowhere else) is what the concurrent runner follows, so the identity branch (arc, roles,
propagation), the install branch (system, runtime, binaries, CNI) and the credentials read
overlap, and only the kubelet's start waits for all of them. Every step waits for preflight,
then for the cluster read: that one call proves the operator's credential and permissions
before anything on the host changes, so a wrong secret or a missing role fails (exit 4)
with the host untouched.

One workflow serves every join mode, whose mode is resolved once, before the run
(engine/context.py). A step of one mode says why it does not apply in the others (its
`modes`: arc, roles and rbac-propagation are Arc mode's; machine is agent-pool mode's), and
a phase whose work differs by mode has a step class per mode under one name (cluster and
credentials: steps/cluster.py in Arc mode, steps/agentpool.py in the TLS bootstrap modes):
`bootstrap_steps(mode)` takes the mode's.

Unbootstrap undoes the same steps in reverse order, then removes the directories that only
became empty once every phase was undone.
"""

from aks_flex_node.steps.agentpool import ApiServerStep, JoinFactsStep, MachineStep
from aks_flex_node.steps.arc import ArcStep
from aks_flex_node.steps.cluster import ClusterStep, CredentialsStep
from aks_flex_node.steps.gpu import GpuStep
from aks_flex_node.steps.kubelet import KubeletStep
from aks_flex_node.steps.kubelet_upgrade import KubeletUpgradeStep
from aks_flex_node.steps.kubernetes import CniConfigStep, CniPluginsStep, KubernetesBinariesStep
from aks_flex_node.steps.node import NodeReadyStep, PropagationStep
from aks_flex_node.steps.preflight import PreflightStep
from aks_flex_node.steps.registry_mirrors import RegistryMirrorsStep
from aks_flex_node.steps.roles import RolesStep
from aks_flex_node.steps.runtime import ContainerdBinariesStep, ContainerdConfigStep, RuncStep
from aks_flex_node.steps.services import ServicesStep
from aks_flex_node.steps.system import SystemStep
from aks_flex_node.steps.tracked import LeftoverDirsStep

# A phase: one step class, or a tuple of its classes, one per join mode.
PHASES = (
    PreflightStep, (ClusterStep, JoinFactsStep), ArcStep, RolesStep, MachineStep, SystemStep, RuncStep,
    ContainerdBinariesStep, GpuStep, ContainerdConfigStep, RegistryMirrorsStep, KubernetesBinariesStep, CniPluginsStep,
    CniConfigStep, (CredentialsStep, ApiServerStep), KubeletStep, PropagationStep, ServicesStep,
    KubeletUpgradeStep, NodeReadyStep,
)
STEP_CLASSES = tuple(cls for phase in PHASES for cls in (phase if isinstance(phase, tuple) else (phase,)))
PHASE_NAMES = tuple((phase[0] if isinstance(phase, tuple) else phase).name for phase in PHASES)
PHASE_HELP = tuple((cls.name, cls.help) for cls in (p[0] if isinstance(p, tuple) else p for p in PHASES))


def _class_for(phase, mode):
    """The phase's step class for join mode `mode`."""
    if not isinstance(phase, tuple):
        return phase
    [cls] = [cls for cls in phase if mode in cls.modes]
    return cls


def bootstrap_steps(mode):
    return [_class_for(phase, mode)() for phase in PHASES]


def unbootstrap_steps(mode):
    return [_class_for(phase, mode)() for phase in reversed(PHASES)] + [LeftoverDirsStep()]
