"""Converting the upstream Go agent's config.json (Azure/AKSFlexNode v0.0.10's pkg/config and its README
examples, tests/data/config/upstream-*.json) into our keys."""

import copy
import json
import os
import shutil

import pytest

from aks_flex_node import config, upstream_config
from aks_flex_node.errors import ConfigError
from tests.unit.test_config import make_root

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "config")
SUB = "11111111-2222-3333-4444-555555555555"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
SECRET = "s3cr3t~value.from-the-portal"


def fixture_path(name):
    return os.path.join(DATA, name)


def document(name):
    with open(fixture_path(name)) as f:
        return json.load(f)


def private_copy(directory, name, mode=0o600):
    """A copy of a fixture with the mode an operator would give it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    shutil.copy(fixture_path(name), path)
    path.chmod(mode)
    return path


def node_copy(root, name, mode=0o600):
    """A fixture as /etc/aks-flex-node/config.json on the node under `root`; its node path."""
    private_copy(root / "etc/aks-flex-node", name, mode).rename(root / "etc/aks-flex-node/config.json")
    return "/etc/aks-flex-node/config.json"


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path, "upstream-host")


def test_the_readme_arc_example(root):
    values, secrets, warnings = upstream_config.convert(document("upstream-readme-arc.json"))
    assert values == {
        "subscription_id": "your-subscription-id",
        "tenant_id": "your-tenant-id",
        "cloud": "AzurePublicCloud",
        "auth_method": "azure-cli",
        "machine_name": "your-unique-node-name",
        "arc_resource_group": "your-resource-group",
        "arc_location": "westus",
        "arc_tags": "environment=edge,node-type=worker",
        "cluster_resource_id": "/subscriptions/your-subscription-id/resourceGroups/your-rg/providers/"
                               "Microsoft.ContainerService/managedClusters/your-cluster",
        "kubernetes_version": "your-kubernetes-version",
        "log_level": "info",
    }
    assert secrets == {}
    assert [w.split(":")[0] for w in warnings] == ["azure.arc.enabled", "azure.arc.autoRoleAssignment", "agent.logDir"]
    assert "v0.0.10 docs mistake" in warnings[1]


def test_the_readme_arc_example_placeholders_fail_to_load_naming_our_keys(root):
    with pytest.raises(ConfigError) as excinfo:
        config.load_upstream_json(node_copy(root, "upstream-readme-arc.json"), root=str(root))
    problems = {p.key: p for p in excinfo.value.problems}
    assert sorted(problems) == ["cluster_resource_id", "kubernetes_version", "subscription_id", "tenant_id"]
    assert problems["subscription_id"].value == "your-subscription-id"
    assert "a UUID" in problems["subscription_id"].expected
    assert excinfo.value.source == str(root / "etc/aks-flex-node/config.json")


def test_an_arc_config_loads_directly(root):
    cfg = config.load_upstream_json(node_copy(root, "upstream-arc.json"), root=str(root))
    assert cfg.auth_method == "azure-cli"
    assert cfg.machine_name == "edge-node-01"  # upstream's Edge-Node-01, lowercased
    assert cfg.arc_resource_group == "edge-machines" and cfg.arc_location == "westus"
    assert cfg.arc_tags == ["environment=edge", "node-type=worker"]
    assert cfg.cluster.name == "aks-edge" and cfg.cluster.resource_group == "aks-rg"
    assert cfg.kubernetes_version == "1.30.4"
    assert cfg.client_secret() is None
    assert any("Edge-Node-01" in w and "lowercased" in w for w in cfg.warnings)


def test_the_readme_sp_example_without_sp_tenant_uses_the_azure_tenant(root):
    values, secrets, warnings = upstream_config.convert(document("upstream-readme-sp.json"))
    assert values["auth_method"] == "service-principal"
    assert values["sp_client_id"] == "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    assert values["tenant_id"] == TENANT
    assert secrets == {"sp_client_secret": SECRET}
    assert SECRET not in json.dumps(values) and SECRET not in " ".join(warnings)
    (tenant_warning,) = [w for w in warnings if w.startswith("azure.servicePrincipal.tenantId")]
    assert "upstream then ignores the service principal" in tenant_warning
    assert any(w.startswith("azure.arc.enabled: not true") for w in warnings)


def test_an_sp_config_json_keeps_its_secret_in_memory_only(root):
    cfg = config.load_upstream_json(node_copy(root, "upstream-readme-sp.json"), root=str(root))
    assert cfg.auth_method == "service-principal"
    assert cfg.sp_client_secret_file == ""
    assert cfg.client_secret() == SECRET
    assert SECRET not in json.dumps(cfg.as_dict()) and SECRET not in json.dumps(cfg.as_dict(redact=False))
    assert SECRET not in repr(cfg)
    assert not any("others can read it" in w for w in cfg.warnings)


def test_a_config_json_others_can_read_holding_a_secret_is_warned_about(tmp_path):
    path = private_copy(tmp_path, "upstream-readme-sp.json", mode=0o644)
    _values, _secrets, warnings = upstream_config.load_file(path)
    assert any(f"{path} holds a client secret and others can read it (mode 0644)" in w for w in warnings)


def test_import_flow_writes_values_and_a_secret_file_that_load(root):
    """What `config import` does: values into the INI, the secret into a 0600 file."""
    values, secrets, _ = upstream_config.convert(document("upstream-readme-sp.json"))
    secret_path = "/etc/aks-flex-node/sp-client-secret"
    host_secret = root / secret_path.lstrip("/")
    host_secret.parent.mkdir(parents=True)
    fd = os.open(host_secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secrets["sp_client_secret"].encode() + b"\n")
    os.close(fd)
    config.write(None, {**values, "sp_client_secret_file": secret_path}, root=str(root))
    written = (root / config.DEFAULT_PATH.lstrip("/")).read_text()
    assert SECRET not in written
    cfg = config.load(root=str(root))
    assert cfg.client_secret() == SECRET
    assert cfg.machine_name == "edge-node-02"


def test_the_e2e_managed_identity_config(root):
    values, secrets, warnings = upstream_config.convert(document("upstream-e2e-mi.json"))
    assert values["auth_method"] == "managed-identity"
    assert "managed_identity_client_id" not in values
    assert (values["kubernetes_version"], values["containerd_version"], values["runc_version"]) == (
        "1.35.0", "1.7.13", "1.1.12")
    assert values["arc_location"] == "eastus2"  # upstream's default: targetCluster.location
    assert secrets == {}
    cfg = config.from_values(values, root=str(root))
    assert cfg.cluster.resource_id == (f"/subscriptions/{SUB}/resourceGroups/e2e-rg/providers/"
                                       "Microsoft.ContainerService/managedClusters/e2e-aks")
    assert cfg.machine_name == "upstream-host"


def test_a_managed_identity_client_id_is_kept():
    doc = document("upstream-e2e-mi.json")
    doc["azure"]["managedIdentity"] = {"clientId": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}
    values, _, _ = upstream_config.convert(doc)
    assert values["managed_identity_client_id"] == "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def test_every_mapped_key_of_a_full_config(root, tmp_path):
    values, secrets, warnings = upstream_config.load_file(private_copy(tmp_path, "upstream-full.json"))
    assert values == {
        "subscription_id": SUB,
        "tenant_id": TENANT.upper(),  # servicePrincipal.tenantId, the same tenant
        "cloud": "AzurePublicCloud",
        "auth_method": "service-principal",
        "sp_client_id": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "machine_name": "edge-node-03",
        "arc_resource_group": "edge-machines",
        "arc_location": "westeurope",
        "arc_tags": "site=lyon",
        "cluster_resource_id": "/subscriptions/66666666-7777-8888-9999-000000000000/resourceGroups/aks-rg/"
                               "providers/Microsoft.ContainerService/managedClusters/aks-edge",
        "kubernetes_version": "1.31.2",
        "kubernetes_url": "https://acs-mirror.azureedge.net/kubernetes/v{version}/binaries/"
                          "kubernetes-node-linux-{arch}.tar.gz",
        "containerd_version": "1.7.20",
        "pause_image": "mcr.microsoft.com/oss/kubernetes/pause:3.6",
        "containerd_metrics_address": "0.0.0.0:10257",
        "runc_version": "1.1.12",
        "cni_version": "1.5.1",
        "max_pods": "60",
        "node_labels": "tier=edge",  # kubernetes.azure.com/managed=false is always added anyway
        "node_taints": "dedicated=edge:NoSchedule,gpu:NoExecute",
        "kube_reserved": "cpu=100m,memory=512Mi",
        "eviction_hard": "memory.available<100Mi,nodefs.available<10%",
        "cluster_dns": "10.0.0.10",
        "node_ip": "192.168.10.21",
        "log_level": "warning",
    }
    assert secrets == {"sp_client_secret": SECRET}
    ignored = [w.split(":")[0] for w in warnings if ": ignored: " in w]
    assert ignored == [
        "agent.logDir", "agent.enableDriftDetectionAndRemediation", "runc.url", "npd.version",
        "node.kubelet.verbosity", "node.kubelet.imageGCHighThreshold", "node.kubelet.imageGCLowThreshold",
        "paths.kubernetes.configDir",
    ]
    assert any("kubernetes.urlTemplate: converted" in w for w in warnings)
    assert any("0.0.0.0:10257 exposes" in w for w in warnings)
    # and it is a valid configuration, the SP secret held in memory
    cfg = config.from_values(values, root=str(root), client_secret=secrets["sp_client_secret"])
    assert cfg.artifact_urls("kubernetes", cfg.kubernetes_version, "amd64")[0] == (
        "https://acs-mirror.azureedge.net/kubernetes/v1.31.2/binaries/kubernetes-node-linux-amd64.tar.gz")
    assert cfg.subscription_id == SUB and cfg.cluster.subscription_id == "66666666-7777-8888-9999-000000000000"


def test_a_bootstrap_token_is_a_clear_error_that_hides_the_token():
    with pytest.raises(ConfigError) as excinfo:
        upstream_config.load_file(fixture_path("upstream-bootstrap-token.json"))
    (problem,) = excinfo.value.problems
    assert problem.key == "azure.bootstrapToken.token" and problem.value == "***"
    assert "joins through Azure Arc only" in problem.expected
    assert "0123456789abcdef" not in str(excinfo.value)
    assert excinfo.value.source == fixture_path("upstream-bootstrap-token.json")


def test_a_missing_target_cluster_is_an_error_not_a_crash():
    with pytest.raises(ConfigError) as excinfo:
        upstream_config.load_file(fixture_path("upstream-no-target-cluster.json"))
    (problem,) = excinfo.value.problems
    assert problem.key == "azure.targetCluster.resourceId" and problem.value == "(missing)"
    assert "the AKS cluster's resource ID" in problem.expected


def test_an_empty_bootstrap_token_is_only_a_warning():
    doc = document("upstream-arc.json")
    doc["azure"]["bootstrapToken"] = {"token": ""}
    _, _, warnings = upstream_config.convert(doc)
    assert "azure.bootstrapToken: ignored: empty, and bootstrap tokens are not supported" in warnings


def with_change(name, change):
    doc = copy.deepcopy(document(name))
    change(doc)
    return doc


@pytest.mark.parametrize("change,key,expected", [
    (lambda d: d["azure"].update(managedIdentity={}), "azure.managedIdentity", "one of servicePrincipal and managedIdentity"),
    (lambda d: d["azure"]["servicePrincipal"].update(tenantId="99999999-9999-9999-9999-999999999999"),
     "azure.servicePrincipal.tenantId", "the same tenant as azure.tenantId"),
    (lambda d: d["azure"]["servicePrincipal"].pop("clientId"), "azure.servicePrincipal.clientId", "client) ID"),
    (lambda d: d["kubernetes"].update(urlTemplate="https://example.com/kubernetes-%s.tar.gz"),
     "kubernetes.urlTemplate", "two %s"),
    (lambda d: d["kubernetes"].update(urlTemplate="https://example.com/v%[1]s/k-%[2]s.tgz"),
     "kubernetes.urlTemplate", "two %s"),
    (lambda d: d["node"].update(maxPods="sixty"), "node.maxPods", "a number"),
    (lambda d: d["node"].update(maxPods=True), "node.maxPods", "a number"),
    (lambda d: d["node"].update(labels=["a=b"]), "node.labels", "an object"),
    (lambda d: d["node"].update(taints=["a=b:NoSchedule,c"]), "node.taints", "key=value:Effect strings"),
    (lambda d: d["azure"]["arc"].update(tags={"team": "a,b"}), "azure.arc.tags.team", "may contain ','"),
    (lambda d: d["azure"]["arc"].update(tags={"team": {"x": 1}}), "azure.arc.tags.team", "a text value"),
    (lambda d: d["azure"].update(subscriptionId=42), "azure.subscriptionId", "a string"),
    (lambda d: d["azure"]["servicePrincipal"].update(clientSecret=["s3cr3t~value.from-the-portal"]),
     "azure.servicePrincipal.clientSecret", "a string"),
])
def test_what_cannot_be_converted_is_named(change, key, expected):
    with pytest.raises(ConfigError) as excinfo:
        upstream_config.convert(with_change("upstream-full.json", change))
    problems = {p.key: p for p in excinfo.value.problems}
    assert key in problems, [str(p) for p in excinfo.value.problems]
    assert expected in problems[key].expected
    assert SECRET not in str(excinfo.value) and SECRET not in json.dumps(excinfo.value.to_dict())


def test_an_unknown_upstream_key_is_warned_about_by_name():
    doc = document("upstream-arc.json")
    doc["node"] = {"gpu": {"enabled": True}}
    doc["azure"]["arc"]["enabled"] = False
    _, _, warnings = upstream_config.convert(doc)
    assert "node.gpu.enabled: ignored: not a key aks-flex-node knows" in warnings
    assert any(w.startswith("azure.arc.enabled: false") for w in warnings)


def test_go_template_conversion_keeps_percent_escapes():
    doc = document("upstream-arc.json")
    doc["kubernetes"]["urlTemplate"] = "https://example.com/k%%20s/v%s/node-%s.tgz"
    values, _, _ = upstream_config.convert(doc)
    assert values["kubernetes_url"] == "https://example.com/k%20s/v{version}/node-{arch}.tgz"


@pytest.mark.parametrize("content,key,expected", [
    (b"[1, 2]", "config.json", "a JSON object"),
    (b'{"azure": ', "line 1 column 11", "valid JSON"),
    (b"\xff\xfe{}", "config file", "UTF-8 JSON"),
])
def test_a_file_that_is_not_a_config_json(tmp_path, content, key, expected):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as excinfo:
        upstream_config.load_file(path)
    problem = excinfo.value.problems[0]
    assert (problem.key, problem.expected) == (key, expected)
    assert excinfo.value.source == str(path)


def test_a_missing_config_json(tmp_path):
    with pytest.raises(ConfigError) as excinfo:
        config.load_upstream_json(str(tmp_path / "config.json"))
    assert excinfo.value.problems[0].value == str(tmp_path / "config.json")
