"""What a machine's accelerators are (aks_flex_node/gpu/detect.py) and what a GPU node is
given (steps/gpu.py): read from a fake sysfs and procfs under a scratch root
(tests/gpu_fixtures.py), nvidia-smi and nvidia-ctk the stand-ins (tests/fakes/bin)."""

import os
import pathlib

import pytest

from aks_flex_node.gpu import detect
from aks_flex_node.host import Host
from aks_flex_node.steps import gpu
from aks_flex_node.steps.context import JoinContext
from aks_flex_node.steps.join_data import JoinData
from aks_flex_node.steps.runtime import containerd_config

from tests import gpu_fixtures
from tests.config_fixtures import MINIMAL, load, make_root, with_values

FAKES_BIN = pathlib.Path(__file__).resolve().parents[1] / "fakes" / "bin"


@pytest.fixture
def machine(tmp_path):
    """(root, state dir, a Host whose live-system commands are the stand-ins)."""
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    state.mkdir()
    env = {**os.environ, "AKS_FLEX_NODE_HOST_BIN": str(FAKES_BIN), "FAKE_STATE_DIR": str(state),
           "FAKE_ROOT": str(root)}
    return root, state, Host(str(root), env=env)


def test_an_nvidia_gpu_is_found_on_the_pci_bus_with_its_driver_models_and_toolkit(machine):
    root, state, host = machine
    gpu_fixtures.nvidia_gpus(root, state, count=2)
    found = detect.detect(host)
    assert [(g.address, g.vendor, g.device_id, g.kind) for g in found.gpus] == [
        ("0000:01:00.0", "nvidia", 0x2330, "3D"), ("0000:02:00.0", "nvidia", 0x2330, "3D")]
    assert found.vendors == ("nvidia",)
    assert found.nvidia_driver == gpu_fixtures.DRIVER
    assert found.nvidia_models == (gpu_fixtures.H100["name"],) * 2 and found.nvidia_smi is None
    assert found.nvidia_runtime and found.toolkit_version == "1.17.4"


def test_a_gpu_without_its_driver_is_still_found_and_nvidia_smi_is_not_asked(machine):
    root, state, host = machine
    gpu_fixtures.nvidia_gpus(root, state, driver=False, toolkit=False)
    found = detect.detect(host)
    assert found.vendors == ("nvidia",) and found.nvidia_driver is None and not found.nvidia_runtime
    assert not (state / "calls.jsonl").exists()  # neither nvidia-smi nor nvidia-ctk ran


def test_a_machine_without_a_gpu_has_none_and_an_ethernet_controller_is_not_one(machine):
    root, state, host = machine
    gpu_fixtures.pci_function(root, "0000:00:03.0", 0x8086, 0x10d3, pci_class=0x020000)
    assert detect.detect(host).gpus == ()


def test_no_pci_bus_is_said_so_not_taken_for_no_gpu(machine):
    _root, _state, host = machine
    found = detect.detect(host)
    assert found.gpus == () and "/sys/bus/pci/devices" in found.unseen


def test_an_amd_gpu_is_found_with_amdgpu_and_kfd(machine):
    root, _state, host = machine
    gpu_fixtures.amd_gpus(root, count=8)
    found = detect.detect(host)
    assert found.vendors == ("amd",) and len(found.of("amd")) == 8
    assert found.amdgpu_loaded is True and found.amd_kfd


def test_secure_boot_is_read_from_its_efi_variable(machine):
    root, state, host = machine
    gpu_fixtures.nvidia_gpus(root, state, driver=False)
    assert detect.detect(host).secure_boot is None  # no efivarfs: not known
    gpu_fixtures.secure_boot(root, on=True)
    assert detect.detect(host).secure_boot is True
    gpu_fixtures.secure_boot(root, on=False)
    assert detect.detect(host).secure_boot is False


def test_a_fifo_in_sysfs_is_not_waited_on(machine):
    root, _state, host = machine
    gpu_fixtures.pci_function(root, "0000:01:00.0", 0x10de, 0x2330)
    vendor = root / "sys/devices/pci0000:00/0000:01:00.0/vendor"
    vendor.unlink()
    os.mkfifo(vendor)
    assert detect.detect(host).gpus == ()  # the careful read refuses it, nothing hangs


def test_nvidia_smi_csv_is_parsed_as_its_documented_format():
    # nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    out = "NVIDIA H100 80GB HBM3, 550.54.15\nNVIDIA A100-SXM4-40GB, 550.54.15\n"
    assert detect.parse_nvidia_smi(out) == [("NVIDIA H100 80GB HBM3", "550.54.15"),
                                            ("NVIDIA A100-SXM4-40GB", "550.54.15")]


def test_containerd_config_without_imports_is_byte_for_byte_what_it_was(tmp_path):
    cfg = load(make_root(tmp_path), MINIMAL)
    plain = containerd_config(cfg)
    assert b"imports" not in plain
    assert containerd_config(cfg, ()) == plain
    with_dropin = containerd_config(cfg, (gpu.DROPIN,))
    assert with_dropin.replace(b'imports = ["/etc/containerd/conf.d/aks-flex-node-nvidia.toml"]\n', b"") == plain
    # a top-level key, before the first table, or TOML puts it in that table
    assert with_dropin.index(b"imports =") < with_dropin.index(b"[plugins")


