"""Whether the device plugin has advertised this node's GPUs: the count the gpu phase found
on the PCI bus against the Node's status.allocatable, as the node-ready phase read it
(issue 29; docs/gpu.md, "Advertised?"). A pure function of what was read.

- The resource names: `nvidia.com/gpu`, what NVIDIA's device plugin advertises and pods ask
  for in resources.limits (NVIDIA/k8s-device-plugin README, "Running GPU Jobs"), and
  `amd.com/gpu`, AMD's (ROCm/k8s-device-plugin, example/pod/alexnet-gpu.yaml).
- More than the GPUs found is all of them: NVIDIA's time-slicing and MPS advertise
  `replicas` per GPU, and with `renameByDefault` as `nvidia.com/gpu.shared`; its mixed MIG
  strategy advertises the slices as `nvidia.com/mig-<g>g.<mem>gb` (the same README, "Shared
  Access to GPUs", "MIG_STRATEGY"). Any of those counts as advertised.
- allocatable holds the healthy devices, capacity all the plugin reported: a plugin that
  marks a GPU unhealthy lowers allocatable alone (kubernetes.io/docs/concepts/
  extend-kubernetes/compute-storage-net/device-plugins/, "Device plugin and unhealthy devices").
- The grace: a new kubelet deletes every socket under /var/lib/kubelet/device-plugins when
  it starts, and each plugin registers again on its own (the same page, "Handling kubelet
  restarts"); until it has, the resource reads 0. So a shortfall seen within GRACE seconds
  of the kubelet's start (the mtime of the kubelet's own registration socket there) is
  "waiting", which changes no condition: a kubelet restart does not turn a node whose GPUs
  were advertised into one whose are not and back a minute later.
- A count is a quantity read by cloud_values.device_count; a value that is not a whole count
  of 0 or more (or a status that is not an object) makes the verdict "unreadable", with the
  answer, field and value named, never a failed pass.
"""

import dataclasses
from typing import Optional

from aks_flex_node import cloud_values

RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}
# The kubelet's registration socket (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1
# constants.go, KubeletSocket); the kubelet makes it anew each time it starts.
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"
# Seconds after the kubelet starts in which a missing GPU is not yet a problem: the kubelet's
# own grace for a device plugin that went away to come back (kubernetes/kubernetes
# pkg/kubelet/cm/devicemanager/types.go, endpointStopGracePeriod, 5 minutes).
GRACE = 300

ADVERTISED = "advertised"  # every GPU found (or more: shared, MIG)
FEWER = "fewer"  # some, not all
NOT_ADVERTISED = "not-advertised"  # none
WAITING = "waiting"  # fewer or none, within GRACE of the kubelet's start
UNKNOWN = "unknown"  # the Node was not read in this pass
UNREADABLE = "unreadable"  # the API server's answer is not what a Node holds


@dataclasses.dataclass(frozen=True)
class Advertising:
    vendor: str
    detected: int
    verdict: str
    message: str
    remedy: Optional[str] = None
    advertised: Optional[int] = None  # allocatable's count of the resource, None when absent or unread
    capacity: Optional[int] = None

    @property
    def resource(self):
        return RESOURCES[self.vendor]

    def to_dict(self):
        """What status.json keeps of it (engine/status.py STATUS_SHAPE "gpu")."""
        out = {"vendor": self.vendor, "resource": self.resource, "detected": self.detected,
               "verdict": self.verdict, "message": self.message,
               "advertised": self.advertised, "capacity": self.capacity}
        if self.remedy:
            out["remedy"] = self.remedy
        return out


def _resources(status, field, source):
    """status[field] (allocatable, capacity): {} when absent."""
    value = status.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise cloud_values.BadCloudValue(source, f"status.{field}", value, "an object")
    return value


def _count(resources, name, field, source):
    """The count resources[name] says (cloud_values.device_count), None when it is not there."""
    if name not in resources:
        return None
    # A name from the answer (nvidia.com/mig-...) is shown bounded, as its value is.
    return cloud_values.device_count(resources[name], source, f"status.{field}[{cloud_values.shown(name, 60)}]")


def _also_advertised(vendor, allocatable, source):
    """{name: count} of the other names the vendor's plugin advertises its GPUs under (NVIDIA:
    <name>.shared, mig-*), those above 0."""
    if vendor != "nvidia":
        return {}
    names = sorted(n for n in allocatable if isinstance(n, str)
                   and (n == "nvidia.com/gpu.shared" or n.startswith("nvidia.com/mig-")))
    counts = {n: _count(allocatable, n, "allocatable", source) for n in names}
    return {n: c for n, c in counts.items() if c}


