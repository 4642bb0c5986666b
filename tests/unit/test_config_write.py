"""config.write: atomic, 0600, the default layout, hand edits kept, readable by sh."""

import os
import stat
import subprocess

import pytest

from aks_flex_node import config
from aks_flex_node.config.fileformat import open_configobj
from aks_flex_node.errors import ConfigError
from tests.config_fixtures import CLUSTER_ID, TENANT, make_root

CONF = "/etc/aks-flex-node/aks-flex-node.conf"
ANSWERS = {"tenant_id": TENANT, "auth_method": "azure-cli", "cluster_resource_id": CLUSTER_ID}
# Non-default values for many kinds of keys, as text and as typed values.
CHANGED = {
    "subscription_id": "66666666-7777-8888-9999-000000000000",
    "machine_name": "edge-07",
    "arc_tags": {"env": "edge", "owner": "ops team"},
    "arc_location": "westeurope",
    "kubernetes_version": "1.30.4",
    "runc_url": "https://mirror.example.com/runc/{version}/runc-{arch}",
    "runc_sha256_url": "{url}.sha256",
    "node_labels": "tier=edge,example.com/site=lyon",
    "node_taints": ["dedicated=edge:NoSchedule", "gpu:NoExecute"],
    "max_pods": 60,
    "eviction_hard": {"memory.available": "100Mi", "nodefs.available": "10%"},
    "kube_reserved": "cpu=100m,memory=512Mi",
    "node_ip": "192.168.10.21",
    "https_proxy": "http://proxy.example.com:3128",
    "no_proxy": ["localhost", "127.0.0.1", ".example.com"],
    "log_level": "debug",
}


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def conf_path(root):
    return root / CONF.lstrip("/")


def sh_read(path, key):
    """What a debconf-style sh script reads for a key."""
    script = f"sed -n 's/^[[:space:]]*{key}[[:space:]]*=[[:space:]]*//p' \"$1\""
    out = subprocess.run(["sh", "-c", script, "sh", str(path)], capture_output=True, text=True, check=True)
    return out.stdout.rstrip("\n")


