"""config.load and the Config object: defaults, types, derived values, redaction.

Real files under a temp root; the hostname default comes from the root's /etc/hostname.
"""

import json
import os

import pytest

from aks_flex_node import clouds, config, paths
from aks_flex_node.errors import ConfigError

from tests.config_fixtures import (CLUSTER_ID, MINIMAL, OTHER_SUB, SUB, TENANT, conf_text, load, make_root,
                                   problems_of, with_values, write_conf)


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


EVERY_DEFAULT = {
    "subscription_id": SUB,  # the cluster's
    "tenant_id": TENANT,
    "cloud": "AzurePublicCloud",
    "arm_endpoint": "",
    "authority_host": "",
    "ca_bundle": "",
    "auth_method": "azure-cli",
    "sp_client_id": "",
    "sp_client_secret_file": "",
    "sp_certificate_file": "",
    "managed_identity_client_id": "",
    "machine_name": "edge-node-01",  # the hostname
    "arc_resource_group": "aks-rg",  # the cluster's
    "arc_location": "",
    "arc_tags": [],
    "himds_endpoint": "http://127.0.0.1:40342/metadata/identity/oauth2/token",
    "himds_key_dir": "/var/opt/azcmagent/tokens",
    "azcmagent": "azcmagent",
    "cluster_resource_id": CLUSTER_ID,
    "join_mode": "arc",
    "role_preset": "legacy",
    "agent_pool": "",
    "bootstrap_token_file": "",
    "api_server": "",
    "cluster_ca_file": "",
    "kubernetes_version": "",
    "upgrade_window": "",
    "upgrade_drain_timeout": 1800,
    "containerd_version": "2.0.4",
    "runc_version": "1.1.12",
    "cni_version": "1.9.1",
    "pause_image": "mcr.microsoft.com/oss/kubernetes/pause:3.9",
    "kubernetes_url": "https://dl.k8s.io/v{version}/kubernetes-node-linux-{arch}.tar.gz",
    "kubernetes_sha256_url": "{url}.sha256",
    "containerd_url": "https://github.com/containerd/containerd/releases/download/v{version}/containerd-{version}-linux-{arch}.tar.gz",
    "containerd_sha256_url": "{url}.sha256sum",
    "runc_url": "https://github.com/opencontainers/runc/releases/download/v{version}/runc.{arch}",
    "runc_sha256_url": "https://github.com/opencontainers/runc/releases/download/v{version}/runc.sha256sum",
    "cni_url": "https://github.com/containernetworking/plugins/releases/download/v{version}/cni-plugins-linux-{arch}-v{version}.tgz",
    "cni_sha256_url": "{url}.sha256",
    "artifact_mirror": "",
    "artifact_digests_file": "",
    "cache_dir": paths.DEFAULT_CACHE_DIR,
    "registry_mirrors": [],
    "registry_ca_file": "",
    "node_labels": ["kubernetes.azure.com/managed=false"],
    "node_taints": [],
    "max_pods": 110,
    "kube_reserved": [],
    "eviction_hard": [],
    "node_ip": "",
    "cluster_dns": "10.0.0.10",
    "cluster_domain": "cluster.local",
    "bridge_subnet": "10.244.0.0/24",
    "node_ready_timeout": 300,
    "containerd_metrics_address": "127.0.0.1:10257",
    "gpu": "auto",
    "gpu_taints": [],
    "https_proxy": "",
    "no_proxy": [],
    "log_level": "info",
    "exec_plugin_command": "/usr/bin/aks-flex-node",
    "metrics_textfile_dir": "",
}


def test_every_key_has_its_default(root):
    cfg = load(root, MINIMAL)
    assert cfg.as_dict(redact=False) == EVERY_DEFAULT
    assert list(cfg) == list(config.keys()) == list(EVERY_DEFAULT)


def test_the_shipped_default_file_is_the_rendered_configspec():
    shipped = os.path.join(os.path.dirname(__file__), "../../etc/aks-flex-node/aks-flex-node.conf")
    with open(shipped) as f:
        text = f.read()
    assert text == config.render_default(), "regenerate: python3 -m aks_flex_node.config default > etc/aks-flex-node/aks-flex-node.conf"


def test_the_shipped_default_file_has_every_key_once_with_a_comment_and_defaults():
    lines = config.render_default().splitlines()
    for key in config.keys():
        at = [i for i, line in enumerate(lines) if line.split("=")[0].strip() == key]
        assert len(at) == 1, key
        assert lines[at[0] - 1].startswith("#"), f"{key} has no comment above it"
    assert "max_pods = 110" in lines
    assert "tenant_id =" in lines  # required: left for the operator
    assert "cluster_resource_id =" in lines
    assert "auth_method =" in lines


