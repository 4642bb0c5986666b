"""Issue 29 in a booted machine: a node with a fake NVIDIA GPU joins through the package
(gpu = auto), and the real containerd 2.x starts with the config we generate, runs a pod
sandbox through NVIDIA's runtime, and the operator's config is back after unbootstrap.

The machine's side, as the kernel and NVIDIA's tools show it:
- the PCI bus: /sys/bus/pci/devices is a prepared tree bound read-only over the node's
  (nspawn --bind-ro; nspawn mounts /sys before the binds): an H100 (3D controller, 0x0302,
  vendor 0x10de, device 0x2330) and an Ethernet controller, each function a directory
  holding `class`, `vendor` and `device` (kernel Documentation/ABI/testing/sysfs-bus-pci).
  On a machine these entries are symlinks into /sys/devices; detect.py reads through them
  the same (the unit and integration tests lay them out as links, tests/gpu_fixtures.py);
- the driver: /proc/driver/nvidia/version, in the words of the 550.54.15 open module
  (tests/gpu_fixtures.py), bound over /proc/driver after boot: nspawn mounts /proc inside
  the container's PID namespace after its binds, so a bind given to nspawn would be hidden.
  The agent's unit needs the bind too (a drop-in of this test, BindReadOnlyPaths): its
  ProtectProc=invisible mounts a procfs of its own, which on bookworm's systemd 252 does
  not carry a bind made over the node's /proc (measured: the agent saw no version file
  and preflight stopped the join; trixie's 257 keeps it). A real driver's file is made by
  the kernel module in every procfs instance, so this is the fake's limit, not the unit's;
- nvidia-smi and nvidia-ctk: stand-ins answering the one question each is asked in the real
  tools' formats (nvidia-smi(1): `--query-gpu=name,driver_version --format=csv,noheader`
  prints one line per GPU, values separated by ", "; nvidia-ctk's cmd/nvidia-ctk/main.go
  prints "NVIDIA Container Toolkit CLI version X" then the commit);
- /usr/bin/nvidia-container-runtime: a stand-in that appends its arguments to a log, edits
  the bundle's spec on `create` (what the test machine cannot grant: its NVIDIA_CONTAINER_RUNTIME
  says what and why) and execs runc with them. The real one is a shim over runc too (NVIDIA/
  nvidia-container-toolkit, cmd/nvidia-container-runtime/README.md: on `create` it adds
  its prestart hook to the OCI spec, which gives GPUs to a container that asks for them,
  and forwards every command to runc), so every container, the pause sandbox first, goes
  through the configured runtime.

containerd is Debian forky's 2.1.9 (tests/e2e/containerd2.py), repacked as the release
tarball; runc and the CNI plugins are the node's release's own. The pause image is built
here (the node's /usr/bin/sleep and the libc it needs) and served by a private registry
through the registry_mirrors mapping, as in the registry-mirror scenario. containerd's state
is a tmpfs, and nspawn lets runc's keyring and BPF calls through (see the test).
"""

import re

import pytest

from aks_flex_node.steps import gpu
from tests import gpu_fixtures
from tests.e2e import node as n
from tests.e2e import registry as r

pytestmark = pytest.mark.e2e

PAUSE = "mcr.microsoft.com/oss/kubernetes/pause:3.9"
REGISTRY_CA = "/usr/local/share/aks-e2e/registry-ca.pem"
FAKE_PROC_DRIVER = "/usr/local/share/aks-e2e/gpu/proc-driver"
RUNTIME_LOG = "/var/log/e2e-nvidia-container-runtime.log"
AGENT_DROPIN = "/etc/systemd/system/aks-flex-node-agent.service.d/e2e-fake-gpu.conf"
CONFIG = "/etc/containerd/config.toml"
CONTAINERD = "/usr/local/bin/containerd"
CTR = "/usr/local/bin/ctr"
OPERATORS_CONFIG = b"# the operator's own containerd config, from before aks-flex-node\nversion = 2\n"
ARCH_LIBS = "usr/lib/x86_64-linux-gnu"  # the base roots are amd64 (tests/e2e/mirror.py, ARCH)

