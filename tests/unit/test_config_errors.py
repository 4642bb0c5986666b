"""Every bad input is a ConfigProblem naming the key, the value and what is expected, and
all the problems of a file come at once."""

import json
import os

import pytest

from aks_flex_node import config
from aks_flex_node.errors import ConfigError, ExitCode
from tests.config_fixtures import (CLUSTER_ID, MINIMAL, SP_ID, SUB, TENANT, conf_text, load, make_root, only_problem,
                                   problems_of, secret_file, sp, with_values, write_conf)


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


# key, value, a piece of what is expected
BAD_VALUES = [
    ("subscription_id", "my-subscription", "a UUID such as"),
    ("tenant_id", "72f988bf86f141af91ab2d7cd011db47", "a UUID such as"),
    ("cloud", "AzureGermanCloud", "one of AzurePublicCloud, AzureUSGovernment, AzureChinaCloud, custom"),
    ("ca_bundle", "certs/ca.pem", "an absolute path"),
    ("auth_method", "password", "one of service-principal, azure-cli, managed-identity"),
    ("managed_identity_client_id", "my-identity", "a UUID"),
    ("machine_name", "Edge-Node", "a lowercase name"),
    ("machine_name", "edge_node", "a lowercase name"),
    ("machine_name", "n" * 55, "at most 54 characters"),
    ("machine_name", "edge..node", "a lowercase name"),
    ("arc_resource_group", "rg with spaces", "a resource group name"),
    ("arc_resource_group", "rg.", "not ending in '.'"),
    ("arc_location", "West Europe", "an Azure region name"),
    ("arc_tags", "env", "name=value tags such as"),
    ("arc_tags", "env=a,env=b", "env repeated"),
    ("arc_tags", "a/b=c", "Azure tags name=value"),
    ("arc_tags", "env=edge,,site=x", "separated by single commas"),
    ("himds_endpoint", "https://127.0.0.1:40342/metadata/identity/oauth2/token", "starting with http://"),
    ("himds_endpoint", "http://127.0.0.1:99999/x", "naming a host"),
    ("himds_key_dir", "var/opt/azcmagent/tokens", "an absolute path"),
    ("azcmagent", "azcmagent --verbose", "without arguments"),
    ("cluster_resource_id", f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm",
     "an AKS cluster resource ID"),
    ("cluster_resource_id", "/subscriptions/not-a-guid/resourceGroups/rg/providers/"
     "Microsoft.ContainerService/managedClusters/aks", "an AKS cluster resource ID"),
    ("cluster_resource_id", f"/subscriptions/{SUB}/resourceGroups/rg/providers/"
     "Microsoft.ContainerService/managedClusters/-aks", "an AKS cluster resource ID"),
    ("role_preset", "admin", "one of legacy"),
    # Retired: it cannot work on Azure; never a silent fallback to legacy.
    ("role_preset", "minimal", "For least privilege use join_mode = agent-pool (docs/roles.md)"),
    ("join_mode", "flex", "one of arc, agent-pool, bootstrap-token"),
    ("join_mode", "Agent-Pool", "one of arc, agent-pool, bootstrap-token"),
    ("agent_pool", "FlexPool", "a lowercase letter, then up to 11 lowercase letters or digits"),
    ("agent_pool", "flex-pool", "a lowercase letter, then up to 11 lowercase letters or digits"),
    ("agent_pool", "1pool", "a lowercase letter, then up to 11 lowercase letters or digits"),
    ("agent_pool", "flexnodepool1", "a lowercase letter, then up to 11 lowercase letters or digits"),
    ("bootstrap_token_file", "etc/aks-flex-node/bootstrap-token", "an absolute path"),
    ("api_server", "http://aks.example.com", "an https URL or host[:port]"),
    ("api_server", "https://aks.example.com/api", "an https URL or host[:port]"),
    ("api_server", "https://user:pw@aks.example.com", "an https URL or host[:port]"),
    ("api_server", "aks.example.com:99999", "an https URL or host[:port]"),
    ("api_server", "aks_example.com", "an https URL or host[:port]"),
    ("api_server", "aks.example.com 443", "an https URL or host[:port]"),
    ("cluster_ca_file", "ca.crt", "an absolute path"),
    ("kubernetes_version", "1.30", "a Kubernetes version x.y.z"),
    ("kubernetes_version", "latest", "a Kubernetes version x.y.z"),
    ("upgrade_window", "weekends", "HH:MM-HH:MM of the node's local time"),
    ("upgrade_window", "Sat,Sun 25:00-05:00", "HH:MM-HH:MM of the node's local time"),
    ("upgrade_window", "Caturday 02:00-05:00", "'caturday' is not a day"),
    ("upgrade_window", "02:00-02:00", "opens and closes at the same minute"),
    ("upgrade_drain_timeout", "-1", "a whole number from 0 to 86400"),
    ("containerd_version", "2.0", "a version number x.y.z"),
    ("runc_version", "v1.1.12-", "a version number x.y.z"),
    ("cni_version", "one", "a version number x.y.z"),
    ("pause_image", "mcr.microsoft.com/oss/kubernetes/pause", "with a tag or digest"),
    ("pause_image", "MCR.io/Pause:3.9", "with a tag or digest"),
    ("kubernetes_url", "https://dl.k8s.io/v{version}/kubernetes-node-linux-amd64.tar.gz", "containing {version} and {arch}"),
    ("kubernetes_url", "https://dl.k8s.io/v{version}/kubernetes-node-{os}-{arch}.tar.gz", "no other {placeholder}"),
    ("containerd_url", "http://example.com/containerd-{version}-{arch}.tgz", "an https URL template"),
    ("runc_url", "https://example.com/{version/runc.{arch}", "an https URL template"),
    ("cni_url", "https://example.com/cni-{0}-{arch}.tgz", "no other {placeholder}"),
    ("containerd_sha256_url", "{url} .sha256", "an https URL template"),
    ("runc_sha256_url", "http://example.com/v{version}/runc.sha256sum", "an https URL template"),
    ("cni_sha256_url", "https://example.com/cni.sha256", "at least {url} or {version}"),
    ("kubernetes_sha256_url", "{url}.{sum}", "using only {url}, {version} and {arch}"),
    ("artifact_mirror", "ftp://mirror.example.com", "starting with https://"),
    ("artifact_digests_file", "digests.txt", "an absolute path"),
    ("cache_dir", "cache", "an absolute path"),
    ("registry_mirrors", "mcr.microsoft.com", "has no '='"),
    ("registry_mirrors", "https://mcr.microsoft.com=https://mirror.example", "no scheme and no path"),
    ("registry_mirrors", "MCR.microsoft.com=https://mirror.example", "is not lowercase"),
    ("registry_mirrors", "mcr.microsoft.com:0=https://mirror.example", "port from 1 to 65535"),
    ("registry_mirrors", "mcr.microsoft.com=http://mirror.example", "an https URL"),
    ("registry_mirrors", "mcr.microsoft.com=https://mirror.example/v2/mcr", "no path"),
    ("registry_mirrors", "mcr.microsoft.com=https://user:pw@mirror.example", "no user:password"),
    ("registry_mirrors", "mcr.microsoft.com=https://a.example,mcr.microsoft.com=https://b.example", "named twice"),
    ("registry_mirrors", "mcr.microsoft.com=https://a.example,,docker.io=https://b.example", "an empty item"),
    ("registry_ca_file", "ca.crt", "an absolute path"),
    ("node_labels", "tier", "has no '='"),
    ("node_labels", "tier=edge node", "is not a valid label"),
    ("node_labels", "node-role.kubernetes.io/worker=", "labels the kubelet may set"),
    ("node_labels", "kubernetes.azure.com/managed=true", "is always false"),
    ("node_taints", "dedicated=edge", "Effect one of NoSchedule, PreferNoSchedule, NoExecute"),
    ("node_taints", "dedicated=edge:Never", "'dedicated=edge:Never' is not"),
    ("max_pods", "0", "a whole number from 1 to 250"),
    ("max_pods", "251", "a whole number from 1 to 250"),
    ("max_pods", "many", "a whole number from 1 to 250"),
    ("kube_reserved", "gpu=1", "resource one of cpu, memory, ephemeral-storage, pid"),
    ("kube_reserved", "memory=lots", "a quantity such as 100m or 512Mi"),
    ("eviction_hard", "memory.available=100Mi", "has no '<'"),
    ("eviction_hard", "memory.free<100Mi", "signal one of memory.available"),
    ("eviction_hard", "memory.available<lots", "a quantity or percentage"),
    ("node_ip", "10.0.0.300", "an IPv4 or IPv6 address"),
    # issue 26, defect 8: a zone index passed, then broke the drop-in's specifier expansion
    ("node_ip", "fe80::1%eth0", "without a zone index"),
    ("cluster_dns", "fe80::a%1", "without a zone index"),
    ("cluster_dns", "dns.example.com", "an IPv4 or IPv6 address"),
    ("cluster_domain", "Cluster.Local", "a lowercase DNS domain"),
    ("bridge_subnet", "10.244.0.1/24", "no host bits set"),
    ("bridge_subnet", "10.244.0.0/33", "CIDR"),
    ("node_ready_timeout", "5", "a whole number from 10 to 3600"),
    ("containerd_metrics_address", "127.0.0.1", "host:port"),
    ("containerd_metrics_address", "[::1:10257", "host:port"),
    ("containerd_metrics_address", "127.0.0.1:0", "host:port"),
    ("gpu", "intel", "one of auto, off, nvidia, amd"),
    ("gpu_taints", "sku=gpu:Never", "NoSchedule"),
    ("https_proxy", "proxy.example.com:3128", "starting with http:// or https://"),
    ("no_proxy", "localhost,,example.com", "separated by commas"),
    ("no_proxy", "local host", "separated by commas"),
    ("log_level", "verbose", "one of debug, info, warning, error"),
    ("exec_plugin_command", "aks-flex-node", "an absolute path"),
    ("metrics_textfile_dir", "var/lib/prometheus/node-exporter", "an absolute path"),
]


