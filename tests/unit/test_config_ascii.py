"""Numbers and versions are ASCII (issue 9, defect 2): Python's int() and \\d take any
Unicode digit, so "１.３０.４" or an Arabic-Indic max_pods used to pass validation and fail
later with UnicodeEncodeError. Each is refused at load, naming the key."""

import pytest

from aks_flex_node import config
from aks_flex_node.errors import ConfigError
from tests import harness

BASE = {
    "tenant_id": "72f988bf-86f1-41af-91ab-2d7cd011db47",
    "cluster_resource_id": "/subscriptions/8ecadfc9-d1a3-4ea4-b844-0d9f87e4d7c8/resourceGroups/rg"
                           "/providers/Microsoft.ContainerService/managedClusters/c1",
    "auth_method": "azure-cli",
    "machine_name": "node-1",
}


@pytest.mark.parametrize("key, value", [
    ("kubernetes_version", "\uff11.\uff13\uff10.\uff14"),  # fullwidth 1.30.4
    ("containerd_version", "\u0662.0.4"),  # Arabic-Indic 2
    ("max_pods", "\u0661\u0661\u0660"),  # Arabic-Indic 110
    ("node_ready_timeout", "\u0969\u0966\u0966"),  # Devanagari 300
    ("containerd_metrics_address", "127.0.0.1:\uff11\uff10\uff12\uff15\uff17"),
    ("kube_reserved", "cpu=\u0661\u0660\u0660m"),
    ("eviction_hard", "memory.available<\u0661\u0660%"),
    ("pause_image", "mcr.microsoft.com/oss/kubernetes/pause:\u0663.9"),
])
def test_non_ascii_digits_are_refused_naming_the_key(tmp_path, key, value):
    with pytest.raises(ConfigError) as err:
        config.from_values(dict(BASE, **{key: value}), root=str(tmp_path))
    [problem] = err.value.problems
    assert problem.key == key and problem.value == value


def test_the_same_values_in_ascii_load(tmp_path):
    cfg = config.from_values(dict(BASE, kubernetes_version="1.30.4", max_pods="110",
                                  containerd_metrics_address="127.0.0.1:10257",
                                  kube_reserved="cpu=100m"), root=str(tmp_path))
    assert cfg.max_pods == 110 and cfg.kubernetes_version == "1.30.4"


def test_a_file_with_them_is_refused_the_same_way(tmp_path):
    root = tmp_path / "root"
    (root / "etc/aks-flex-node").mkdir(parents=True)
    path = root / "etc/aks-flex-node/aks-flex-node.conf"
    path.write_text(harness.render_config(dict(BASE, max_pods="\u0661\u0661\u0660")), encoding="utf-8")
    path.chmod(0o600)
    with pytest.raises(ConfigError) as err:
        config.load(root=str(root))
    assert [p.key for p in err.value.problems] == ["max_pods"]
    assert "0-9" in str(err.value.problems[0])
