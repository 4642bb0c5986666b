"""A machine with an accelerator joins as a GPU node (issue 29; docs/gpu.md).

What the `gpu` setting chooses (auto: the vendor found on the PCI bus; off; nvidia; amd),
and what a GPU node gets:
- NVIDIA: containerd runs every container through NVIDIA's runtime, as NVIDIA's container
  toolkit documents it for containerd (docs.nvidia.com/datacenter/cloud-native/
  container-toolkit, "Configuring containerd": a runtime "nvidia" whose BinaryName is
  /usr/bin/nvidia-container-runtime) and as AKS's own GPU nodes do: the default runtime, not
  a RuntimeClass (Azure/AgentBaker pkg/agent/baker.go: on an N-series size containerd's
  default_runtime_name is NVIDIA's runtime). The NVIDIA device plugin's own manifest and the
  GPU pods of Learn's "Use GPUs on AKS" name no runtimeClassName, so with a RuntimeClass
  they would get runc and see no GPU; a container that asks for none (no
  NVIDIA_VISIBLE_DEVICES) is run by nvidia-container-runtime as runc would run it.
  It is a drop-in of ours (DROPIN) that config.toml imports (runtime.containerd_config):
  config.toml keeps the rest, and is byte for byte what it was on a machine without one.
- AMD: nothing in containerd: AMD's device plugin (ROCm/k8s-device-plugin) hands a pod
  /dev/kfd and its /dev/dri nodes itself.
- Both: the label AKS gives its GPU nodes, kubernetes.azure.com/accelerator (Learn, "Use
  labels in an AKS cluster", Reserved labels: value `nvidia`; `amd` is our choice, no Learn
  page names one), a count and a model under our own prefix (the same page reserves
  kubernetes.azure.com/ for AKS, and nvidia.com/gpu.* are NVIDIA's GPU feature discovery's),
  and `gpu_taints`, empty by default (AKS's guidance: sku=gpu:NoSchedule).

Preflight (preflight_verdict) stops a join before any change when the GPU cannot be used:
no driver, a driver without the toolkit, a containerd that would drop the rest of its
config when importing the drop-in, a vendor named that is not there.
"""


from aks_flex_node.engine.step import INSTALL, Plan, Step, restart
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.gpu import advertised, detect
from aks_flex_node.steps import tracked
from aks_flex_node.steps.kinds import Kind

CONF_DIR = "/etc/containerd/conf.d"
DROPIN = CONF_DIR + "/aks-flex-node-nvidia.toml"
RUNTIME_NAME = "nvidia"  # NVIDIA's name for it, and the GPU operator's RuntimeClass handler
ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
COUNT_LABEL = "aks-flex-node/gpu-count"
MODEL_LABEL = "aks-flex-node/gpu-model"
ERROR, WARNING = "error", "warning"
# containerd merges an imported file into config.toml key by key from 2.0 on (containerd
# PR #9982); 1.x replaces a whole plugin's table with the imported one's (containerd issue
# #5837), which would leave the CRI plugin with nothing but the NVIDIA runtime.
MIN_CONTAINERD_MAJOR = 2

DEBIAN_DRIVER = ("add contrib non-free non-free-firmware to the APT sources, then apt install "
                 "linux-headers-$(uname -r) nvidia-driver firmware-misc-nonfree, and reboot "
                 "(wiki.debian.org/NvidiaGraphicsDrivers)")
UBUNTU_DRIVER = ("ubuntu-drivers install --gpgpu, and reboot (Ubuntu Server documentation, "
                 "\"NVIDIA drivers installation\")")
TOOLKIT = ("install nvidia-container-toolkit from NVIDIA's repository (docs.nvidia.com/datacenter/"
           "cloud-native/container-toolkit/latest/install-guide.html, \"Installing with Apt\"), then run again")
