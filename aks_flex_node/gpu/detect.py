"""What accelerators this machine has, read from sysfs and procfs, not from tools that may
be missing (a GPU whose driver is not installed has no nvidia-smi either).

- The GPUs: PCI functions by vendor ID, NVIDIA 0x10de and AMD 0x1002 (the PCI ID
  repository, pci-ids.ucw.cz), and class (PCI Code and ID Assignment Specification: base
  class 03h, display controller, subclass 00h VGA, 02h 3D, 80h other; 12h, processing
  accelerator), under /sys/bus/pci/devices/*/class and vendor (the kernel's
  Documentation/ABI/testing/sysfs-bus-pci). NVIDIA's GPUs are VGA or 3D controllers; AMD's
  Instinct accelerators are display controllers of class 0x0380 (MI200: an MI250X is
  "Display controller [0380]: ... [1002:740c]") or
  processing accelerators, 0x1200 (MI300X: `lspci -nn` shows "Processing accelerators
  [1200]: ... [1002:74a1]"), which another vendor's NPU is too, so 0x1200 counts for AMD only.
- NVIDIA's driver: /proc/driver/nvidia/version, which its kernel module makes once loaded
  (NVIDIA driver README, "Installed Components" / procfs interface); nvidia-smi, where
  present, names the models and the driver version.
- AMD's: the amdgpu module in /sys/module, and /dev/kfd, the ROCm compute interface the
  device plugin hands to containers (ROCm docs, "GPU isolation techniques").
- NVIDIA's container toolkit: /usr/bin/nvidia-container-runtime, the file containerd will be
  told to run (steps/gpu.py), and `nvidia-ctk --version` for its version.
- Secure Boot: the EFI global variable SecureBoot (UEFI spec, "Globally Defined Variables",
  GUID 8be4df61-93ca-11d2-aa0d-00e098032b8c) in efivarfs: 4 bytes of attributes, then the
  value, 1 when on (the kernel's Documentation/filesystems/efivarfs.rst).

Every read goes through the Host (its careful read: no link followed at the last component,
no FIFO waited on, at most a page); every command through Host.run_system, so under a root
prefix only the stand-ins answer. Reading only: nothing here changes the machine.
"""

import dataclasses
import re
from typing import Optional, Tuple

from aks_flex_node.host import careful_read
from aks_flex_node.host.run import CommandError

PCI_DEVICES = "/sys/bus/pci/devices"
CLASSES = {0x0300: "VGA", 0x0302: "3D", 0x0380: "display", 0x1200: "accelerator"}
VENDORS = {0x10de: "nvidia", 0x1002: "amd"}
# The classes a vendor's GPU shows as; "other" is any other vendor's (an Intel iGPU, a BMC's VGA).
GPU_CLASSES = {"nvidia": {0x0300, 0x0302}, "amd": {0x0300, 0x0302, 0x0380, 0x1200}, "other": {0x0300, 0x0302}}
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}
NVIDIA_VERSION = "/proc/driver/nvidia/version"
NVIDIA_RUNTIME = "/usr/bin/nvidia-container-runtime"
AMD_KFD = "/dev/kfd"
SECURE_BOOT = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
# A sysfs attribute holds at most a page, and stat reports 4096 for it
# (the kernel's Documentation/filesystems/sysfs.rst).
ATTRIBUTE_MAX = 4096
MAX_DEVICES = 1024  # PCI functions read at most (a machine has tens to a few hundred)
# nvidia-smi(1): --query-gpu takes a comma list of fields (`nvidia-smi --help-query-gpu`:
# name, driver_version); --format=csv,noheader prints one line per GPU, the values
# separated by ", " and no header line.
NVIDIA_SMI_QUERY = ("nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader")
_DRIVER_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")
_CTK_VERSION = re.compile(r"version\s+(\d+(?:\.\d+)+)")


@dataclasses.dataclass(frozen=True)
class PciGpu:
    address: str  # the PCI address, e.g. 0000:01:00.0
    vendor: str  # nvidia | amd | other
    vendor_id: int
    device_id: Optional[int]
    kind: str  # VGA | 3D | display | accelerator


@dataclasses.dataclass(frozen=True)
class Inventory:
    """What was found. `gpus` are every vendor's; `unseen` says why the PCI bus could not
    be read (a container without /sys/bus/pci), else None."""

    gpus: Tuple[PciGpu, ...] = ()
    unseen: Optional[str] = None
    nvidia_driver: Optional[str] = None  # the loaded module's version, "" when loaded but unparsed
    nvidia_models: Tuple[str, ...] = ()  # from nvidia-smi, one per GPU
    nvidia_smi: Optional[str] = None  # why nvidia-smi told nothing, when it did not
    nvidia_runtime: bool = False  # /usr/bin/nvidia-container-runtime is a file
    toolkit_version: Optional[str] = None
    amdgpu_loaded: object = False  # True, False or Unknown
    amd_kfd: bool = False
    secure_boot: Optional[bool] = None  # None: no EFI variable to read
    nvidia_unsigned: bool = False  # the loaded nvidia module tainted the kernel 'E'

    def of(self, vendor):
        return tuple(g for g in self.gpus if g.vendor == vendor)

    @property
    def vendors(self):
        return tuple(v for v in VENDORS.values() if self.of(v))


def _attribute(host, path):
    """The text of a sysfs or procfs attribute, stripped, or None when absent or unreadable."""
    try:
        return host.read_carefully(path, ATTRIBUTE_MAX).decode("ascii", "replace").strip()
    except careful_read.Unsafe:
        return None


