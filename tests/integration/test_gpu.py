"""A GPU machine joins as a GPU node (issue 29), through the real CLI against the emulator:
its accelerators are a fake sysfs and procfs under the scratch root (tests/gpu_fixtures.py),
nvidia-smi and nvidia-ctk the stand-ins (tests/fakes/bin). What is asserted is the state
left in the root (containerd's config and drop-in, the kubelet's command line), the Node
the stand-in kubelet registered, and what preflight names."""

import json
import os
import time

from aks_flex_node.gpu import advertised
from aks_flex_node.health import conditions as hc
from aks_flex_node.steps import gpu
from tests import gpu_fixtures, harness
from tests.apiserver_fixtures import admin_client
from tests.emulator import constants as C

OPERATORS_CONFIG = b"# the operator's own containerd config, from before aks-flex-node\nversion = 2\n"


def registered_labels(node):
    [registered] = [n for n in node.emu.state()["nodes"].get(C.CLUSTER_NAME, [])
                    if n["metadata"]["name"] == harness.MACHINE_NAME]
    return registered["metadata"]["labels"]


def kubelet_dropin(node):
    return node.read("/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf").decode()


def test_an_nvidia_gpu_node_joins_with_the_runtime_and_labels_and_leaves_containerd_as_it_was(node):
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir, count=2)
    harness.write_config(node.root, node.emu, node.wrapper, extra={"gpu_taints": "sku=gpu:NoSchedule"})
    config_path = node.path("/etc/containerd/config.toml")
    gpu_fixtures._write(node.root, "/etc/containerd/config.toml", OPERATORS_CONFIG)

    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    statuses = {p["name"]: p["status"] for p in summary["phases"]}
    assert statuses["gpu"] == "changed" and statuses["containerd-config"] == "changed"
    # containerd: NVIDIA's runtime in our drop-in, which config.toml imports; restarted once.
    assert node.read(gpu.DROPIN) == gpu.nvidia_dropin()
    assert node.read("/etc/containerd/config.toml").splitlines()[2] == \
        b'imports = ["/etc/containerd/conf.d/aks-flex-node-nvidia.toml"]'
    assert summary.get("owed", []) == []
    # The node: AKS's accelerator label, the count and the model, the taint asked for.
    dropin = kubelet_dropin(node)
    assert "kubernetes.azure.com/accelerator=nvidia" in dropin and "aks-flex-node/gpu-count=2" in dropin
    assert "--register-with-taints=sku=gpu:NoSchedule" in dropin
    labels = registered_labels(node)
    assert labels["kubernetes.azure.com/accelerator"] == "nvidia"
    assert labels["aks-flex-node/gpu-count"] == "2"
    assert labels["aks-flex-node/gpu-model"] == "pci-10de-2330"  # the PCI bus's, stable whatever nvidia-smi says
    assert labels["team"] == "edge"  # the operator's stay

    proc, again = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert {p["name"]: p["status"] for p in again["phases"]}["gpu"] == "unchanged"

    proc = node.cli("unbootstrap", "--keep-cloud-resources")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(config_path, "rb") as f:
        assert f.read() == OPERATORS_CONFIG  # byte for byte
    assert not node.files() & {gpu.DROPIN, gpu.CONF_DIR}


def test_a_gpu_without_its_driver_stops_in_preflight_with_the_remedy_and_changes_nothing(node):
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir, driver=False, toolkit=False)
    before = node.files()
    proc = node.cli("bootstrap")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "--ignore-preflight-errors=gpu" in proc.stderr
    assert not [p for p in node.files() - before if p.startswith(("/usr/local", "/opt", "/etc/containerd"))]
    proc, report = node.cli_json("preflight")
    check = {c["name"]: c for c in report["checks"]}["gpu"]
    assert check["status"] == "error" and "/proc/driver/nvidia/version" in check["message"]
    assert "nvidia-driver" in check["remedy"] and "linux-headers" in check["remedy"]  # the root is Debian 12


def test_a_driver_without_the_toolkit_is_named_with_nvidias_repository(node):
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir, toolkit=False)
    proc, report = node.cli_json("preflight")
    check = {c["name"]: c for c in report["checks"]}["gpu"]
    assert proc.returncode == 3 and check["status"] == "error"
    assert "/usr/bin/nvidia-container-runtime" in check["message"] and "nvidia-container-toolkit" in check["remedy"]


def test_secure_boot_is_named_in_the_remedy_of_a_driver_that_did_not_load(node):
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir, driver=False)
    gpu_fixtures.secure_boot(node.root, on=True)
    _proc, report = node.cli_json("preflight")
    assert "mokutil" in {c["name"]: c for c in report["checks"]}["gpu"]["remedy"]


def test_a_containerd_before_2_0_is_refused_on_a_gpu_node(node):
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir)
    harness.write_config(node.root, node.emu, node.wrapper, extra={"containerd_version": "1.7.20"})
    _proc, report = node.cli_json("preflight")
    check = {c["name"]: c for c in report["checks"]}["gpu"]
    assert check["status"] == "error" and "containerd_version" in check["message"]