NVIDIA_SMI = f"""#!/bin/sh
# Stand-in nvidia-smi (aks-flex-node e2e): the one query aks-flex-node asks, answered as
# nvidia-smi(1) does with --format=csv,noheader: one line per GPU, values separated by ", ".
[ "$*" = "--query-gpu=name,driver_version --format=csv,noheader" ] || {{ echo "stand-in: $* not understood" >&2; exit 2; }}
echo "{gpu_fixtures.H100['name']}, {gpu_fixtures.DRIVER}"
"""
NVIDIA_CTK = """#!/bin/sh
# Stand-in nvidia-ctk (aks-flex-node e2e): `--version` as NVIDIA's cmd/nvidia-ctk prints it.
[ "$*" = "--version" ] || { echo "stand-in: $* not understood" >&2; exit 2; }
echo "NVIDIA Container Toolkit CLI version 1.17.4"
echo "commit: 0000000000000000000000000000000000000000"
"""
NVIDIA_CONTAINER_RUNTIME = f"""#!/usr/bin/python3
# Stand-in nvidia-container-runtime (aks-flex-node e2e): records each call, then is runc,
# as the real one is for a container that asks for no GPU. Like the real one it edits the
# bundle's config.json in place on `create` (the real one adds its prestart hook); it drops
# what the machine running the e2e tests cannot grant inside a container: the pause
# container's oom_score_adj (-998; lowering it needs CAP_SYS_RESOURCE, which that machine
# lacks itself) and the cgroup limits but the devices' (its cgroup tree delegates no cpu or
# memory controller to the container: runc found no cpu.weight).
import json, os, sys
args = sys.argv[1:]
with open("{RUNTIME_LOG}", "a") as log:
    log.write(" ".join(args) + "\\n")
if "create" in args and "--bundle" in args:
    spec_path = os.path.join(args[args.index("--bundle") + 1], "config.json")
    with open(spec_path) as f:
        spec = json.load(f)
    spec.get("process", {{}}).pop("oomScoreAdj", None)
    resources = spec.get("linux", {{}}).get("resources")
    if resources:
        spec["linux"]["resources"] = {{k: v for k, v in resources.items() if k == "devices"}}
    with open(spec_path, "w") as f:
        json.dump(spec, f)
os.execv("/usr/local/bin/runc", ["/usr/local/bin/runc", *args])
"""


def fake_gpu_machine(directory):
    """(the PCI bus, the driver's /proc/driver) of a machine with one H100, on the host."""
    bus = directory / "sys-bus-pci-devices"
    for address, (pci_class, vendor, device) in {"0000:00:03.0": (0x020000, 0x8086, 0x10d3),
                                                 "0000:01:00.0": (0x030200, 0x10de, gpu_fixtures.H100["device"])}.items():
        (bus / address).mkdir(parents=True)
        for name, value in (("class", f"0x{pci_class:06x}"), ("vendor", f"0x{vendor:04x}"), ("device", f"0x{device:04x}")):
            (bus / address / name).write_text(value + "\n")
    proc_driver = directory / "proc-driver"
    (proc_driver / "nvidia").mkdir(parents=True)
    (proc_driver / "nvidia/version").write_text(gpu_fixtures.NVIDIA_VERSION_TEXT)
    return bus, proc_driver


def pause_image(base_root, path):
    """A pause image that really runs: the node's own sleep and the libc and loader it needs."""
    files = {"bin/sleep": (base_root / "usr/bin/sleep").read_bytes(),
             "lib/x86_64-linux-gnu/libc.so.6": (base_root / ARCH_LIBS / "libc.so.6").read_bytes(),
             "lib64/ld-linux-x86-64.so.2": (base_root / ARCH_LIBS / "ld-linux-x86-64.so.2").read_bytes()}
    return r.oci_image(path, files, tag="3.9", cmd=("/bin/sleep", "infinity"), executables=set(files))