@pytest.mark.parametrize("key,value,expected", BAD_VALUES, ids=[f"{k}={v}" for k, v, _ in BAD_VALUES])
def test_a_bad_value_names_key_value_and_expectation(root, key, value, expected):
    problem = only_problem(root, with_values(**{key: value}), key)
    assert problem.value == value
    assert expected in problem.expected
    assert key in str(problem) and repr(value) in str(problem)


def test_every_key_with_a_check_is_covered_by_a_bad_value_case():
    # keys whose every text is valid or whose checks are semantic only
    free = {"arm_endpoint", "authority_host", "sp_client_id", "sp_client_secret_file", "sp_certificate_file"}
    covered = {key for key, _, _ in BAD_VALUES}
    assert set(config.keys()) - covered - free == set()


@pytest.mark.parametrize("key", ["tenant_id", "auth_method", "cluster_resource_id"])
def test_a_missing_required_key_says_what_it_needs(root, key):
    sections = {name: {k: v for k, v in values.items() if k != key} for name, values in MINIMAL.items()}
    problem = only_problem(root, sections, key)
    assert problem.value == ""
    assert key in problem.expected


def test_all_problems_are_reported_at_once_in_key_order(root):
    with pytest.raises(ConfigError) as excinfo:
        load(root, {
            "azure": {"tenant_id": "nope", "cloud": "Mars"},
            "node": {"max_pods": "999", "node_taints": "x"},
            "agent": {"log_level": "loud"},
        })
    err = excinfo.value
    assert [p.key for p in err.problems] == [
        "tenant_id", "cloud", "auth_method", "cluster_resource_id", "node_taints", "max_pods", "log_level"]
    assert err.exit_code == ExitCode.USAGE
    assert err.source.endswith("etc/aks-flex-node/aks-flex-node.conf")
    assert err.source in str(err)
    as_json = json.loads(json.dumps(err.to_dict()))
    assert as_json["error"] == "config"
    assert [(p["key"], p["value"]) for p in as_json["problems"]][:2] == [("tenant_id", "nope"), ("cloud", "Mars")]
    assert all(p["expected"] for p in as_json["problems"])


