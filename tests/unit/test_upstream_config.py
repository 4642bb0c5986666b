"""Converting the upstream Go agent's config.json (Azure/AKSFlexNode v0.0.10's pkg/config and its README
examples, tests/data/config/upstream-*.json) into our keys."""

import base64
import copy
import json
import os
import shutil

import pytest

from aks_flex_node import config
from aks_flex_node.config import upstream as upstream_config
from aks_flex_node.config import importer
from aks_flex_node.errors import ConfigError
from tests.config_fixtures import make_root
from tests.upstream_fixtures import SECRET, document, fixture_path

SUB = "11111111-2222-3333-4444-555555555555"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"


def warned(warnings):
    """The conversion's warnings by the upstream key each names first ("key: what happened")."""
    return dict(w.split(": ", 1) for w in warnings)


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
    assert "azure.tenantId" in tenant_warning  # the tenant used instead
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


def test_the_v0010_readme_bootstrap_token_shape_with_a_truncated_ca_is_refused_hiding_the_token():
    # The v0.0.10 README put serverURL and caCertData under azure.bootstrapToken (upstream
    # reads node.kubelet.*; fixed by Azure/AKSFlexNode#88); its caCertData is only a BEGIN line.
    with pytest.raises(ConfigError) as excinfo:
        upstream_config.load_file(fixture_path("upstream-bootstrap-token.json"))
    (problem,) = excinfo.value.problems
    assert problem.key == "azure.bootstrapToken.caCertData"
    assert problem.value and "PEM" in problem.expected  # the format it must have
    assert "0123456789abcdef" not in str(excinfo.value)
    assert excinfo.value.source == fixture_path("upstream-bootstrap-token.json")


def test_a_missing_target_cluster_is_an_error_not_a_crash():
    with pytest.raises(ConfigError) as excinfo:
        upstream_config.load_file(fixture_path("upstream-no-target-cluster.json"))
    (problem,) = excinfo.value.problems
    assert problem.key == "azure.targetCluster.resourceId" and problem.value == "(missing)"
    assert "/subscriptions/" in problem.expected  # the form of the ID it needs


def test_an_empty_bootstrap_token_is_only_a_warning():
    doc = document("upstream-arc.json")
    doc["azure"]["bootstrapToken"] = {"token": ""}
    _, _, warnings = upstream_config.convert(doc)
    assert warned(warnings)["azure.bootstrapToken.token"].startswith("ignored")


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
    assert warned(warnings)["node.gpu.enabled"].startswith("ignored")
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


# ---------------------------------------------------------------------------- join modes
# config.json files that join an agent pool or with a bootstrap token (Azure/AKSFlexNode
# v0.0.10 docs/usage.md's bootstrap-token example, and the newer docs/usage/configuration.md
# and getting-started.md samples with targetAgentPoolName, components, networking).

TOKEN = "abcdef.0123456789abcdef"
TOKEN_SECRET = "0123456789abcdef"
SP_SECRET = "s3cr3t~value.from-the-portal"
CLUSTER_ID = ("/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/aks-rg/providers/"
              "Microsoft.ContainerService/managedClusters/aks-edge")


def ca_pem(name):
    return base64.b64decode(document(name)["node"]["kubelet"]["caCertData"]).decode()


@pytest.fixture
def etc_root(tmp_path):
    root = make_root(tmp_path, "upstream-host")
    (root / "etc/aks-flex-node").mkdir(parents=True)
    return root


def test_the_v0010_bootstrap_token_example(root):
    values, secrets, warnings = upstream_config.convert(document("upstream-v0010-bootstrap-token.json"))
    assert values == {
        "subscription_id": "11111111-2222-3333-4444-555555555555",
        "tenant_id": "72f988bf-86f1-41af-91ab-2d7cd011db47",
        "cloud": "AzurePublicCloud",
        "join_mode": "bootstrap-token",
        "api_server": "https://aks-edge-dns-12345678.hcp.westus.azmk8s.io:443",
        "cluster_resource_id": CLUSTER_ID,
        "kubernetes_version": "1.30.4",
        "max_pods": "110",
        "cluster_dns": "10.0.0.10",
        "log_level": "info",
    }
    assert secrets == {"bootstrap_token": TOKEN, "cluster_ca": ca_pem("upstream-v0010-bootstrap-token.json")}
    assert list(warned(warnings)) == ["agent.logDir"] and warned(warnings)["agent.logDir"].startswith("ignored")