AMD_DRIVER = ("install AMD's amdgpu driver (amdgpu-install --usecase=dkms from AMD's repository, "
              "rocm.docs.amd.com, \"Installation via AMDGPU installer\"), and reboot")
SECURE_BOOT = ("; Secure Boot is on, so the module loads only when signed with a key the firmware "
               "trusts: enroll DKMS's key (mokutil --import /var/lib/dkms/mok.pub, wiki.debian.org/SecureBoot)")


class GpuError(FlexNodeError):
    """The `gpu` setting and what is on the PCI bus disagree; `code` says how."""


def nvidia_dropin():
    """NVIDIA's runtime for the CRI plugin, in containerd's version 2 schema (the one
    config.toml is written in; containerd 2.x migrates both alike): the runc shim with
    NVIDIA's runtime as its binary and systemd's cgroups, as runc's (the kubelet's driver)."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""# Written by aks-flex-node: this machine has an NVIDIA GPU (docs/gpu.md).
version = 2

[{cri}.containerd]
  default_runtime_name = "{RUNTIME_NAME}"

[{cri}.containerd.runtimes.{RUNTIME_NAME}]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.{RUNTIME_NAME}.options]
  BinaryName = "{detect.NVIDIA_RUNTIME}"
  SystemdCgroup = true
""".encode()


def inventory(ctx):
    """This run's detect.Inventory, read once (preflight's checks run in threads)."""
    with ctx._lock:
        if ctx.data.gpu is None:
            ctx.data.gpu = detect.detect(ctx.host)
        return ctx.data.gpu


def chosen(ctx):
    """(the vendor this node is a GPU node of, or None, why not). GpuError when the setting
    names a vendor that is not there. `auto` with both takes NVIDIA: an AMD GPU beside an
    NVIDIA one is most often the CPU's integrated graphics (preflight warns)."""
    setting = ctx.config.gpu
    if setting == "off":
        return None, "gpu = off"
    found = inventory(ctx)
    if setting == "auto":
        if found.unseen:
            return None, f"no GPU seen: {found.unseen}"
        if not found.vendors:
            return None, "no NVIDIA or AMD display or 3D controller on the PCI bus"
        return found.vendors[0], None
    if not found.of(setting):
        seen = found.unseen or f"none of the {len(found.gpus)} display or 3D controller(s) on the PCI bus is one"
        raise GpuError(f"gpu = {setting}, but no {detect.VENDOR_NAMES[setting]} GPU was found: {seen}",
                       remedy="set gpu = auto (or off) in the config, or check the card (lspci -nn)",
                       code="gpu-not-found")
    return setting, None


def _vendor(ctx):
    try:
        return chosen(ctx)[0]
    except GpuError:
        return None  # preflight and the gpu phase say why


def runtime_wanted(ctx):
    """(containerd is to run NVIDIA's runtime, why not): an NVIDIA GPU node whose toolkit is
    installed. Without the toolkit, a default runtime whose binary is not there would fail
    every container, the pause sandbox first: containerd keeps runc until the toolkit is
    there (preflight names it; a join told to go on anyway joins without the runtime)."""
    try:
        vendor, why = chosen(ctx)
    except GpuError as err:
        return False, err.message  # preflight and the gpu phase fail with it
    if vendor != "nvidia":
        return False, why
    if not inventory(ctx).nvidia_runtime:
        return False, (f"NVIDIA's container toolkit is not installed ({detect.NVIDIA_RUNTIME} does not exist): "
                       "containerd keeps runc until it is")
    return True, None


def _containerd_major(cfg):
    try:
        return int(str(cfg.containerd_version).split(".")[0])
    except ValueError:
        return None


def _check_containerd(cfg):
    major = _containerd_major(cfg)
    if major is not None and major < MIN_CONTAINERD_MAJOR:
        raise GpuError(f"containerd_version = {cfg.containerd_version!r}: containerd before 2.0 replaces the whole "
                       "CRI section of its config with an imported file's, so NVIDIA's runtime drop-in would drop "
                       "the rest of it (containerd issue #5837)",
                       remedy="set containerd_version to 2.0 or later (the default is), or gpu = off",
                       code="gpu-containerd-too-old")