# ---------------------------------------------------------------------------------- structure


def test_a_typo_in_a_key_suggests_the_nearest_key(root):
    problem = only_problem(root, with_values(**{}) | {"node": {"max_pod": "3"}}, "max_pod")
    assert problem.value == "3"
    assert "max_pods" in problem.expected  # the nearest key, suggested


def test_an_upstream_style_key_name_suggests_ours(root):
    sections = with_values()
    sections["azure"]["subscriptionId"] = SUB
    problem = only_problem(root, sections, "subscriptionId")
    assert "subscription_id" in problem.expected


def test_a_key_in_the_wrong_section_names_its_section(root):
    sections = with_values()
    sections["azure"]["max_pods"] = "12"
    problem = only_problem(root, sections, "max_pods")
    assert problem.value == "12"
    assert "[node]" in problem.expected and "[azure]" in problem.expected


def test_a_key_outside_any_section(root):
    problem = only_problem(root, "max_pods = 12\n" + conf_text(MINIMAL), "max_pods")
    assert problem.value == "12"
    assert "[node]" in problem.expected


def test_an_unknown_section_suggests_the_nearest(root):
    sections = with_values()
    sections["nodes"] = {"max_pods": "12"}
    problem = only_problem(root, sections, "[nodes]")
    assert "[node]" in problem.expected