def test_the_shipped_default_file_needs_exactly_the_required_answers(root):
    write_conf(root, config.render_default())
    with pytest.raises(ConfigError) as excinfo:
        config.load(root=str(root))
    assert sorted(problems_of(excinfo)) == ["auth_method", "cluster_resource_id", "tenant_id"]


def test_an_empty_value_means_the_default(root):
    cfg = load(root, with_values(max_pods="", cloud="", containerd_version="", node_labels=""))
    assert cfg.max_pods == 110
    assert cfg.cloud == "AzurePublicCloud"
    assert cfg.containerd_version == "2.0.4"


def test_values_are_typed(root):
    cfg = load(root, with_values(
        max_pods="30", node_ready_timeout="60",
        node_labels="tier=edge, example.com/site=lyon",
        node_taints="dedicated=edge:NoSchedule,gpu:NoExecute",
        kube_reserved="cpu=100m,memory=512Mi,pid=1000",
        eviction_hard="memory.available<100Mi,nodefs.available<10%",
        arc_tags="env=edge,owner=ops team",
        no_proxy="localhost, 127.0.0.1,.example.com,10.0.0.0/8",
        node_ip="2001:DB8::1",
        kubernetes_version="v1.30.4",
        tenant_id=TENANT.upper(),
        arc_location="WestEurope",
    ))
    assert cfg.max_pods == 30 and cfg.node_ready_timeout == 60
    assert cfg.node_labels == ["tier=edge", "example.com/site=lyon", "kubernetes.azure.com/managed=false"]
    assert cfg.node_taints == ["dedicated=edge:NoSchedule", "gpu:NoExecute"]
    assert cfg.kube_reserved == ["cpu=100m", "memory=512Mi", "pid=1000"]
    assert cfg.eviction_hard == ["memory.available<100Mi", "nodefs.available<10%"]
    assert cfg.arc_tags == ["env=edge", "owner=ops team"]
    assert cfg.no_proxy == ["localhost", "127.0.0.1", ".example.com", "10.0.0.0/8"]
    assert cfg.node_ip == "2001:db8::1"
    assert cfg.kubernetes_version == "1.30.4"
    assert cfg.tenant_id == TENANT
    assert cfg.arc_location == "westeurope"


def test_attribute_and_item_access_agree_and_unknown_names_are_errors(root):
    cfg = load(root, MINIMAL)
    assert cfg.max_pods == cfg["max_pods"] == 110
    assert "max_pods" in cfg and "maxpods" not in cfg
    with pytest.raises(AttributeError, match=r"\bmax_pods\b"):  # the nearest name, suggested
        cfg.max_pod
    with pytest.raises(KeyError):
        cfg["nope"]


def test_cluster_is_parsed_case_insensitively_and_canonical(root):
    lower = CLUSTER_ID.lower().replace("aks-rg", "AKS-RG")
    cfg = load(root, with_values(cluster_resource_id=lower))
    assert cfg.cluster == config.ClusterRef(SUB, "AKS-RG", "aks-edge", (
        f"/subscriptions/{SUB}/resourceGroups/AKS-RG/providers/Microsoft.ContainerService/managedClusters/aks-edge"))
    assert cfg.cluster_resource_id == cfg.cluster.resource_id


def test_the_arc_machine_may_live_in_another_subscription_and_group(root):
    cfg = load(root, with_values(subscription_id=OTHER_SUB, arc_resource_group="edge-machines"))
    assert cfg.subscription_id == OTHER_SUB
    assert cfg.cluster.subscription_id == SUB
    assert cfg.arc_resource_group == "edge-machines"


def test_machine_name_defaults_to_the_hostname_lowercased(tmp_path):
    cfg = load(make_root(tmp_path, "Edge-Node.Example.COM"), MINIMAL)
    assert cfg.machine_name == "edge-node.example.com"


@pytest.mark.parametrize("hostname", ["edge_node", "x" * 55, "-edge"])
def test_an_invalid_hostname_asks_for_machine_name(tmp_path, hostname):
    root = make_root(tmp_path, hostname)
    with pytest.raises(ConfigError) as excinfo:
        load(root, MINIMAL)
    problem = problems_of(excinfo)["machine_name"]
    assert hostname in problem.value
    assert "machine_name" in problem.expected  # the key to set instead
    # ... and setting it is the way out
    assert load(root, with_values(machine_name="edge-01")).machine_name == "edge-01"


@pytest.mark.parametrize("cloud,arm,authority,scope", [
    ("AzurePublicCloud", "https://management.azure.com", "https://login.microsoftonline.com",
     "https://management.azure.com/.default"),
    ("AzureUSGovernment", "https://management.usgovcloudapi.net", "https://login.microsoftonline.us",
     "https://management.core.usgovcloudapi.net/.default"),
    ("AzureChinaCloud", "https://management.chinacloudapi.cn", "https://login.chinacloudapi.cn",
     "https://management.chinacloudapi.cn/.default"),
])
def test_named_clouds_have_their_endpoints(root, cloud, arm, authority, scope):
    cfg = load(root, with_values(cloud=cloud))
    assert cfg.endpoints == clouds.CloudEndpoints(cloud, arm, authority, scope, None)


