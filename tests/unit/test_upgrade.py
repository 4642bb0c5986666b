"""The version-skew rules `aks-flex-node upgrade` applies (kubernetes.io/releases/version-skew-policy/#kubelet)."""

import subprocess
import sys

import pytest

from aks_flex_node import kubeversion
from aks_flex_node.commands import upgrade
from aks_flex_node.errors import ExitCode, UsageError
from aks_flex_node.kubeversion import KubeVersion
from tests.harness import REPO

V = kubeversion.parse_version


@pytest.mark.parametrize("text, expected", [
    ("1.30.4", KubeVersion(1, 30, 4)),
    ("v1.31.2", KubeVersion(1, 31, 2)),
    ("v1.29.7-eks-1234", KubeVersion(1, 29, 7, "eks-1234")),
    ("1.32", KubeVersion(1, 32, None)),
])
def test_versions_parse(text, expected):
    assert V(text, "x") == expected


@pytest.mark.parametrize("text", ["", "1", "latest", "1.x.3", "v1.30.4 ; rm", "١.30.4", None])
def test_a_bad_version_is_a_usage_error_naming_the_field(text):
    with pytest.raises(UsageError) as err:
        V(text, "--to")
    assert err.value.message.startswith(f"--to = {text!r}: expected a Kubernetes version")


@pytest.mark.parametrize("kubelet, apiserver, problem", [
    ("1.30.4", "1.30.4", None),
    ("1.30.9", "1.30.4", None),  # the policy is stated in minor versions
    ("1.27.0", "1.30.4", None),  # three minors older: allowed from 1.25 on
    ("1.26.0", "1.30.4", "4 minor versions older than kube-apiserver 1.30.4: the version-skew policy allows at most 3"),
    ("1.22.0", "1.24.1", None),  # two minors older before 1.25
    ("1.21.0", "1.24.1", "allows at most 2"),
    ("1.31.0", "1.30.4", "kubelet 1.31.0 would be newer than kube-apiserver 1.30.4"),
    ("2.0.0", "1.30.4", "differ in their major version"),
])
def test_kubelet_skew_rules(kubelet, apiserver, problem):
    found = kubeversion.skew_problem(V(kubelet, "k"), V(apiserver, "a"))
    if problem is None:
        assert found is None
    else:
        assert problem in found


@pytest.mark.parametrize("current, target, apiserver, needed, refused", [
    ("1.29.3", "1.30.4", "1.30.4", True, None),
    ("1.30.4", "1.30.4", "1.30.4", False, None),
    ("1.30.4", "1.30.5", "1.30.4", True, None),
    ("1.29.3", "1.31.0", "1.30.4", None, "newer than kube-apiserver 1.30.4"),
    ("1.30.4", "1.29.9", "1.30.4", None, "down to 1.29.9"),
])
def test_check_target(current, target, apiserver, needed, refused):
    if refused:
        with pytest.raises(kubeversion.SkewError) as err:
            kubeversion.check_target(V(current, "c"), V(target, "t"), V(apiserver, "a"))
        assert refused in err.value.message and f"from {current}" in err.value.message
        assert err.value.exit_code == ExitCode.PREFLIGHT
    else:
        assert kubeversion.check_target(V(current, "c"), V(target, "t"), V(apiserver, "a")) is needed


def test_the_plan_names_every_stage_in_order():
    steps = upgrade.plan_steps("n1", V("1.29.3", "c"), V("1.30.4", "t"), 60, 300)
    words = ["install kubelet 1.30.4", "cordon", "drain", "switch", "restart", "Ready", "uncordon", "switch back to 1.29.3"]
    assert [next(i for i, s in enumerate(steps) if w in s) for w in words] == list(range(len(words)))


def test_a_plan_runs_when_the_kubelet_is_behind_or_an_upgrade_is_under_way():
    """The typed plan `upgrade` prints (--dry-run, --json) and acts on: an upgrade the ledger
    records as under way is finished even when the Node already reports the target."""
    at, behind = V("1.30.4", "t"), V("1.29.3", "c")
    done = upgrade.UpgradePlan("n1", at, at, "node n1 status", at, False, ())
    assert not done.runs
    assert upgrade.UpgradePlan("n1", at, at, "node n1 status", at, False, (), under_way=True).runs
    steps = tuple(upgrade.plan_steps("n1", behind, at, 60, 300))
    plan = upgrade.UpgradePlan("n1", at, behind, "kubernetes_version in the configuration", at, True, steps)
    assert plan.runs
    assert plan.to_dict() == {"node": "n1", "apiserver": "1.30.4", "kubelet": "1.29.3",
                              "kubelet_from": "kubernetes_version in the configuration", "target": "1.30.4",
                              "needed": True, "steps": list(steps), "under_way": False}


def test_upgrade_help_imports_no_step_module_nor_the_sdk():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "aks_flex_node", "upgrade", "--help"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and "--dry-run" in proc.stdout and "--to VERSION" in proc.stdout
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not {m for m in imported if m.startswith(("aks_flex_node.steps", "aks_flex_node.commands.upgrade", "azure"))}