def test_subsections_are_refused(root):
    text = conf_text(MINIMAL) + "[node]\n[[kubelet]]\nverbosity = 2\n"
    only_problem(root, text, "[node] [[kubelet]]")


def test_an_inline_comment_is_refused_because_sh_would_read_it(root):
    text = conf_text(MINIMAL) + "[node]\nmax_pods = 30 # fewer\n"
    problem = only_problem(root, text, "max_pods")
    assert problem.value == "30"  # a good value: the comment after it is what is refused


def test_quoted_values_are_refused(root):
    problem = only_problem(root, with_values(log_level='"debug"'), "log_level")
    assert problem.value == '"debug"'


def test_multi_line_values_are_refused(root):
    text = conf_text(MINIMAL) + "[node]\nnode_labels = '''a=b,\nc=d'''\n"
    problem = only_problem(root, text, "node_labels")
    assert problem.value.startswith("a=b,")


def test_a_duplicate_key_is_a_problem_with_its_line(root):
    text = conf_text(MINIMAL) + "[node]\nmax_pods = 30\nmax_pods = 40\n"
    with pytest.raises(ConfigError) as excinfo:
        load(root, text)
    keys = [p.key for p in excinfo.value.problems]
    assert keys == ["line 9"], keys
    assert excinfo.value.problems[0].value == "max_pods = 40"


def test_a_garbled_line_is_reported_with_the_other_problems(root):
    text = conf_text(with_values(max_pods="0")) + "[agent]\nthis line has no equals sign\n"
    with pytest.raises(ConfigError) as excinfo:
        load(root, text)
    problems = problems_of(excinfo)
    assert problems["max_pods"].value == "0" and "250" in problems["max_pods"].expected
    (line,) = [p for key, p in problems.items() if key.startswith("line ")]
    assert line.value == "this line has no equals sign"


def test_a_config_path_that_is_a_directory(root):
    with pytest.raises(ConfigError) as excinfo:
        config.load("/etc", root=str(root))
    (problem,) = excinfo.value.problems
    assert problem.key == "config file" and problem.value == str(root / "etc")
    assert str(root / "etc") in problem.expected and "directory" in problem.expected


def test_a_file_that_is_not_utf8(root):
    write_conf(root, "")
    (root / "etc/aks-flex-node/aks-flex-node.conf").write_bytes(b"[azure]\ntenant_id = \xff\xfe\n")
    with pytest.raises(ConfigError) as excinfo:
        config.load(root=str(root))
    (problem,) = excinfo.value.problems
    assert (problem.key, problem.value) == ("config file", str(root / "etc/aks-flex-node/aks-flex-node.conf"))
    assert "UnicodeDecodeError" in problem.expected


@pytest.mark.parametrize("key", ["sp_client_secret", "client_secret", "clientSecret", "proxy_password"])
def test_an_inline_secret_is_refused_and_never_shown(root, key):
    sections = with_values()
    sections["auth"][key] = "hunter2-topsecret"
    with pytest.raises(ConfigError) as excinfo:
        load(root, sections)
    (problem,) = excinfo.value.problems
    assert problem.key == key and problem.value == "***"
    assert "sp_client_secret_file" in problem.expected and "chmod 600" in problem.expected
    assert "hunter2" not in str(excinfo.value) and "hunter2" not in json.dumps(excinfo.value.to_dict())