def test_a_custom_cloud_with_a_ca_bundle_under_the_root(root):
    ca = root / "etc/aks-flex-node/emulator-ca.pem"
    ca.parent.mkdir(parents=True)
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    cfg = load(root, with_values(cloud="custom", arm_endpoint="https://127.0.0.1:8443/",
                                 authority_host="https://127.0.0.1:8443",
                                 ca_bundle="/etc/aks-flex-node/emulator-ca.pem"))
    assert cfg.endpoints == clouds.CloudEndpoints(
        "custom", "https://127.0.0.1:8443", "https://127.0.0.1:8443", "https://management.azure.com/.default", str(ca))
    assert cfg.ca_bundle == "/etc/aks-flex-node/emulator-ca.pem"  # the key keeps the node path


def test_a_ca_bundle_works_with_a_named_cloud_too(root):
    ca = root / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    cfg = load(root, with_values(ca_bundle="/ca.pem"))
    assert cfg.endpoints.arm == "https://management.azure.com"
    assert cfg.endpoints.ca_bundle == str(ca)


def test_artifact_urls_from_the_default_templates(root):
    cfg = load(root, MINIMAL)
    assert cfg.artifact_urls("kubernetes", "1.30.4", "amd64") == (
        "https://dl.k8s.io/v1.30.4/kubernetes-node-linux-amd64.tar.gz",
        "https://dl.k8s.io/v1.30.4/kubernetes-node-linux-amd64.tar.gz.sha256")
    assert cfg.artifact_urls("containerd", "2.0.4", "arm64") == (
        "https://github.com/containerd/containerd/releases/download/v2.0.4/containerd-2.0.4-linux-arm64.tar.gz",
        "https://github.com/containerd/containerd/releases/download/v2.0.4/containerd-2.0.4-linux-arm64.tar.gz.sha256sum")
    assert cfg.artifact_urls("runc", "1.1.12", "amd64") == (
        "https://github.com/opencontainers/runc/releases/download/v1.1.12/runc.amd64",
        "https://github.com/opencontainers/runc/releases/download/v1.1.12/runc.sha256sum")
    assert cfg.artifact_urls("cni", "1.5.1", "amd64") == (
        "https://github.com/containernetworking/plugins/releases/download/v1.5.1/cni-plugins-linux-amd64-v1.5.1.tgz",
        "https://github.com/containernetworking/plugins/releases/download/v1.5.1/cni-plugins-linux-amd64-v1.5.1.tgz.sha256")


def test_artifact_urls_in_mirror_mode_use_the_flat_names(root):
    cfg = load(root, with_values(artifact_mirror="https://127.0.0.1:8443/artifacts/"))
    base = "https://127.0.0.1:8443/artifacts/"
    expected = {
        ("kubernetes", "1.30.4"): "kubernetes-node-v1.30.4-linux-arm64.tar.gz",
        ("containerd", "2.0.4"): "containerd-2.0.4-linux-arm64.tar.gz",
        ("runc", "1.1.12"): "runc-v1.1.12.arm64",
        ("cni", "1.5.1"): "cni-plugins-linux-arm64-v1.5.1.tgz",
    }
    for (name, version), filename in expected.items():
        assert cfg.artifact_urls(name, version, "arm64") == (base + filename, base + filename + ".sha256")


def test_artifact_url_templates_can_be_changed(root):
    cfg = load(root, with_values(runc_url="https://mirror.example.com/runc/{version}/runc-{arch}",
                                 runc_sha256_url="{url}.sha256"))
    assert cfg.artifact_urls("runc", "1.2.0-rc.1", "arm64") == (
        "https://mirror.example.com/runc/1.2.0-rc.1/runc-arm64",
        "https://mirror.example.com/runc/1.2.0-rc.1/runc-arm64.sha256")


@pytest.mark.parametrize("args,message", [
    (("docker", "1.0.0", "amd64"), "artifact 'docker'"),
    (("runc", "1.1.12", "x86_64"), "arch 'x86_64'"),
    (("runc", "", "amd64"), "a version is needed"),
])
def test_artifact_urls_refuse_unknown_names_arches_and_no_version(root, args, message):
    cfg = load(root, MINIMAL)
    with pytest.raises(ValueError, match=message):
        cfg.artifact_urls(*args)