def test_a_new_file_has_the_default_layout_and_mode_0600(root):
    written = config.write(None, ANSWERS, root=str(root))
    path = conf_path(root)
    assert written == str(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    expected = config.render_default()
    for key, value in ANSWERS.items():
        expected = expected.replace(f"\n{key} =\n", f"\n{key} = {value}\n")
    assert path.read_text() == expected
    assert os.listdir(path.parent) == [path.name]  # no temp file left behind


def test_write_then_load_gives_the_values_back(root):
    config.write(None, {**ANSWERS, **CHANGED}, root=str(root))
    cfg = config.load(root=str(root))
    assert cfg.arc_tags == ["env=edge", "owner=ops team"]
    assert cfg.node_labels == ["tier=edge", "example.com/site=lyon", "kubernetes.azure.com/managed=false"]
    assert cfg.node_taints == CHANGED["node_taints"]
    assert cfg.max_pods == 60
    assert cfg.eviction_hard == ["memory.available<100Mi", "nodefs.available<10%"]
    assert cfg.kube_reserved == ["cpu=100m", "memory=512Mi"]
    assert cfg.no_proxy == CHANGED["no_proxy"]
    assert cfg.machine_name == "edge-07" and cfg.subscription_id == CHANGED["subscription_id"]
    assert cfg.artifact_urls("runc", "1.1.12", "amd64") == (
        "https://mirror.example.com/runc/1.1.12/runc-amd64", "https://mirror.example.com/runc/1.1.12/runc-amd64.sha256")
    # and a Config's own values write back to the same configuration
    config.write(None, cfg.as_dict(redact=False), root=str(root))
    assert config.load(root=str(root)).as_dict(redact=False) == cfg.as_dict(redact=False)


def test_sh_reads_every_key_as_configobj_does(root):
    config.write(None, {**ANSWERS, **CHANGED}, root=str(root))
    path = conf_path(root)
    parsed = open_configobj(str(path))
    for key in config.keys():
        assert sh_read(path, key) == parsed[config.section_of(key)][key], key
    assert sh_read(path, "tenant_id") == TENANT
    assert sh_read(path, "node_taints") == "dedicated=edge:NoSchedule,gpu:NoExecute"
    assert sh_read(path, "eviction_hard") == "memory.available<100Mi,nodefs.available<10%"
    assert sh_read(path, "sp_client_id") == ""  # an empty value reads as empty, no stray space


def test_hand_edits_comments_and_other_keys_are_kept(root):
    config.write(None, {**ANSWERS, "max_pods": 50}, root=str(root))
    path = conf_path(root)
    text = path.read_text().replace("max_pods = 50\n", "# fewer pods: small box\nmax_pods = 20\n")
    text = text.replace("[agent]\n", "# our own note about the agent\n[agent]\n")
    path.write_text(text)
    config.write(None, {"log_level": "warning"}, root=str(root))
    after = path.read_text()
    assert "# fewer pods: small box\nmax_pods = 20\n" in after
    assert "# our own note about the agent\n[agent]\n" in after
    assert "log_level = warning\n" in after
    assert after == text.replace("log_level = info\n", "log_level = warning\n")


def test_a_key_missing_from_an_existing_file_is_added_with_its_comment(root):
    path = conf_path(root)
    path.parent.mkdir(parents=True)
    path.write_text("[azure]\ntenant_id = " + TENANT + "\n")
    config.write(None, {"max_pods": 30, "cloud": "AzureChinaCloud"}, root=str(root))
    text = path.read_text()
    assert text.startswith("[azure]\ntenant_id = " + TENANT + "\n")
    assert "# AzurePublicCloud, AzureUSGovernment, AzureChinaCloud or custom.\n" in text
    assert "[node]\n\n# Maximum number of pods on this node, 1 to 250.\nmax_pods = 30\n" in text
    assert sh_read(path, "cloud") == "AzureChinaCloud"


def test_a_key_hand_placed_in_the_wrong_section_is_moved(root):
    path = conf_path(root)
    path.parent.mkdir(parents=True)
    path.write_text("[azure]\ntenant_id = " + TENANT + "\nmax_pods = 12\n[node]\n")
    config.write(None, {"max_pods": 30}, root=str(root))
    assert sh_read(path, "max_pods") == "30"


def test_an_explicit_path_is_a_node_path_under_the_root(root):
    path = root / "srv/flex.conf"
    assert config.write("/srv/flex.conf", ANSWERS, root=str(root)) == str(path)
    assert sh_read(path, "auth_method") == "azure-cli"
    assert config.load("/srv/flex.conf", root=str(root)).auth_method == "azure-cli"


@pytest.mark.parametrize("key,value,expected", [
    ("maxpods", "3", "did you mean max_pods?"),
    ("sp_client_secret", "hunter2", "name that file in sp_client_secret_file"),
    ("node_labels", "a=b\nc=d", "a value on a single line"),
    ("arc_tags", "team=#ops", "without '#'"),
])
def test_write_refuses_what_the_file_cannot_hold(root, key, value, expected):
    with pytest.raises(ConfigError) as excinfo:
        config.write(None, {key: value}, root=str(root))
    (problem,) = excinfo.value.problems
    assert problem.key == key and expected in problem.expected
    assert "hunter2" not in str(excinfo.value)
    assert not conf_path(root).exists()


def test_write_does_not_clobber_a_file_it_cannot_parse(root):
    path = conf_path(root)
    path.parent.mkdir(parents=True)
    path.write_text("[azure]\ntenant_id = a\ntenant_id = b\n")
    with pytest.raises(ConfigError) as excinfo:
        config.write(None, {"max_pods": 30}, root=str(root))
    assert excinfo.value.problems[0].key == "line 3"
    assert path.read_text() == "[azure]\ntenant_id = a\ntenant_id = b\n"


def test_writing_none_or_empty_resets_a_key_to_its_default(root):
    config.write(None, {**ANSWERS, "max_pods": 60, "log_level": "debug"}, root=str(root))
    config.write(None, {"max_pods": None, "log_level": ""}, root=str(root))
    assert sh_read(conf_path(root), "max_pods") == ""
    cfg = config.load(root=str(root))
    assert (cfg.max_pods, cfg.log_level) == (110, "info")


def test_directories_made_for_the_file_are_0755_whatever_the_umask(root):
    """Under umask 0, pathlib's mkdir(parents=True) made /etc/aks-flex-node 0777: anyone
    could then replace the file that names commands root runs."""
    old = os.umask(0)
    try:
        config.write("/etc/deep/aks-flex-node/aks.conf", ANSWERS, root=str(root))
    finally:
        os.umask(old)
    for directory in ("etc/deep", "etc/deep/aks-flex-node"):
        assert stat.S_IMODE(os.stat(root / directory).st_mode) == 0o755, directory
    assert stat.S_IMODE(os.stat(root / "etc/deep/aks-flex-node/aks.conf").st_mode) == 0o600
    assert config.load("/etc/deep/aks-flex-node/aks.conf", root=str(root)).tenant_id == TENANT