def test_an_amd_gpu_node_is_labelled_and_containerd_is_left_alone(node):
    gpu_fixtures.amd_gpus(node.root, count=8)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert {p["name"]: p["status"] for p in summary["phases"]}["gpu"] == "unchanged"
    assert b"imports" not in node.read("/etc/containerd/config.toml")
    assert gpu.DROPIN not in node.files()
    labels = registered_labels(node)
    assert labels["kubernetes.azure.com/accelerator"] == "amd"
    assert labels["aks-flex-node/gpu-count"] == "8" and labels["aks-flex-node/gpu-model"] == "pci-1002-74a1"


def test_gpu_off_makes_a_gpu_machine_a_plain_node_and_asks_nothing_of_it(node):
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir)
    harness.write_config(node.root, node.emu, node.wrapper, extra={"gpu": "off"})
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    gpu_phase = {p["name"]: p for p in summary["phases"]}["gpu"]
    assert gpu_phase["status"] == "unchanged" and "gpu = off" in json.dumps(gpu_phase)
    assert b"imports" not in node.read("/etc/containerd/config.toml")
    assert "kubernetes.azure.com/accelerator" not in registered_labels(node)
    assert node.fake.calls("nvidia-smi") == [] and node.fake.calls("nvidia-ctk") == []
    assert "gpu" not in summary and gpu_condition(node) is None  # nothing said of GPUs