def _model(found, vendor):
    """The model as the PCI bus names it (pci-<vendor>-<device>), never nvidia-smi's name: a
    label is on the kubelet's command line, and one that changed whenever nvidia-smi did not
    answer (a wedged driver, its 30 s timeout) would restart the kubelet on that pass and again
    on the next (the name is in the logs: nvidia-smi -L)."""
    ids = sorted({(g.vendor_id, g.device_id) for g in found.of(vendor)})
    if len(ids) > 1:
        return "mixed"
    vendor_id, device_id = ids[0]
    return f"pci-{vendor_id:04x}-{device_id:04x}" if device_id is not None else "unknown"


def _count(found, vendor):
    """The GPUs of `vendor` on the PCI bus: the count label's value, and what the device
    plugin is expected to advertise (advertising)."""
    return len(found.of(vendor))


def gpus_found(ctx):
    """(vendor, count) of this GPU node as this run found them, or None: not a GPU node, or
    its GPUs not read in this run (the gpu phase did not run). Reads nothing itself."""
    if ctx.config.gpu == "off" or ctx.data.gpu is None:
        return None
    vendor = _vendor(ctx)
    return None if vendor is None else (vendor, _count(ctx.data.gpu, vendor))


def advertising(ctx, now):
    """What status.json says of whether the device plugin advertised this GPU node's GPUs
    (gpu/advertised.py judge: the Node node-ready read in this run against gpus_found),
    as of `now` (Unix seconds); None on a machine that is not a GPU node."""
    found = gpus_found(ctx)
    if found is None:
        return None
    vendor, count = found
    try:
        started = ctx.host.lstat(advertised.KUBELET_SOCKET)
    except OSError:  # not a directory on the way, not ours to read: no grace then
        started = None
    up_for = None if started is None else now - started.st_mtime
    return advertised.judge(vendor, count, ctx.data.node_read, ctx.config.machine_name, up_for).to_dict()


def node_labels(ctx):
    """The labels a GPU node registers with ([] on any other): the accelerator, the count
    and the model; a key the operator's node_labels sets is theirs."""
    vendor = _vendor(ctx)
    if vendor is None:
        return []
    found = inventory(ctx)
    theirs = {label.partition("=")[0] for label in ctx.config.node_labels}
    ours = [(ACCELERATOR_LABEL, vendor), (COUNT_LABEL, str(_count(found, vendor))),
            (MODEL_LABEL, _model(found, vendor))]
    return [f"{key}={value}" for key, value in ours if key not in theirs]


def node_taints(ctx):
    """`gpu_taints` on a GPU node ([] on any other), less those node_taints has already."""
    if _vendor(ctx) is None:
        return []
    return [taint for taint in ctx.config.gpu_taints if taint not in ctx.config.node_taints]


def _driver_remedy(ctx):
    info = (ctx.host.read_bytes("/etc/os-release") or b"").decode("utf-8", "replace")
    ids = {line.partition("=")[2].strip().strip('"') for line in info.splitlines()
           if line.startswith(("ID=", "ID_LIKE="))}
    ids = {word for value in ids for word in value.split()}
    if "ubuntu" in ids:
        return UBUNTU_DRIVER
    if "debian" in ids:
        return DEBIAN_DRIVER
    return f"Debian: {DEBIAN_DRIVER}; Ubuntu: {UBUNTU_DRIVER}"