def judge(vendor, detected, node, node_name, kubelet_up_for=None):
    """The Advertising of `detected` GPUs of `vendor` (nvidia, amd) on the Node `node` as the
    API server answered (None: not read in this pass), named `node_name`; `kubelet_up_for`:
    seconds since the kubelet started, None when not known (no grace then)."""
    resource, what = RESOURCES[vendor], f"{detected} {VENDOR_NAMES[vendor]} GPU{'s' if detected != 1 else ''}"
    if node is None:
        return Advertising(vendor, detected, UNKNOWN,
                           f"{what} found; whether the device plugin advertised them is not known: "
                           "the Node was not read in this pass")
    source = f"API server GET /api/v1/nodes/{node_name}"
    try:
        if not isinstance(node, dict):
            raise cloud_values.BadCloudValue(source, "body", node, "a Node object")
        status = node.get("status")
        status = {} if status is None else status
        if not isinstance(status, dict):
            raise cloud_values.BadCloudValue(source, "status", status, "an object")
        allocatable = _resources(status, "allocatable", source)
        advertised = _count(allocatable, resource, "allocatable", source)
        capacity = _count(_resources(status, "capacity", source), resource, "capacity", source)
        others = _also_advertised(vendor, allocatable, source)
    except cloud_values.BadCloudValue as err:
        return Advertising(vendor, detected, UNREADABLE,
                           f"{what} found; whether the device plugin advertised them cannot be told: {err.message}")
    found = dict(vendor=vendor, detected=detected, advertised=advertised, capacity=capacity)
    if (advertised or 0) >= detected:
        return Advertising(verdict=ADVERTISED, message=f"{what} found, {advertised} {resource} allocatable", **found)
    if others:
        shown = ", ".join(f"{name}: {count}" for name, count in others.items())
        return Advertising(verdict=ADVERTISED, message=f"{what} found, advertised as {shown}", **found)
    if kubelet_up_for is not None and 0 <= kubelet_up_for < GRACE:
        return Advertising(verdict=WAITING, message=(
            f"{what} found, {advertised or 0} {resource} allocatable yet: the kubelet started "
            f"{int(kubelet_up_for)} s ago, and a device plugin registers again with each new kubelet "
            f"(reported after {GRACE} s)"), **found)
    if advertised:
        seen = "" if capacity is None else f" (capacity {capacity})"
        return Advertising(verdict=FEWER, message=f"{what} found, only {advertised} {resource} allocatable{seen}",
                           remedy=_fewer_remedy(vendor, detected, advertised, capacity), **found)
    none = f"{resource} is not in the Node's allocatable" if advertised is None else f"{resource} allocatable is 0"
    return Advertising(verdict=NOT_ADVERTISED, message=f"{what} found, not advertised: {none}",
                       remedy=_deploy_remedy(vendor, advertised), **found)


def _deploy_remedy(vendor, advertised):
    if advertised is None:  # no plugin of this vendor ever registered with this kubelet
        plugin = ("NVIDIA's device plugin (helm install nvdp nvdp/nvidia-device-plugin ...) or GPU operator"
                  if vendor == "nvidia" else "AMD's device plugin (k8s-ds-amdgpu-dp.yaml) or GPU operator")
        return (f"deploy {plugin} on the cluster, with a nodeSelector or toleration that lets it run on this "
                "node (docs/gpu.md, \"On the cluster\")")
    return ("the device plugin registered and reports no GPU it can use: read its pod's log on this node "
            "(kubectl logs -n <its namespace> <its pod on this node>), and check the driver on the node"
            + (" (nvidia-smi)" if vendor == "nvidia" else " (ls /dev/kfd /dev/dri)"))


def _fewer_remedy(vendor, detected, advertised, capacity):
    tool = "nvidia-smi" if vendor == "nvidia" else "ls /dev/dri"
    if capacity is not None and capacity > advertised:
        return (f"the device plugin reports {capacity - advertised} GPU(s) unhealthy: read its pod's log on this "
                f"node, and {tool} on the node")
    return (f"the device plugin does not see {detected - advertised} of the GPUs on the PCI bus: "
            f"{tool} on the node lists what the driver sees (a GPU the driver lost, or one given to a VM)")