def dump_tables(text):
    """{table: {key: value text}} of `containerd config dump`'s TOML (tables as headers,
    `key = value` lines under them: all this test reads)."""
    tables, current = {}, ""
    for line in text.splitlines():
        line = line.strip()
        header = re.fullmatch(r"\[([^\[\]]+)\]", line)
        if header:
            current = header.group(1)
            tables.setdefault(current, {})
        elif " = " in line:
            key, _, value = line.partition(" = ")
            tables.setdefault(current, {})[key.strip()] = value.strip()
    return tables


def test_an_nvidia_gpu_node_runs_its_pods_through_nvidias_runtime_on_containerd_2(
        boot_node, repo, containerd2_mirror, private_registry, base_root, tmp_path):
    mirror, registry = containerd2_mirror, private_registry
    assert mirror.versions["containerd"].split(".")[0] == "2", mirror.versions  # forky's, not the release's
    pause = pause_image(base_root, tmp_path / "pause")
    registry.push(pause, "oss/kubernetes/pause:3.9")
    bus, proc_driver = fake_gpu_machine(tmp_path / "gpu")

    def before_boot(box):
        box.write("/usr/bin/nvidia-smi", NVIDIA_SMI, 0o755)
        box.write("/usr/bin/nvidia-ctk", NVIDIA_CTK, 0o755)
        box.write("/usr/bin/nvidia-container-runtime", NVIDIA_CONTAINER_RUNTIME, 0o755)
        box.write(CONFIG, OPERATORS_CONFIG, 0o644)
        box.write(AGENT_DROPIN, f"[Service]\nBindReadOnlyPaths={FAKE_PROC_DRIVER}:/proc/driver\n", 0o644)

    node = boot_node(repo, mirror=mirror, extra_ports=[registry.port], before_boot=before_boot,
                     binds=[(bus, "/sys/bus/pci/devices", True), (proc_driver, FAKE_PROC_DRIVER, True)],
                     # runc makes each container a session keyring and attaches a BPF device
                     # filter to its cgroup: calls nspawn's seccomp filter refuses by default
                     # (systemd-nspawn(1), --system-call-filter), a machine's root makes them.
                     system_calls=["@keyring", "bpf"])
    node.c.run(["mount", "--bind", "-o", "ro", FAKE_PROC_DRIVER, "/proc/driver"])
    # containerd's overlayfs snapshotter cannot put its layers on the node's root, itself an
    # overlay (the sandbox's rootfs mount failed with EINVAL there: overlayfs takes no overlay
    # as its upper layer); a machine's /var/lib/containerd is on a disk's filesystem, here a
    # tmpfs. There before the join, it is not ours: unbootstrap leaves it.
    node.c.run(["mkdir", "-p", "/var/lib/containerd"])
    node.c.run(["mount", "-t", "tmpfs", "-o", "mode=0711", "tmpfs", "/var/lib/containerd"])
    node.c.copy_in(registry.ca.cert, REGISTRY_CA, 0o644)
    node.write_config({**n.endpoint_settings(node.emulator, mirror), "pause_image": PAUSE,
                       "registry_mirrors": f"mcr.microsoft.com={registry.origin}", "registry_ca_file": REGISTRY_CA})
    node.preseed(n.preseed_answers())
    apt = node.apt_get("install", "aks-flex-node", check=False)
    assert apt.returncode == 0, f"{apt.stdout[-3000:]}\n{apt.stderr[-5000:]}"
    status = n.wait_for_state(node, timeout=240)
    assert status["state"] == "succeeded", status

    # containerd 2.1.9 runs with our config.toml, which imports the NVIDIA drop-in.
    assert node.c.is_active("containerd") == "active", node.journal("containerd")
    version = node.c.run([CONTAINERD, "--version"]).stdout
    assert f" {mirror.versions['containerd']}" in version, version
    assert f"--config {CONFIG}" in node.c.run(["systemctl", "show", "-p", "ExecStart", "containerd"]).stdout
    assert node.c.read(gpu.DROPIN) == gpu.nvidia_dropin()
    assert f'imports = ["{gpu.DROPIN}"]'.encode() in node.c.read(CONFIG).splitlines()

    # What containerd made of it: the drop-in merged key by key into config.toml (2.x
    # migrates both to its version 3 schema): NVIDIA's runtime is the CRI default, runc and
    # the rest of config.toml stay.
    dump = node.c.run([CONTAINERD, "--config", CONFIG, "config", "dump"]).stdout
    tables = dump_tables(dump)
    runtime = "plugins.'io.containerd.cri.v1.runtime'.containerd"
    assert tables[runtime]["default_runtime_name"] == "'nvidia'", dump
    assert tables[f"{runtime}.runtimes.nvidia"]["runtime_type"] == "'io.containerd.runc.v2'", dump
    assert tables[f"{runtime}.runtimes.nvidia.options"]["BinaryName"] == "'/usr/bin/nvidia-container-runtime'"
    assert tables[f"{runtime}.runtimes.nvidia.options"]["SystemdCgroup"] == "true"
    assert tables[f"{runtime}.runtimes.runc.options"]["BinaryName"] == "'/usr/local/bin/runc'", dump
    images = "plugins.'io.containerd.cri.v1.images'"
    assert tables[f"{images}.pinned_images"]["sandbox"] == f"'{PAUSE}'", dump
    assert tables[f"{images}.registry"]["config_path"] == "'/etc/containerd/certs.d'", dump

    # The Node: AKS's accelerator label, our count and model.
    [registered] = n.cluster_nodes(node.emulator).values()
    labels = registered["metadata"]["labels"]
    assert labels[gpu.ACCELERATOR_LABEL] == "nvidia", labels
    assert labels[gpu.COUNT_LABEL] == "1" and labels[gpu.MODEL_LABEL] == "pci-10de-2330", labels

    # The kubelet's first call for any pod: a sandbox of the default runtime (no runtime
    # handler named). containerd's runc shim calls /usr/bin/nvidia-container-runtime to
    # create and start it, the stand-in hands each call to runc, and the pause container runs.
    socket = f"/proc/{node.c.leader}/root/run/containerd/containerd.sock"
    assert r.pull_image(socket, PAUSE) == pause.config_digest, node.journal("containerd")
    try:
        sandbox = r.run_pod_sandbox(socket, "gpu-e2e", "0f3c6b9e-gpu-e2e")
    except r.CriFailed as err:
        raise AssertionError(f"{err}\n{node.journal('containerd', 80)}\n"
                             f"{node.c.run(['cat', RUNTIME_LOG], check=False).stdout}") from None
    calls = node.c.run(["cat", RUNTIME_LOG]).stdout.splitlines()
    assert any(re.search(rf"\bcreate --bundle \S+/{sandbox} .*{sandbox}$", line) for line in calls), calls
    assert any(re.search(rf"\bstart {sandbox}$", line) for line in calls), calls
    tasks = node.c.run([CTR, "-n", "k8s.io", "tasks", "ls"]).stdout
    assert re.search(rf"^{sandbox}\s+\d+\s+RUNNING\b", tasks, re.M), tasks
    r.remove_pod_sandbox(socket, sandbox)

    # Leaving: config.toml is the operator's again, byte for byte; the drop-in is gone.
    left = node.c.run(["aks-flex-node", "unbootstrap", "--keep-cloud-resources"], check=False, timeout=600)
    assert left.returncode == 0, left.stdout[-3000:] + left.stderr[-3000:]
    assert node.c.read(CONFIG) == OPERATORS_CONFIG
    assert node.c.read(gpu.DROPIN) is None and not node.c.path(gpu.CONF_DIR).exists()
