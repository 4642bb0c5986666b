"""Whether the device plugin advertised a GPU node's GPUs (issue 29): a device count read from
the API server (cloud_values.device_count), the pure comparison (gpu/advertised.py), the Node
condition it gives (health/conditions.py), and what `status` shows of it (status.json's
shape, output.py)."""

import datetime
import json

import pytest

from aks_flex_node import cloud_values, output
from aks_flex_node.engine import state_shape
from aks_flex_node.engine import status as st
from aks_flex_node.gpu import advertised as adv
from aks_flex_node.health import conditions as hc

NOW = datetime.datetime(2026, 11, 28, 2, 0, 0, tzinfo=datetime.timezone.utc)
EARLIER = "2026-11-27T00:00:00Z"


def node(allocatable=None, capacity=None):
    status = {}
    if allocatable is not None:
        status["allocatable"] = allocatable
    if capacity is not None:
        status["capacity"] = capacity
    return {"metadata": {"name": "n1"}, "status": status}


def judged(vendor, detected, allocatable=None, capacity=None, up_for=None):
    return adv.judge(vendor, detected, node(allocatable, capacity), "n1", up_for)


# -- cloud_values.device_count ------------------------------------------------------------------

@pytest.mark.parametrize("value, count", [
    ("0", 0), ("2", 2), ("+3", 3), ("1k", 1000), ("2Ki", 2048), ("1e3", 1000), ("1E3", 1000), ("1E", 10 ** 18),
    ("2000m", 2), ("1.0", 1), ("5.", 5), ("0.5k", 500), ("1.5k", 1500), ("10e-1", 1), ("-0", 0), (4, 4),
])
def test_a_device_count_is_read_in_apimachinerys_quantity_grammar(value, count):
    assert cloud_values.device_count(value, "API server GET /api/v1/nodes/n1", "status.allocatable['x']") == count


@pytest.mark.parametrize("value", ["", "lots", "1 k", "1kb", "1e", "0x10", "1e999", "1" * 65, None, True, 2.5, [],
                                   "\u0661", "-1", "1500m", "0.5", "1e-2", ".", "+", "k", "1.2.3"])
def test_what_is_not_a_whole_count_of_0_or_more_is_a_bad_cloud_value_naming_source_field_and_value(value):
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        cloud_values.device_count(value, "API server GET /api/v1/nodes/n1", "status.allocatable['x']")
    err = caught.value
    assert (err.code, err.source, err.field, err.value) == (
        "bad-cloud-value", "API server GET /api/v1/nodes/n1", "status.allocatable['x']", cloud_values.shown(value))


# -- gpu/advertised.py -------------------------------------------------------------------------

def test_all_gpus_in_allocatable_are_advertised():
    got = judged("nvidia", 2, {"cpu": "8", "nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"})
    assert (got.verdict, got.advertised, got.capacity, got.remedy) == (adv.ADVERTISED, 2, 2, None)
    assert got.to_dict()["resource"] == "nvidia.com/gpu"


def test_amd_gpus_are_advertised_as_amd_com_gpu():
    assert judged("amd", 8, {"amd.com/gpu": "8"}).verdict == adv.ADVERTISED
    assert judged("amd", 8, {"nvidia.com/gpu": "8"}).verdict == adv.NOT_ADVERTISED


def test_no_resource_at_all_is_not_advertised_and_says_to_deploy_the_plugin():
    got = judged("nvidia", 2, {"cpu": "8"})
    assert (got.verdict, got.advertised) == (adv.NOT_ADVERTISED, None)
    assert "nvidia-device-plugin" in got.remedy and "docs/gpu.md" in got.remedy
    amd = judged("amd", 1, {})
    assert amd.verdict == adv.NOT_ADVERTISED and "k8s-ds-amdgpu-dp.yaml" in amd.remedy


def test_a_zero_count_means_a_plugin_that_sees_none_usable():
    got = judged("nvidia", 2, {"nvidia.com/gpu": "0"}, {"nvidia.com/gpu": "0"})
    assert (got.verdict, got.advertised) == (adv.NOT_ADVERTISED, 0)
    assert "log" in got.remedy and "nvidia-smi" in got.remedy


def test_fewer_than_found_names_unhealthy_ones_or_unseen_ones():
    unhealthy = judged("nvidia", 4, {"nvidia.com/gpu": "3"}, {"nvidia.com/gpu": "4"})
    assert (unhealthy.verdict, unhealthy.advertised, unhealthy.capacity) == (adv.FEWER, 3, 4)
    assert "unhealthy" in unhealthy.remedy
    unseen = judged("nvidia", 4, {"nvidia.com/gpu": "3"}, {"nvidia.com/gpu": "3"})
    assert unseen.verdict == adv.FEWER and "PCI bus" in unseen.remedy