def test_proxy_credentials_in_a_file_others_can_read_are_refused(root):
    path = write_conf(root, with_values(https_proxy="http://user:hunter2@proxy:3128"))
    path.chmod(0o644)
    with pytest.raises(ConfigError) as excinfo:
        config.load(root=str(root))
    (problem,) = excinfo.value.problems
    assert (problem.key, problem.value) == ("https_proxy", "http://***@proxy:3128")
    assert f"chmod 600 {path}" in problem.expected
    path.chmod(0o600)
    assert config.load(root=str(root)).https_proxy == "http://user:hunter2@proxy:3128"


def test_a_bad_proxy_url_does_not_show_its_password(root):
    problem = only_problem(root, with_values(https_proxy="socks5://user:hunter2@proxy:1080"), "https_proxy")
    assert problem.value == "socks5://***@proxy:1080"


# ---------------------------------------------------------------------------------- auth


def test_service_principal_with_a_secret_file(root):
    cfg = load(root, sp(sp_client_secret_file=secret_file(root)))
    assert cfg.auth_method == "service-principal" and cfg.sp_client_id == SP_ID
    assert cfg.client_secret() == "s3cr3t"


def test_service_principal_needs_a_client_id(root):
    sections = sp(sp_client_secret_file=secret_file(root))
    del sections["auth"]["sp_client_id"]
    problem = only_problem(root, sections, "sp_client_id")
    assert problem.value == "" and "auth_method = service-principal" in problem.expected


def test_service_principal_needs_a_secret_or_a_certificate(root):
    problem = only_problem(root, sp(), "sp_client_secret_file")
    assert problem.value == ""
    assert "sp_certificate_file" in problem.expected and "auth_method = service-principal" in problem.expected


def test_service_principal_takes_only_one_of_secret_and_certificate(root):
    cert = secret_file(root, "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
                             "-----BEGIN PRIVATE KEY-----\ny\n-----END PRIVATE KEY-----\n", name="sp.pem")
    problem = only_problem(root, sp(sp_client_secret_file=secret_file(root), sp_certificate_file=cert),
                           "sp_certificate_file")
    assert problem.value == cert and "sp_client_secret_file" in problem.expected


def test_service_principal_with_a_certificate(root):
    cert = secret_file(root, "-----BEGIN RSA PRIVATE KEY-----\ny\n-----END RSA PRIVATE KEY-----\n"
                             "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n", name="sp.pem")
    assert load(root, sp(sp_certificate_file=cert)).sp_certificate_file == cert


def test_a_certificate_file_without_its_key(root):
    cert = secret_file(root, "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n", name="sp.pem")
    problem = only_problem(root, sp(sp_certificate_file=cert), "sp_certificate_file")
    assert problem.value == cert and "PRIVATE KEY" in problem.expected


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_a_secret_file_others_can_read_is_refused(root, mode):
    path = secret_file(root, mode=mode)
    problem = only_problem(root, sp(sp_client_secret_file=path), "sp_client_secret_file")
    assert problem.value == path
    # The command names the file where it is on this filesystem (under the root prefix).
    assert "0600" in problem.expected and f"{mode:04o}" in problem.expected
    assert problem.expected.endswith(f"chmod 600 {root / path.lstrip('/')}")


def test_a_secret_file_gone_after_loading_is_a_config_error_when_read(root):
    path = secret_file(root)
    cfg = load(root, sp(sp_client_secret_file=path))
    (root / path.lstrip("/")).unlink()
    with pytest.raises(ConfigError) as excinfo:
        cfg.client_secret()
    (problem,) = excinfo.value.problems
    assert (problem.key, problem.value) == ("sp_client_secret_file", path)
    assert "FileNotFoundError" in problem.expected


def test_a_secret_file_that_does_not_exist_is_looked_up_under_the_root(root):
    problem = only_problem(root, sp(sp_client_secret_file="/etc/aks-flex-node/nope"), "sp_client_secret_file")
    assert str(root / "etc/aks-flex-node/nope") in problem.expected