def test_the_dropin_is_nvidias_runtime_as_the_default():
    text = gpu.nvidia_dropin().decode()
    assert 'default_runtime_name = "nvidia"' in text
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in text
    assert 'runtime_type = "io.containerd.runc.v2"' in text and "SystemdCgroup = true" in text
    assert text.splitlines()[1] == "version = 2"  # no higher than config.toml's (containerd refuses that)


def test_the_gpu_settings_load(tmp_path):
    cfg = load(make_root(tmp_path), with_values(gpu="nvidia", gpu_taints="sku=gpu:NoSchedule"))
    assert cfg.gpu == "nvidia" and cfg.gpu_taints == ["sku=gpu:NoSchedule"]


def _ctx(tmp_path, host, **values):
    base = tmp_path / f"cfg{len(list(tmp_path.glob('cfg*')))}"  # one config root each
    cfg = load(make_root(base), with_values(**values))
    return JoinContext(cfg, host=host, ledger=None, data=JoinData())


def test_auto_with_both_vendors_takes_nvidia_and_preflight_says_so(machine, tmp_path):
    """An AMD GPU beside an NVIDIA one is most often the CPU's integrated graphics (a Ryzen
    APU's VGA controller): `auto` must not stop such a machine's join; it takes NVIDIA and
    preflight warns, naming the setting that chooses AMD."""
    root, state, host = machine
    gpu_fixtures.nvidia_gpus(root, state)
    gpu_fixtures.pci_function(root, "0000:0e:00.0", 0x1002, 0x1681, pci_class=0x030000)  # an APU's iGPU
    assert gpu.chosen(_ctx(tmp_path, host)) == ("nvidia", None)
    severity, message, remedy = gpu.preflight_verdict(_ctx(tmp_path, host))
    assert severity == "warning" and "AMD" in message and "gpu = amd" in remedy
    assert gpu.chosen(_ctx(tmp_path, host, gpu="amd")) == ("amd", None)


def test_amd_instinct_accelerators_are_found_by_the_classes_they_report(machine):
    """MI300X reports itself a processing accelerator (class 0x1200: lspci -nn shows
    "Processing accelerators [1200]: ... [1002:74a1]"), an MI250X a display controller of class
    0x0380 ("Display controller [0380]: ... [1002:740c]"); an Intel NPU (8086:7d1d, also 0x1200) is no GPU."""
    root, _state, host = machine
    gpu_fixtures.pci_function(root, "0000:11:00.0", 0x1002, 0x74a1, pci_class=0x120000)
    gpu_fixtures.pci_function(root, "0000:12:00.0", 0x1002, 0x740c, pci_class=0x038000)
    gpu_fixtures.pci_function(root, "0000:00:0b.0", 0x8086, 0x7d1d, pci_class=0x120000)
    found = detect.detect(host)
    assert [(g.address, g.vendor, g.kind) for g in found.gpus] == [
        ("0000:11:00.0", "amd", "accelerator"), ("0000:12:00.0", "amd", "display")]


def test_a_vendor_named_but_not_found_is_an_error_naming_the_setting(machine, tmp_path):
    root, _state, host = machine
    gpu_fixtures.amd_gpus(root)
    with pytest.raises(gpu.GpuError) as err:
        gpu.chosen(_ctx(tmp_path, host, gpu="nvidia"))
    assert err.value.code == "gpu-not-found" and "gpu = nvidia" in err.value.message


def test_auto_without_a_gpu_and_off_make_a_plain_node_with_the_reason(machine, tmp_path):
    root, _state, host = machine
    vendor, why = gpu.chosen(_ctx(tmp_path, host))
    assert vendor is None and "/sys/bus/pci/devices" in why  # no bus: said so
    gpu_fixtures.pci_function(root, "0000:00:03.0", 0x8086, 0x10d3, pci_class=0x020000)
    assert gpu.chosen(_ctx(tmp_path, host))[0] is None
    assert gpu.chosen(_ctx(tmp_path, host, gpu="off")) == (None, "gpu = off")


def test_the_operators_label_wins_and_a_taint_is_not_doubled(machine, tmp_path):
    root, state, host = machine
    gpu_fixtures.nvidia_gpus(root, state)
    ctx = _ctx(tmp_path, host, node_labels="kubernetes.azure.com/accelerator=nvidia-h100",
               node_taints="sku=gpu:NoSchedule", gpu_taints="sku=gpu:NoSchedule,nvidia.com/gpu:NoSchedule")
    assert gpu.node_labels(ctx) == ["aks-flex-node/gpu-count=1", "aks-flex-node/gpu-model=pci-10de-2330"]
    assert gpu.node_taints(ctx) == ["nvidia.com/gpu:NoSchedule"]
