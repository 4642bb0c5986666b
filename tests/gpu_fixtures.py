"""A machine's accelerators under a scratch root, laid out as the kernel shows them, for
aks_flex_node/gpu/detect.py to find (docs/gpu.md):

- a PCI function's directory under /sys/devices/pci0000:00/<address> holding `class`,
  `vendor` and `device` ("0x030200\\n", "0x10de\\n", "0x2330\\n": the kernel's
  Documentation/ABI/testing/sysfs-bus-pci), and /sys/bus/pci/devices/<address> a relative
  symlink to it, as sysfs makes it;
- NVIDIA's driver: /proc/driver/nvidia/version in the module's own words, /sys/module/nvidia;
  the stand-in nvidia-smi's GPUs in $FAKE_STATE_DIR/nvidia-gpus.json (tests/fakes/bin);
- NVIDIA's container toolkit: /usr/bin/nvidia-container-runtime;
- AMD's: /sys/module/amdgpu and /dev/kfd (a regular file here: only its presence is read);
- Secure Boot: efivarfs's SecureBoot variable, 4 attribute bytes then the value.
"""

import json
import os

H100 = {"device": 0x2330, "name": "NVIDIA H100 80GB HBM3"}
MI300X = {"device": 0x74a1}
DRIVER = "550.54.15"
# The first line of /proc/driver/nvidia/version as the open kernel module of 550.54.15 writes it.
NVIDIA_VERSION_TEXT = (f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}  Release Build  "
                       "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:00:20 UTC 2024\n"
                       "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
SECURE_BOOT = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _write(root, node_path, text, mode=0o644):
    path = os.path.join(str(root), node_path.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    os.chmod(path, mode)
    return path


def pci_function(root, address, vendor, device, pci_class=0x030200):
    """A PCI function in sysfs: its attributes and the bus's symlink to it."""
    directory = f"/sys/devices/pci0000:00/{address}"
    for name, value in (("class", f"0x{pci_class:06x}"), ("vendor", f"0x{vendor:04x}"), ("device", f"0x{device:04x}")):
        _write(root, f"{directory}/{name}", value + "\n")
    link = os.path.join(str(root), f"sys/bus/pci/devices/{address}")
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(f"../../../devices/pci0000:00/{address}", link)


def nvidia_gpus(root, state_dir, count=1, driver=True, toolkit=True, model=H100):
    """`count` NVIDIA GPUs (3D controllers), with the driver loaded and the toolkit
    installed unless told otherwise; an Ethernet controller beside them, which is no GPU."""
    pci_function(root, "0000:00:03.0", 0x8086, 0x10d3, pci_class=0x020000)
    for i in range(count):
        pci_function(root, f"0000:{i + 1:02x}:00.0", 0x10de, model["device"], pci_class=0x030200)
    if driver:
        _write(root, "/proc/driver/nvidia/version", NVIDIA_VERSION_TEXT)
        os.makedirs(os.path.join(str(root), "sys/module/nvidia"), exist_ok=True)
    if toolkit:
        _write(root, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\nexit 0\n", 0o755)
    with open(os.path.join(str(state_dir), "nvidia-gpus.json"), "w") as f:
        json.dump({"gpus": [{"name": model["name"]}] * count, "driver_version": DRIVER,
                   "toolkit_version": "1.17.4"}, f)


def amd_gpus(root, count=1, driver=True):
    """`count` AMD Instinct MI300X, processing accelerators (class 0x1200) as they report
    themselves, amdgpu loaded and /dev/kfd there unless told otherwise."""
    for i in range(count):
        pci_function(root, f"0000:{i + 0x11:02x}:00.0", 0x1002, MI300X["device"], pci_class=0x120000)
    if driver:
        os.makedirs(os.path.join(str(root), "sys/module/amdgpu"), exist_ok=True)
        _write(root, "/dev/kfd", "")


def secure_boot(root, on=True):
    """efivarfs's SecureBoot variable: attributes 0x06 (boot service and runtime access), then the value."""
    _write(root, SECURE_BOOT, bytes([0x06, 0, 0, 0, 1 if on else 0]))