def test_shared_and_mig_resources_count_as_advertised():
    # Time-slicing: replicas per GPU, more than found; renamed .shared; mixed MIG slices.
    assert judged("nvidia", 8, {"nvidia.com/gpu": "80"}).verdict == adv.ADVERTISED
    assert judged("nvidia", 8, {"nvidia.com/gpu.shared": "80"}).verdict == adv.ADVERTISED
    mig = judged("nvidia", 1, {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "7"})
    assert mig.verdict == adv.ADVERTISED and "nvidia.com/mig-1g.5gb: 7" in mig.message
    assert judged("nvidia", 1, {"nvidia.com/mig-1g.5gb": "0"}).verdict == adv.NOT_ADVERTISED


def test_a_canonical_quantity_is_a_count():
    assert judged("nvidia", 1000, {"nvidia.com/gpu": "1k"}).verdict == adv.ADVERTISED


def test_within_the_grace_after_the_kubelet_started_a_shortfall_is_waiting():
    assert judged("nvidia", 2, {}, up_for=30).verdict == adv.WAITING
    assert judged("nvidia", 2, {"nvidia.com/gpu": "1"}, up_for=adv.GRACE - 1).verdict == adv.WAITING
    assert judged("nvidia", 2, {}, up_for=adv.GRACE).verdict == adv.NOT_ADVERTISED
    assert judged("nvidia", 2, {"nvidia.com/gpu": "2"}, up_for=1).verdict == adv.ADVERTISED
    # A start in the future (the clock went back) gives no grace; nor does an unknown one.
    assert judged("nvidia", 2, {}, up_for=-5).verdict == adv.NOT_ADVERTISED
    assert judged("nvidia", 2, {}, up_for=None).verdict == adv.NOT_ADVERTISED


def test_a_node_not_read_is_unknown():
    got = adv.judge("amd", 2, None, "n1")
    assert got.verdict == adv.UNKNOWN and got.advertised is None


@pytest.mark.parametrize("bad, field", [
    ({"status": {"allocatable": {"nvidia.com/gpu": "lots"}}}, "status.allocatable['nvidia.com/gpu']"),
    ({"status": {"allocatable": {"nvidia.com/gpu": "-1"}}}, "status.allocatable['nvidia.com/gpu']"),
    ({"status": {"allocatable": {"nvidia.com/gpu": "1500m"}}}, "status.allocatable['nvidia.com/gpu']"),
    ({"status": {"allocatable": {"nvidia.com/gpu": None}}}, "status.allocatable['nvidia.com/gpu']"),
    ({"status": {"capacity": {"nvidia.com/gpu": "1e999"}}}, "status.capacity['nvidia.com/gpu']"),
    ({"status": {"allocatable": {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "x"}}},
     "status.allocatable['nvidia.com/mig-1g.5gb']"),
    ({"status": {"allocatable": ["nvidia.com/gpu"]}}, "status.allocatable"),
    ({"status": "Ready"}, "status"),
    (["not", "a", "node"], "body"),
])
def test_a_malformed_answer_is_unreadable_naming_the_source_field_and_value(bad, field):
    got = adv.judge("nvidia", 2, bad, "n1")
    assert got.verdict == adv.UNREADABLE and got.advertised is None
    assert "API server GET /api/v1/nodes/n1" in got.message and field in got.message
    json.dumps(got.to_dict())  # status.json can hold it


def test_a_long_hostile_value_is_shown_cut_short():
    got = adv.judge("nvidia", 1, {"status": {"allocatable": {"nvidia.com/gpu": "\x1b[2J" + "9" * 500}}}, "n1")
    assert got.verdict == adv.UNREADABLE and "9" * 100 not in got.message and "\x1b" not in got.message
    name = "nvidia.com/mig-" + "x" * 500
    got = adv.judge("nvidia", 1, {"status": {"allocatable": {name: "lots"}}}, "n1")
    assert got.verdict == adv.UNREADABLE and "x" * 100 not in got.message


# -- the Node condition (health/conditions.py) -------------------------------------------------

def run_summary(gpu=None, gpu_phase="unchanged"):
    out = {"operation": "bootstrap", "state": "succeeded", "error": None, "kubelet": {"active": "1.31.2"},
           "phases": [{"name": "gpu", "status": gpu_phase}] if gpu_phase else []}
    if gpu is not None:
        out["gpu"] = gpu
    return out