def test_a_gpu_node_set_to_gpu_off_loses_the_runtime_and_containerd_is_restarted(node):
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir)
    proc = node.cli("bootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    harness.write_config(node.root, node.emu, node.wrapper, extra={"gpu": "off"})
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert {p["name"]: p["status"] for p in summary["phases"]}["gpu"] == "changed"
    assert gpu.DROPIN not in node.files() and gpu.CONF_DIR not in node.files()
    assert b"imports" not in node.read("/etc/containerd/config.toml")
    services = [c["what"] for p in summary["phases"] if p["name"] == "services" for c in p["changes"]]
    assert "restart containerd" in services


def test_a_driver_and_toolkit_upgraded_between_passes_restart_nothing(node):
    """apt upgrading the driver or the toolkit changes neither file of ours: the next pass
    checks the runtime again and owes containerd no restart (issue 29, item 5)."""
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir)
    proc, planned = node.cli_json("bootstrap", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    planned = {p["name"]: [c["what"] for c in p["changes"]] for p in planned["phases"]}
    assert planned["gpu"] == [f"write {gpu.DROPIN} (mode 0644)"] and "start containerd" in planned["services"]
    assert gpu.DROPIN not in node.files()  # a dry run writes nothing
    node.cli("bootstrap", check=True)
    upgraded = gpu_fixtures.NVIDIA_VERSION_TEXT.replace(gpu_fixtures.DRIVER, "570.86.15")
    gpu_fixtures._write(node.root, "/proc/driver/nvidia/version", upgraded)
    with open(f"{node.state_dir}/nvidia-gpus.json") as f:
        state = json.load(f)
    with open(f"{node.state_dir}/nvidia-gpus.json", "w") as f:
        json.dump({**state, "driver_version": "570.86.15", "toolkit_version": "1.18.0"}, f)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    phases = {p["name"]: p for p in summary["phases"]}
    assert phases["gpu"]["status"] == "unchanged" and "570.86.15" in phases["gpu"]["message"]
    assert "1.18.0" in phases["gpu"]["message"]
    assert not [c for c in phases["services"]["changes"] if "containerd" in c["what"]]


def test_without_the_toolkit_containerd_keeps_runc_until_it_is_installed(node):
    """A default runtime whose binary is not there fails every container, the pause sandbox
    first: a join told to go on without the toolkit (--ignore-preflight-errors=gpu) leaves
    containerd on runc; the pass after the toolkit is installed gives it NVIDIA's runtime, and
    one after it is removed takes the runtime away again."""
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir, toolkit=False)
    proc, summary = node.cli_json("bootstrap", "--ignore-preflight-errors=gpu")
    assert proc.returncode == 0, proc.stderr
    gpu_phase = {p["name"]: p for p in summary["phases"]}["gpu"]
    assert gpu_phase["status"] == "unchanged" and "/usr/bin/nvidia-container-runtime" in gpu_phase["message"]
    assert gpu.DROPIN not in node.files() and b"imports" not in node.read("/etc/containerd/config.toml")

    runtime = gpu_fixtures._write(node.root, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert node.read(gpu.DROPIN) == gpu.nvidia_dropin() and b"imports" in node.read("/etc/containerd/config.toml")
    services = [c["what"] for p in summary["phases"] if p["name"] == "services" for c in p["changes"]]
    assert "restart containerd" in services

    os.remove(runtime)
    proc, summary = node.cli_json("bootstrap", "--ignore-preflight-errors=gpu")
    assert proc.returncode == 0, proc.stderr
    assert gpu.DROPIN not in node.files() and b"imports" not in node.read("/etc/containerd/config.toml")


# -- whether the device plugin advertised the GPUs (gpu/advertised.py) -------------------------
# The tests play the kubelet and its device plugin at the boundary: they write the Node's
# status.allocatable and capacity through the emulator's API server as the cluster admin (the
# stand-in kubelet's heartbeat patches only its Ready condition, so what they write stays), and
# the kubelet's registration socket's time (a new kubelet makes it anew when it starts).

def advertise(node, allocatable, capacity=None):
    status, answer = admin_client(node.emu)(
        "PATCH", f"/api/v1/nodes/{harness.MACHINE_NAME}/status",
        {"status": {"allocatable": allocatable, "capacity": capacity or allocatable}},
        content_type="application/strategic-merge-patch+json")
    assert status == 200, answer


def kubelet_started(node, seconds_ago):
    path = node.path(advertised.KUBELET_SOCKET)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb"):
        pass
    then = time.time() - seconds_ago
    os.utime(path, (then, then))


def gpu_condition(node):
    [registered] = [n for n in node.emu.state()["nodes"].get(C.CLUSTER_NAME, [])
                    if n["metadata"]["name"] == harness.MACHINE_NAME]
    return {c["type"]: c for c in registered["status"].get("conditions", [])}.get(hc.GPU_NOT_ADVERTISED)


def agent_pass(node):
    # At most the grace: a pass dated within it (kubelet_started just before) stays within it,
    # or fails here on the timeout, however loaded the machine, never on the verdict.
    proc = node.cli("agent", "--once", timeout=advertised.GRACE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc, status = node.cli_json("status")
    assert proc.returncode == 0, proc.stderr
    return status


def test_status_and_the_node_condition_say_whether_the_nvidia_gpus_are_advertised(node):
    gpu_fixtures.nvidia_gpus(node.root, node.state_dir, count=2)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    # Joined, no device plugin yet: not advertised, with the remedy, and the condition True.
    assert {k: summary["gpu"][k] for k in ("vendor", "resource", "detected", "verdict", "advertised")} == \
        {"vendor": "nvidia", "resource": "nvidia.com/gpu", "detected": 2, "verdict": "not-advertised",
         "advertised": None}
    assert "nvidia-device-plugin" in summary["gpu"]["remedy"]
    cond = gpu_condition(node)
    assert (cond["status"], cond["reason"]) == ("True", "GPUsNotAdvertised")
    proc, status = node.cli_json("status")
    assert status["gpu"]["verdict"] == "not-advertised"
    assert "gpu: not-advertised: " in node.cli("status").stdout

    # The device plugin registers: the kubelet advertises both.
    advertise(node, {"cpu": "8", "nvidia.com/gpu": "2"})
    status = agent_pass(node)
    assert (status["gpu"]["verdict"], status["gpu"]["advertised"], status["gpu"]["capacity"]) == ("advertised", 2, 2)
    advertised_since = gpu_condition(node)
    assert (advertised_since["status"], advertised_since["reason"]) == ("False", "GPUsAdvertised")

    # The kubelet restarts: the resource reads 0 until the plugin registers again. Within the
    # grace that is waiting, and the condition stays as it was (dated just before the pass:
    # agent_pass).
    advertise(node, {"nvidia.com/gpu": "0"})
    kubelet_started(node, seconds_ago=0)
    status = agent_pass(node)
    assert status["gpu"]["verdict"] == "waiting"
    cond = gpu_condition(node)
    assert cond["status"] == "False" and cond["lastTransitionTime"] == advertised_since["lastTransitionTime"]

    # Past the grace, one GPU of two unhealthy: fewer, and the condition True.
    kubelet_started(node, seconds_ago=advertised.GRACE + 60)
    advertise(node, {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"})
    status = agent_pass(node)
    assert (status["gpu"]["verdict"], status["gpu"]["advertised"], status["gpu"]["capacity"]) == ("fewer", 1, 2)
    fewer = gpu_condition(node)
    assert (fewer["status"], fewer["reason"]) == ("True", "FewerGPUsAdvertised")

    # An allocatable that is not a quantity: named, the pass goes on, the condition is kept.
    advertise(node, {"nvidia.com/gpu": "lots"})
    status = agent_pass(node)
    assert status["state"] == "succeeded" and status["gpu"]["verdict"] == "unreadable"
    assert "status.allocatable['nvidia.com/gpu']" in status["gpu"]["message"] and "'lots'" in status["gpu"]["message"]
    assert gpu_condition(node)["reason"] == "FewerGPUsAdvertised"


def test_an_amd_gpu_node_is_told_whether_amd_com_gpu_is_advertised(node):
    gpu_fixtures.amd_gpus(node.root, count=2)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert (summary["gpu"]["resource"], summary["gpu"]["verdict"]) == ("amd.com/gpu", "not-advertised")
    assert gpu_condition(node)["status"] == "True"
    advertise(node, {"nvidia.com/gpu": "2"})  # another vendor's resource is not this one's
    assert agent_pass(node)["gpu"]["verdict"] == "not-advertised"
    advertise(node, {"amd.com/gpu": "2"})
    status = agent_pass(node)
    assert (status["gpu"]["verdict"], status["gpu"]["advertised"]) == ("advertised", 2)
    assert gpu_condition(node)["status"] == "False"