def _hex(text):
    try:
        return int(text, 16) if text is not None else None
    except ValueError:
        return None


def pci_gpus(host):
    """(the GPUs on the PCI bus, every vendor's, why the bus was not seen or None)."""
    names = host.listdir(PCI_DEVICES)
    if names is None:
        return (), f"{PCI_DEVICES} does not exist (a container, or no PCI bus)"
    found = []
    for name in names[:MAX_DEVICES]:
        base = f"{PCI_DEVICES}/{name}"
        pci_class = _hex(_attribute(host, f"{base}/class"))
        if pci_class is None or (pci_class >> 8) not in CLASSES:
            continue
        vendor_id = _hex(_attribute(host, f"{base}/vendor"))
        vendor = VENDORS.get(vendor_id, "other")
        if vendor_id is None or (pci_class >> 8) not in GPU_CLASSES[vendor]:
            continue
        found.append(PciGpu(name, vendor, vendor_id, _hex(_attribute(host, f"{base}/device")),
                            CLASSES[pci_class >> 8]))
    return tuple(found), None


def nvidia_driver(host):
    """The loaded NVIDIA kernel module's version from /proc/driver/nvidia/version ("" when
    its first line names none we can read), or None when no NVIDIA module is loaded."""
    text = _attribute(host, NVIDIA_VERSION)
    if text is None:
        return None
    match = _DRIVER_VERSION.search(text.splitlines()[0] if text else "")
    return match.group(1) if match else ""


def parse_nvidia_smi(stdout):
    """[(name, driver_version)] from `nvidia-smi --query-gpu=name,driver_version
    --format=csv,noheader`: one line per GPU, the fields separated by ", " (a name holds
    no comma in NVIDIA's product names, but the version is split off the end all the same)."""
    rows = []
    for line in stdout.splitlines():
        name, sep, version = line.strip().rpartition(", ")
        if sep and name:
            rows.append((name.strip(), version.strip()))
    return rows


def ask_nvidia_smi(host):
    """(models, why nothing): nvidia-smi's names of the GPUs, or why it told none. Bounded:
    a wedged driver can make nvidia-smi hang, so it gets 30 seconds."""
    try:
        result = host.run_system(list(NVIDIA_SMI_QUERY), timeout=30, ok_codes=range(256))
    except CommandError as err:
        return (), f"nvidia-smi could not run: {err.message}"
    if result.skipped:
        return (), "nvidia-smi is not run under a root prefix"
    if result.returncode != 0:
        # nvidia-smi(1), RETURN VALUE: 9 "NVIDIA driver is not loaded", 6 "no devices found"...
        return (), f"nvidia-smi exited {result.returncode}: {(result.stdout + result.stderr).strip()[:200]!r}"
    rows = parse_nvidia_smi(result.stdout)
    return tuple(name for name, _version in rows), None if rows else "nvidia-smi listed no GPU"


def toolkit_version(host):
    """`nvidia-ctk --version`'s version ("NVIDIA Container Toolkit CLI version 1.17.4"), or None."""
    try:
        result = host.run_system(["nvidia-ctk", "--version"], timeout=30, ok_codes=range(256))
    except CommandError:
        return None
    if result.skipped or result.returncode != 0:
        return None
    match = _CTK_VERSION.search(result.stdout)
    return match.group(1) if match else None


def secure_boot(host):
    """True or False from the SecureBoot EFI variable, None when there is none to read
    (BIOS boot, no efivarfs mounted)."""
    try:
        raw = host.read_carefully(SECURE_BOOT, ATTRIBUTE_MAX)
    except careful_read.Unsafe:
        return None
    return raw[4] == 1 if len(raw) >= 5 else None


def nvidia_unsigned(host):
    """The loaded nvidia module tainted the kernel with 'E', an unsigned module loaded
    (the kernel's Documentation/admin-guide/tainted-kernels.rst; /sys/module/<name>/taint,
    Documentation/ABI/testing/sysfs-module)."""
    return "E" in (_attribute(host, "/sys/module/nvidia/taint") or "")


def detect(host):
    """Everything above, read once. A vendor's driver and tools are asked only when a GPU of
    that vendor is on the bus."""
    gpus, unseen = pci_gpus(host)
    values = {"gpus": gpus, "unseen": unseen}
    if any(g.vendor == "nvidia" for g in gpus):
        driver = nvidia_driver(host)
        values.update(nvidia_driver=driver, nvidia_runtime=host.kind(NVIDIA_RUNTIME) == "file",
                      secure_boot=secure_boot(host), nvidia_unsigned=driver is not None and nvidia_unsigned(host))
        if driver is not None:
            values["nvidia_models"], values["nvidia_smi"] = ask_nvidia_smi(host)
        if values["nvidia_runtime"]:
            values["toolkit_version"] = toolkit_version(host)
    if any(g.vendor == "amd" for g in gpus):
        values.update(amdgpu_loaded=host.kernel.module_loaded("amdgpu"), amd_kfd=host.exists(AMD_KFD),
                      secure_boot=secure_boot(host))
    return Inventory(**values)


def describe(inventory, vendor):
    """'2 NVIDIA GPU(s) (0000:01:00.0, 0000:02:00.0)', for messages."""
    gpus = inventory.of(vendor)
    shown = ", ".join(g.address for g in gpus[:4]) + (" ..." if len(gpus) > 4 else "")
    return f"{len(gpus)} {VENDOR_NAMES[vendor]} GPU(s) ({shown})"