def gpu_condition(summary, current=()):
    return {c["type"]: c for c in hc.conditions_of(summary, [], NOW, current)}.get(hc.GPU_NOT_ADVERTISED)


def condition(status, reason="GPUsNotAdvertised"):
    return {"type": hc.GPU_NOT_ADVERTISED, "status": status, "reason": reason, "message": "m",
            "lastHeartbeatTime": EARLIER, "lastTransitionTime": EARLIER}


@pytest.mark.parametrize("allocatable, capacity, status, reason", [
    ({}, None, "True", "GPUsNotAdvertised"),
    ({"nvidia.com/gpu": "0"}, None, "True", "GPUsNotAdvertised"),
    ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}, "True", "FewerGPUsAdvertised"),
    ({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"}, "False", "GPUsAdvertised"),
])
def test_the_condition_is_true_while_gpus_are_missing_and_false_once_all_are_advertised(
        allocatable, capacity, status, reason):
    cond = gpu_condition(run_summary(judged("nvidia", 2, allocatable, capacity).to_dict()))
    assert (cond["status"], cond["reason"]) == (status, reason)
    assert cond["reason"].isalnum() and cond["reason"][0].isupper()  # CamelCase (API conventions)
    if status == "True":
        assert "aks-flex-node status" in cond["message"]


@pytest.mark.parametrize("verdict", [adv.WAITING, adv.UNKNOWN, adv.UNREADABLE])
def test_what_a_pass_could_not_tell_keeps_the_condition_as_it_is(verdict):
    gpu = {"vendor": "nvidia", "detected": 2, "verdict": verdict, "message": "m"}
    assert gpu_condition(run_summary(gpu)) is None  # nothing written where there was none
    assert gpu_condition(run_summary(gpu), [condition("False", "GPUsAdvertised")]) is None  # nor changed


def test_a_kubelet_restart_within_the_grace_does_not_flap_the_condition():
    advertised = run_summary(judged("nvidia", 2, {"nvidia.com/gpu": "2"}).to_dict())
    cond = gpu_condition(advertised)
    assert cond["status"] == "False"
    restarted = run_summary(judged("nvidia", 2, {"nvidia.com/gpu": "0"}, up_for=20).to_dict())
    assert gpu_condition(restarted, [cond]) is None  # the Node keeps False
    again = gpu_condition(advertised, [cond])
    assert again["status"] == "False" and again["lastTransitionTime"] == cond["lastTransitionTime"]


def test_no_condition_on_a_node_that_never_was_a_gpu_node():
    assert gpu_condition(run_summary()) is None
    assert gpu_condition(run_summary(gpu_phase=None)) is None


def test_a_gpu_node_that_is_no_longer_one_clears_its_condition():
    cleared = gpu_condition(run_summary(), [condition("True")])
    assert (cleared["status"], cleared["reason"]) == ("False", "NoGPU")
    # Unless the gpu phase did not run or failed: then nothing is known.
    assert gpu_condition(run_summary(gpu_phase=None), [condition("True")]) is None
    assert gpu_condition(run_summary(gpu_phase="failed"), [condition("True")]) is None


# -- status.json and `aks-flex-node status` ----------------------------------------------------

def test_status_json_holds_each_verdict_and_status_prints_it(capsys):
    for got in (judged("nvidia", 2, {"nvidia.com/gpu": "2"}), judged("amd", 2, {}), adv.judge("nvidia", 1, None, "n1"),
                judged("nvidia", 2, {"nvidia.com/gpu": "x"})):
        status = {"state": "succeeded", "operation": "bootstrap", "gpu": got.to_dict()}
        assert state_shape.shape_problem(status, st.STATUS_SHAPE) is None
        output.print_status(status, pending=False)
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gpu: ")]
        assert lines[0] == f"gpu: {got.verdict}: {got.message}"
        assert (len(lines) == 2) == bool(got.remedy)


def test_status_of_a_machine_without_a_gpu_says_nothing_of_gpus(capsys):
    output.print_status({"state": "succeeded", "operation": "bootstrap"}, pending=False)
    assert "gpu" not in capsys.readouterr().out


def test_a_status_file_whose_gpu_is_of_another_shape_is_named():
    problem = state_shape.shape_problem({"state": "succeeded", "gpu": {"verdict": "advertised", "message": "m",
                                                                        "detected": "two"}}, st.STATUS_SHAPE)
    assert problem.startswith("gpu.detected")