def preflight_verdict(ctx):
    """(severity, message, remedy) of what stands between this GPU and its pods, or None."""
    try:
        vendor, _why = chosen(ctx)
        if vendor == "nvidia":
            _check_containerd(ctx.config)
    except GpuError as err:
        return ERROR, err.message, err.remedy
    if vendor is None:
        return None
    found = inventory(ctx)
    shown = detect.describe(found, vendor)
    boot = SECURE_BOOT if found.secure_boot else ""
    if vendor == "amd":
        if isinstance(found.amdgpu_loaded, detect.Unknown):
            return WARNING, f"{shown}: cannot tell whether the amdgpu driver is loaded: {found.amdgpu_loaded.reason}", \
                AMD_DRIVER
        if not found.amdgpu_loaded:
            return ERROR, f"{shown} without its driver: the amdgpu module is not loaded", AMD_DRIVER + boot
        if not found.amd_kfd:
            return WARNING, f"{shown}: amdgpu is loaded but {detect.AMD_KFD} does not exist, so ROCm workloads " \
                "cannot reach the GPU", "use a kernel built with CONFIG_HSA_AMD (Debian's and Ubuntu's are)"
        return None
    if found.nvidia_driver is None:
        return ERROR, f"{shown} without its driver: {detect.NVIDIA_VERSION} does not exist (no NVIDIA kernel " \
            "module is loaded)", _driver_remedy(ctx) + boot
    if not found.nvidia_runtime:
        return ERROR, f"NVIDIA driver {found.nvidia_driver or '(version unread)'} is loaded, but NVIDIA's container " \
            f"toolkit is not installed ({detect.NVIDIA_RUNTIME} does not exist)", TOOLKIT
    if found.secure_boot and found.nvidia_unsigned:
        return WARNING, "the nvidia module is unsigned (it tainted the kernel 'E') while Secure Boot is on", \
            "sign it with an enrolled key (wiki.debian.org/SecureBoot), or the next boot may not load it"
    if ctx.config.gpu == "auto" and found.of("amd"):
        return WARNING, f"gpu = auto found {shown} and {detect.describe(found, 'amd')}: this node is an NVIDIA " \
            "GPU node (an AMD one beside NVIDIA's is most often the CPU's integrated graphics)", \
            "nothing, or set gpu = amd in the config to make it an AMD GPU node"
    return None


class GpuStep(tracked.OwnsPaths, Step):
    name = "gpu"
    help = "give containerd NVIDIA's runtime on a machine with an NVIDIA GPU (the gpu setting)"
    branch = INSTALL
    needs = ("containerd",)

    # It applies in every mode and on every machine: on one without an NVIDIA GPU its check
    # says why it has nothing to write, and removes what an earlier run wrote (a card taken
    # out, gpu = off set since).

    def check(self, ctx):
        plan = Plan()
        vendor, _why = chosen(ctx)  # GpuError: the setting names a vendor not there; off reads nothing
        wanted, why = runtime_wanted(ctx)
        owes = (restart("containerd", f"{DROPIN} changed"),)
        if wanted:
            _check_containerd(ctx.config)
            tracked.plan_file(ctx, plan, self.name, DROPIN, nvidia_dropin(), 0o644,
                              why="containerd's NVIDIA runtime", owes=owes)
            found = inventory(ctx)
            plan.noop_reason = (f"containerd's NVIDIA runtime as wanted for {detect.describe(found, vendor)} (driver "
                                f"{found.nvidia_driver or 'unread'}, toolkit {found.toolkit_version or 'unread'})")
            return plan
        for entry in (ctx.ledger.get(Kind.FILE, DROPIN), ctx.ledger.get(Kind.PARENT_DIR, CONF_DIR)):
            if entry is not None:
                for action in tracked.plan_undo_paths(ctx, [entry]).actions:
                    plan.add(action.what, f"no NVIDIA runtime is wanted now ({why or vendor})", action.run,
                             owes=owes if entry["kind"] == Kind.FILE else ())
        plan.noop_reason = why
        if vendor == "amd":
            plan.noop_reason = (f"{detect.describe(inventory(ctx), vendor)}: containerd needs no runtime of AMD's "
                                "(its device plugin hands pods /dev/kfd and /dev/dri)")
        return plan