def test_the_newer_agent_pool_sample_with_a_managed_identity(root):
    values, secrets, warnings = upstream_config.convert(document("upstream-agent-pool-mi.json"))
    assert values == {
        "subscription_id": "11111111-2222-3333-4444-555555555555",
        "tenant_id": "72f988bf-86f1-41af-91ab-2d7cd011db47",
        "cloud": "AzurePublicCloud",  # from resourceManagerEndpoint
        "join_mode": "agent-pool",
        "agent_pool": "aksflexnodes",
        "auth_method": "managed-identity",
        "machine_name": "flex-node-1",  # agent.nodeName, lowercased
        "cluster_resource_id": CLUSTER_ID,
        "kubernetes_version": "1.35.6",
        "containerd_version": "2.0.4",
        "pause_image": "mcr.microsoft.com/oss/kubernetes/pause:3.10",
        "runc_version": "1.2.5",
        "cni_version": "1.5.1",
        "max_pods": "250",
        "node_labels": "tier=edge",
        "node_taints": "dedicated=edge:NoSchedule",
        "cluster_dns": "10.0.0.10",
        "log_level": "info",
    }
    assert secrets == {}
    assert "arc_location" not in values  # no Arc machine: targetCluster.location is the cluster's
    assert sorted(w.split(":")[0] for w in warnings) == [
        "agent.machineClient.mode", "agent.nodeName", "agent.requireMachineRegistration", "azure.arc.enabled"]


def test_an_agent_pool_config_json_loads_directly(root):
    cfg = config.load_upstream_json(node_copy(root, "upstream-agent-pool-mi.json"), root=str(root))
    assert (cfg.join_mode, cfg.agent_pool, cfg.auth_method) == ("agent-pool", "aksflexnodes", "managed-identity")
    assert cfg.is_set("agent_pool") and not cfg.is_set("bootstrap_token_file")
    assert cfg.bootstrap_token() is None


def test_an_agent_pool_config_keeps_no_initial_token_server_or_ca(root):
    """With a node credential every join gets a fresh token from listBootstrapData: the
    boot command's initial one (24 h) would expire and override AKS's."""
    values, secrets, warnings = upstream_config.convert(document("upstream-agent-pool-sp.json"))
    assert values["join_mode"] == "agent-pool" and values["agent_pool"] == "flexpool"
    assert values["auth_method"] == "service-principal"
    assert secrets == {"sp_client_secret": SP_SECRET}
    assert "api_server" not in values and "bootstrap_token_file" not in values
    ignored = sorted(w.split(":")[0] for w in warnings if "fetches a fresh token" in w)
    assert ignored == ["azure.bootstrapToken.token", "node.kubelet.caCertData", "node.kubelet.clusterFQDN"]
    assert not any(TOKEN_SECRET in w for w in warnings)


def test_the_newer_bootstrap_token_sample_without_a_credential_joins_with_the_token(root):
    values, secrets, warnings = upstream_config.convert(document("upstream-pool-bootstrap-token.json"))
    assert values["join_mode"] == "bootstrap-token" and "agent_pool" not in values
    assert "auth_method" not in values
    assert values["api_server"] == "aks-edge-dns-12345678.hcp.eastus.azmk8s.io:443"
    assert values["cluster_dns"] == "10.0.0.10" and values["kubernetes_version"] == "1.35.6"
    assert secrets["bootstrap_token"] == TOKEN
    (pool_warning,) = [w for w in warnings if w.startswith("azure.targetAgentPoolName")]
    assert "join_mode = bootstrap-token" in pool_warning  # the mode it joins with instead


def test_a_bootstrap_token_config_json_holds_token_and_ca_in_memory(root):
    cfg = config.load_upstream_json(node_copy(root, "upstream-v0010-bootstrap-token.json"), root=str(root))
    assert cfg.join_mode == "bootstrap-token" and cfg.auth_method == ""
    assert cfg.bootstrap_token() == TOKEN
    assert cfg.cluster_ca() == ca_pem("upstream-v0010-bootstrap-token.json")
    assert cfg.bootstrap_token_file == "" and cfg.is_set("bootstrap_token_file")
    assert cfg.api_server_url == "https://aks-edge-dns-12345678.hcp.westus.azmk8s.io:443"
    assert TOKEN_SECRET not in json.dumps(cfg.as_dict(redact=False)) and TOKEN_SECRET not in repr(cfg)


def test_a_config_json_others_can_read_holding_a_token_is_warned_about(tmp_path):
    path = private_copy(tmp_path, "upstream-v0010-bootstrap-token.json", mode=0o644)
    _values, _secrets, warnings = upstream_config.load_file(path)
    assert any(f"{path} holds a bootstrap token and others can read it (mode 0644)" in w for w in warnings)


def test_import_writes_the_token_and_the_ca_apart_and_they_load(etc_root, tmp_path):
    root = etc_root
    source = private_copy(tmp_path / "in", "upstream-v0010-bootstrap-token.json")
    done = importer.import_upstream(str(source), root=str(root))
    assert done.files == {"bootstrap_token_file": "/etc/aks-flex-node/bootstrap-token",
                          "cluster_ca_file": "/etc/aks-flex-node/cluster-ca.crt"}
    assert done.secret_file is None
    token_file = root / "etc/aks-flex-node/bootstrap-token"
    ca_file = root / "etc/aks-flex-node/cluster-ca.crt"
    assert token_file.read_text() == TOKEN + "\n" and oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert ca_file.read_text() == ca_pem("upstream-v0010-bootstrap-token.json")
    assert oct(ca_file.stat().st_mode & 0o777) == "0o644"
    text = (root / "etc/aks-flex-node/aks-flex-node.conf").read_text()
    assert TOKEN_SECRET not in text and "BEGIN CERTIFICATE" not in text
    assert "join_mode = bootstrap-token" in text
    assert "bootstrap_token_file = /etc/aks-flex-node/bootstrap-token" in text
    cfg = config.load(root=str(root))
    assert cfg.bootstrap_token() == TOKEN and cfg.cluster_ca() == ca_file.read_text()