def test_a_secret_file_must_be_a_regular_non_empty_file(root):
    (root / "etc/aks-flex-node/dir").mkdir(parents=True)
    problem = only_problem(root, sp(sp_client_secret_file="/etc/aks-flex-node/dir"), "sp_client_secret_file")
    assert problem.value == "/etc/aks-flex-node/dir" and "directory" in problem.expected
    empty = secret_file(root, content="", name="empty")
    assert only_problem(root, sp(sp_client_secret_file=empty), "sp_client_secret_file").value == empty


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_secret_file_owned_by_another_user_is_refused(root):
    path = secret_file(root)
    os.chown(root / path.lstrip("/"), 4242, -1)
    problem = only_problem(root, sp(sp_client_secret_file=path), "sp_client_secret_file")
    assert problem.value == path and "uid 4242" in problem.expected


@pytest.mark.parametrize("method", ["azure-cli", "managed-identity"])
def test_service_principal_keys_with_another_method_are_refused(root, method):
    problem = only_problem(root, with_values(auth_method=method, sp_client_id=SP_ID), "sp_client_id")
    assert problem.value == SP_ID
    assert f"auth_method = {method}" in problem.expected and "service-principal" in problem.expected


def test_a_managed_identity_client_id(root):
    cfg = load(root, with_values(auth_method="managed-identity", managed_identity_client_id=SP_ID.upper()))
    assert cfg.managed_identity_client_id == SP_ID
    problem = only_problem(root, with_values(managed_identity_client_id=SP_ID), "managed_identity_client_id")
    assert problem.value == SP_ID and "managed-identity" in problem.expected


def test_a_missing_auth_method_with_sp_keys_suggests_service_principal(root):
    sections = sp(sp_client_secret_file=secret_file(root))
    del sections["auth"]["auth_method"]
    problem = only_problem(root, sections, "auth_method")
    assert problem.value == ""
    assert "sp_client_id" in problem.expected and "service-principal" in problem.expected


# ---------------------------------------------------------------------------------- cloud, files


@pytest.mark.parametrize("missing", ["arm_endpoint", "authority_host"])
def test_a_custom_cloud_needs_both_endpoints(root, missing):
    values = {"cloud": "custom", "arm_endpoint": "https://127.0.0.1:8443", "authority_host": "https://127.0.0.1:8443"}
    del values[missing]
    problem = only_problem(root, with_values(**values), missing)
    assert problem.value == "" and "cloud = custom" in problem.expected


def test_a_named_cloud_refuses_endpoints(root):
    problem = only_problem(root, with_values(arm_endpoint="https://127.0.0.1:8443"), "arm_endpoint")
    assert problem.value == "https://127.0.0.1:8443" and "cloud = custom" in problem.expected


def test_endpoints_must_be_https(root):
    problem = only_problem(root, with_values(cloud="custom", arm_endpoint="http://127.0.0.1:8443",
                                             authority_host="https://127.0.0.1:8443"), "arm_endpoint")
    assert problem.value == "http://127.0.0.1:8443" and "https://" in problem.expected


def test_a_ca_bundle_must_exist_and_hold_certificates(root):
    problem = only_problem(root, with_values(ca_bundle="/etc/ssl/nope.pem"), "ca_bundle")
    assert problem.value == "/etc/ssl/nope.pem" and str(root / "etc/ssl/nope.pem") in problem.expected
    (root / "ca.pem").write_text("not a certificate\n")
    problem = only_problem(root, with_values(ca_bundle="/ca.pem"), "ca_bundle")
    assert problem.value == "/ca.pem" and "CERTIFICATE" in problem.expected


def test_subscription_mismatch_is_not_an_error(root):
    other = "66666666-7777-8888-9999-000000000000"
    cfg = load(root, with_values(subscription_id=other))
    assert cfg.subscription_id == other and cfg.cluster.subscription_id == SUB


def test_the_managed_label_may_be_given_as_false(root):
    cfg = load(root, with_values(node_labels="kubernetes.azure.com/managed=false,tier=edge"))
    assert cfg.node_labels == ["kubernetes.azure.com/managed=false", "tier=edge"]


def test_the_minimal_config_itself_is_valid(root):
    # guards the fixtures the other tests build on
    assert load(root, MINIMAL).tenant_id == TENANT
    assert CLUSTER_ID.startswith(f"/subscriptions/{SUB}/")