def test_as_dict_hides_proxy_credentials_but_not_secret_file_paths(root):
    secret = root / "etc/aks-flex-node/sp-secret"
    secret.parent.mkdir(parents=True)
    secret.write_text("s3cr3t\n")
    secret.chmod(0o600)
    write_conf(root, with_values(
        auth_method="service-principal", sp_client_id="aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        sp_client_secret_file="/etc/aks-flex-node/sp-secret",
        https_proxy="http://proxyuser:pr0xy-pass@proxy.example.com:3128")).chmod(0o600)
    cfg = config.load(root=str(root))
    shown = cfg.as_dict()
    assert shown["https_proxy"] == "http://***@proxy.example.com:3128"
    assert shown["sp_client_secret_file"] == "/etc/aks-flex-node/sp-secret"
    assert "pr0xy-pass" not in json.dumps(shown) and "s3cr3t" not in json.dumps(shown)
    assert cfg.as_dict(redact=False)["https_proxy"] == "http://proxyuser:pr0xy-pass@proxy.example.com:3128"
    assert cfg.client_secret() == "s3cr3t"
    assert "s3cr3t" not in repr(cfg)


def test_as_dict_is_a_copy(root):
    cfg = load(root, MINIMAL)
    cfg.as_dict()["node_labels"].append("x=y")
    assert "x=y" not in cfg.node_labels


def test_overrides_are_applied_and_checked_like_file_values(root):
    cfg = load(root, MINIMAL, overrides={"max_pods": 42, "node_labels": {"tier": "edge"},
                                         "arc_tags": ["env=edge"], "log_level": "debug"})
    assert cfg.max_pods == 42 and cfg.log_level == "debug"
    assert cfg.node_labels == ["tier=edge", "kubernetes.azure.com/managed=false"]
    assert cfg.arc_tags == ["env=edge"]
    with pytest.raises(ConfigError) as excinfo:
        load(root, MINIMAL, overrides={"max_pods": "0", "log_levl": "debug"})
    problems = problems_of(excinfo)
    assert problems["max_pods"].value == "0" and "250" in problems["max_pods"].expected
    assert problems["log_levl"].value == "debug" and "log_level" in problems["log_levl"].expected


def test_an_override_of_none_unsets_a_file_value(root):
    cfg = load(root, with_values(max_pods="12"), overrides={"max_pods": None})
    assert cfg.max_pods == 110


def test_an_absolute_path_is_a_node_path_under_the_root(root):
    path = root / "srv/flex.conf"
    path.parent.mkdir()
    path.write_text(conf_text(MINIMAL))
    cfg = config.load("/srv/flex.conf", root=str(root))
    assert cfg.source == str(path)
    assert cfg.machine_name == "edge-node-01"


def test_a_relative_path_is_taken_from_the_working_directory(root, tmp_path, monkeypatch):
    (tmp_path / "flex.conf").write_text(conf_text(MINIMAL))
    monkeypatch.chdir(tmp_path)
    cfg = config.load("flex.conf", root=str(root))
    assert cfg.source == "flex.conf"
    assert cfg.machine_name == "edge-node-01"  # the hostname still comes from the root


def test_a_missing_file_says_how_to_create_one(root):
    with pytest.raises(ConfigError) as excinfo:
        config.load(root=str(root))
    err = excinfo.value
    path = str(root / "etc/aks-flex-node/aks-flex-node.conf")
    assert err.source == path
    assert err.problems[0].value == path
    assert "aks-flex-node config import" in err.problems[0].expected
    assert "/etc/aks-flex-node/aks-flex-node.conf" in err.problems[0].expected


def test_from_values_checks_a_dict_like_a_file(root):
    cfg = config.from_values({"tenant_id": TENANT, "auth_method": "azure-cli", "cluster_resource_id": CLUSTER_ID,
                              "max_pods": 20}, root=str(root))
    assert cfg.max_pods == 20 and cfg.source is None
    with pytest.raises(ConfigError) as excinfo:
        config.from_values({"tenant_id": "x"}, root=str(root))
    assert {"tenant_id", "auth_method", "cluster_resource_id"} <= set(problems_of(excinfo))


def test_config_import_does_not_pull_in_the_azure_sdk():
    import subprocess
    import sys

    code = "import sys, aks_flex_node.config; print(sorted(m for m in sys.modules if m.startswith(('azure', 'msal'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.join(os.path.dirname(__file__), "../.."))
    assert out.stdout.strip() == "[]"


def test_clouds_refuse_an_unknown_name_and_an_incomplete_custom_cloud():
    with pytest.raises(ValueError, match="cloud 'AzureGermanCloud'.*AzurePublicCloud"):
        clouds.endpoints("AzureGermanCloud")
    with pytest.raises(ValueError, match="arm_endpoint.*authority_host"):
        clouds.endpoints("custom", arm_endpoint="https://127.0.0.1:8443")