def test_import_of_an_agent_pool_sp_config_writes_only_the_client_secret(etc_root, tmp_path):
    root = etc_root
    source = private_copy(tmp_path / "in", "upstream-agent-pool-sp.json")
    done = importer.import_upstream(str(source), root=str(root))
    assert done.files == {"sp_client_secret_file": "/etc/aks-flex-node/sp-client-secret"}
    assert sorted(os.listdir(root / "etc/aks-flex-node")) == ["aks-flex-node.conf", "sp-client-secret"]
    cfg = config.load(root=str(root))
    assert (cfg.join_mode, cfg.agent_pool, cfg.client_secret()) == ("agent-pool", "flexpool", SP_SECRET)


def test_import_refuses_a_secret_file_where_the_token_goes(etc_root, tmp_path):
    root = etc_root
    source = private_copy(tmp_path / "in", "upstream-v0010-bootstrap-token.json")
    (root / "etc/aks-flex-node/cluster-ca.crt").mkdir()
    with pytest.raises(ConfigError) as excinfo:
        importer.import_upstream(str(source), root=str(root))
    assert [p.key for p in excinfo.value.problems] == ["cluster_ca_file"]
    assert sorted(os.listdir(root / "etc/aks-flex-node")) == ["cluster-ca.crt"]


def _set(path, value):
    def change(doc):
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return change


@pytest.mark.parametrize("name,path,value,key,expected", [
    ("upstream-v0010-bootstrap-token.json", "azure.bootstrapToken.token", "ABCDEF.0123456789ABCDEF",
     "azure.bootstrapToken.token", "not a bootstrap token of the form <6 chars>.<16 chars>"),
    ("upstream-v0010-bootstrap-token.json", "azure.bootstrapToken.token", "abcdef-0123456789abcdef",
     "azure.bootstrapToken.token", "not a bootstrap token of the form"),
    ("upstream-v0010-bootstrap-token.json", "node.kubelet.serverURL", None,
     "node.kubelet.serverURL", "required with a bootstrap token"),
    ("upstream-v0010-bootstrap-token.json", "node.kubelet.caCertData", None,
     "node.kubelet.caCertData", "required with a bootstrap token"),
    ("upstream-v0010-bootstrap-token.json", "node.kubelet.caCertData", "not base64!",
     "node.kubelet.caCertData", "the base64 of a PEM file"),
    ("upstream-v0010-bootstrap-token.json", "node.kubelet.caCertData", base64.b64encode(b"\xff\xfe").decode(),
     "node.kubelet.caCertData", "the base64 of a PEM file"),
    ("upstream-v0010-bootstrap-token.json", "azure.managedIdentity", {},
     "azure.bootstrapToken", "one of them without azure.targetAgentPoolName"),
    ("upstream-agent-pool-mi.json", "azure.managedIdentity", None,
     "azure.targetAgentPoolName", "azure.servicePrincipal or azure.managedIdentity along with it"),
    ("upstream-agent-pool-mi.json", "azure.resourceManagerEndpoint", "https://management.example.com",
     "azure.resourceManagerEndpoint", "the ARM endpoint of a known cloud"),
    ("upstream-agent-pool-mi.json", "azure.cloud", "AzureChinaCloud",
     "azure.resourceManagerEndpoint", "the ARM endpoint of azure.cloud (AzureChinaCloud)"),
    ("upstream-agent-pool-mi.json", "kubernetes.version", "1.30.4",
     "components.kubernetes", "the same value as kubernetes.version"),
])
def test_what_cannot_be_converted_is_named_and_the_token_hidden(name, path, value, key, expected):
    with pytest.raises(ConfigError) as excinfo:
        upstream_config.convert(with_change(name, _set(path, value)))
    found = {p.key: p for p in excinfo.value.problems}
    assert key in found, [str(p) for p in excinfo.value.problems]
    assert expected in found[key].expected
    assert TOKEN_SECRET not in str(excinfo.value) and "0123456789ABCDEF" not in str(excinfo.value)


@pytest.mark.parametrize("name,path,value,key", [
    ("upstream-agent-pool-mi.json", "azure.targetAgentPoolName", "Flex-Pool", "agent_pool"),
    ("upstream-agent-pool-mi.json", "azure.managedIdentity", None, "azure.targetAgentPoolName"),
    ("upstream-v0010-bootstrap-token.json", "node.kubelet.serverURL", "http://aks.example.com", "api_server"),
])
def test_a_bad_value_through_load_names_our_key(etc_root, name, path, value, key):
    root = etc_root
    doc = with_change(name, _set(path, value))
    target = root / "etc/aks-flex-node/config.json"
    target.write_text(json.dumps(doc))
    target.chmod(0o600)
    with pytest.raises(ConfigError) as excinfo:
        config.load_upstream_json("/etc/aks-flex-node/config.json", root=str(root))
    assert key in [p.key for p in excinfo.value.problems]
