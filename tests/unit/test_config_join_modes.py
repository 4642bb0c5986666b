"""join_mode: what arc, agent-pool and bootstrap-token each require and refuse, the files
bootstrap-token names (token, cluster CA), and the Config helpers the join steps read
(is_set, bootstrap_token, cluster_ca, api_server_url)."""

import json
import os
import ssl

import pytest

from aks_flex_node import config
from aks_flex_node.errors import ConfigError
from tests.config_fixtures import MINIMAL, SP_ID, load, make_root, problems_of, with_values

TOKEN = "abcdef.0123456789abcdef"
TOKEN_SECRET = "0123456789abcdef"
CA_PEM = ("-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----\n")


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def node_file(root, name, content, mode=0o600):
    path = root / "etc/aks-flex-node" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content) if isinstance(content, str) else path.write_bytes(content)
    path.chmod(mode)
    return "/etc/aks-flex-node/" + name


def sections(drop=(), **values):
    """MINIMAL with `drop` keys removed and `values` set, each in its section."""
    out = with_values(**values)
    for section in out.values():
        for key in drop:
            section.pop(key, None)
    return out


def token_mode(root, drop=("auth_method",), **values):
    given = {"join_mode": "bootstrap-token", "api_server": "aks-edge-dns-12345678.hcp.westeurope.azmk8s.io"}
    if "bootstrap_token_file" not in values:
        given["bootstrap_token_file"] = node_file(root, "bootstrap-token", TOKEN + "\n")
    if "cluster_ca_file" not in values:
        given["cluster_ca_file"] = node_file(root, "cluster-ca.crt", CA_PEM, mode=0o644)
    given.update(values)
    return sections(drop=drop + tuple(k for k, v in given.items() if v is None),
                    **{k: v for k, v in given.items() if v is not None})


def pool_mode(**values):
    given = {"join_mode": "agent-pool", "agent_pool": "flexpool", "auth_method": "managed-identity"}
    given.update(values)
    return sections(drop=tuple(k for k, v in given.items() if v is None),
                    **{k: v for k, v in given.items() if v is not None})


def problems(root, given):
    with pytest.raises(ConfigError) as excinfo:
        load(root, given)
    return problems_of(excinfo), str(excinfo.value)


# ---------------------------------------------------------------------------- arc (default)


def test_arc_is_the_default_and_still_requires_auth_method_in_todays_words(root):
    found, _ = problems(root, sections(drop=("auth_method",)))
    assert list(found) == ["auth_method"]
    assert found["auth_method"].value == ""
    for method in ("service-principal", "azure-cli", "managed-identity"):  # the choices, named
        assert method in found["auth_method"].expected


def test_arc_without_auth_method_but_with_sp_keys_suggests_service_principal(root):
    found, _ = problems(root, sections(drop=("auth_method",), sp_client_id=SP_ID))
    assert list(found) == ["auth_method"]
    assert found["auth_method"].value == ""
    assert "sp_client_id" in found["auth_method"].expected  # the key that hints at service-principal


@pytest.mark.parametrize("key,value", [
    ("agent_pool", "flexpool"), ("api_server", "10.1.0.4:6443"),
    ("bootstrap_token_file", "/etc/aks-flex-node/bootstrap-token"),
    ("cluster_ca_file", "/etc/aks-flex-node/cluster-ca.crt"),
])
def test_arc_refuses_the_keys_of_the_other_modes(root, key, value):
    found, _ = problems(root, sections(**{key: value}))
    assert list(found) == [key]
    assert found[key].value == value
    assert "join_mode = arc" in found[key].expected


# ---------------------------------------------------------------------------- agent-pool


@pytest.mark.parametrize("method,extra", [
    ("managed-identity", {}),
    ("service-principal", {"sp_client_id": SP_ID}),
])
def test_agent_pool_with_the_nodes_own_credential(root, method, extra):
    if extra:
        extra["sp_client_secret_file"] = node_file(root, "sp-secret", "s3cr3t\n")
    cfg = load(root, pool_mode(auth_method=method, **extra))
    assert (cfg.join_mode, cfg.agent_pool, cfg.auth_method) == ("agent-pool", "flexpool", method)
    assert cfg.bootstrap_token() is None and cfg.cluster_ca() is None and cfg.api_server_url == ""


def test_agent_pool_refuses_the_azure_cli_login(root):
    found, text = problems(root, pool_mode(auth_method="azure-cli"))
    assert list(found) == ["auth_method"]
    assert found["auth_method"].value == "azure-cli"
    expected = found["auth_method"].expected
    assert "service-principal" in expected and "managed-identity" in expected
    assert "join_mode = agent-pool" in expected


def test_agent_pool_requires_a_credential_and_a_pool(root):
    found, _ = problems(root, pool_mode(auth_method=None, agent_pool=None))
    assert sorted(found) == ["agent_pool", "auth_method"]
    assert found["agent_pool"].value == "" and "join_mode = agent-pool" in found["agent_pool"].expected
    assert found["auth_method"].value == ""


@pytest.mark.parametrize("key,value", [("arc_location", "westeurope"), ("arc_resource_group", "edge"),
                                       ("arc_tags", "env=edge")])
def test_agent_pool_refuses_what_only_an_arc_machine_uses(root, key, value):
    found, _ = problems(root, pool_mode(**{key: value}))
    assert list(found) == [key]
    assert found[key].value == value
    assert "join_mode = agent-pool" in found[key].expected and "join_mode = arc" in found[key].expected


# The Machine name pattern of the AKS API (2026-05-02-preview managedClusters.json, the
# machineName parameter of Machines_Get / Machines_CreateOrUpdate).
PATTERN = "^[a-z][a-z0-9]{0,11}$|^[a-zA-Z0-9][-_a-zA-Z0-9]{0,39}$"


@pytest.mark.parametrize("name", ["flex-node-1", "edge01", "a", "x" * 40, "0edge"])
def test_agent_pool_takes_a_machine_name_the_pool_takes(root, name):
    assert load(root, pool_mode(machine_name=name)).machine_name == name


@pytest.mark.parametrize("name", ["edge.example.com", "x" * 41, "node.1"])
def test_agent_pool_refuses_a_machine_name_the_pool_does_not_take(root, name):
    """Valid as an Arc machine and a Node (arc mode takes them), not as a Machine of the pool."""
    assert load(root, sections(machine_name=name)).machine_name == name  # arc mode
    found, text = problems(root, pool_mode(machine_name=name))
    assert list(found) == ["machine_name"]
    assert found["machine_name"].value == name
    assert PATTERN in found["machine_name"].expected and "no '.'" in found["machine_name"].expected
    assert name in text and "machine_name" in text


def test_agent_pool_refuses_a_dotted_host_name_as_the_default_machine_name(tmp_path):
    root = make_root(tmp_path, "Edge-01.example.com")
    assert load(root, sections()).machine_name == "edge-01.example.com"  # arc mode takes it
    found, _ = problems(root, pool_mode())
    problem = found["machine_name"]
    assert problem.value == "edge-01.example.com (this host's name)"
    assert PATTERN in problem.expected
    assert "machine_name" in problem.expected and "[arc]" in problem.expected  # where to set it
    # ... and setting it is the way out
    assert load(root, pool_mode(machine_name="edge-01")).machine_name == "edge-01"


def test_agent_pool_takes_a_short_host_name_as_the_machine_name(tmp_path):
    root = make_root(tmp_path, "Edge-01")
    assert load(root, pool_mode()).machine_name == "edge-01"


def test_agent_pool_takes_the_bootstrap_token_keys_as_overrides(root):
    cfg = load(root, pool_mode(bootstrap_token_file=node_file(root, "bootstrap-token", TOKEN),
                               api_server="https://10.1.0.4:6443"))
    assert cfg.bootstrap_token() == TOKEN
    assert cfg.api_server_url == "https://10.1.0.4:6443"
    assert cfg.is_set("bootstrap_token_file") and cfg.is_set("api_server")
    assert not cfg.is_set("cluster_ca_file")


# ---------------------------------------------------------------------------- bootstrap-token


def test_bootstrap_token_needs_no_auth_method(root):
    cfg = load(root, token_mode(root))
    assert cfg.join_mode == "bootstrap-token" and cfg.auth_method == ""
    assert cfg.bootstrap_token() == TOKEN
    assert cfg.cluster_ca() == CA_PEM
    assert cfg.api_server_url == "https://aks-edge-dns-12345678.hcp.westeurope.azmk8s.io:443"


def test_bootstrap_token_requires_its_three_keys_all_at_once(root):
    found, _ = problems(root, token_mode(root, bootstrap_token_file=None, api_server=None, cluster_ca_file=None))
    assert sorted(found) == ["api_server", "bootstrap_token_file", "cluster_ca_file"]
    for key in found:
        assert found[key].value == ""
        assert "join_mode = bootstrap-token" in found[key].expected


def test_bootstrap_token_refuses_an_agent_pool(root):
    found, _ = problems(root, token_mode(root, agent_pool="flexpool"))
    assert list(found) == ["agent_pool"]
    assert found["agent_pool"].value == "flexpool"
    assert "join_mode = bootstrap-token" in found["agent_pool"].expected


def test_bootstrap_token_refuses_sp_keys_without_an_auth_method(root):
    found, _ = problems(root, token_mode(root, sp_client_id=SP_ID))
    assert list(found) == ["sp_client_id"]


@pytest.mark.parametrize("content", [
    "abcdef0123456789abcdef", "ABCDEF.0123456789ABCDEF", "abcdef.0123456789abcde", "abcdef.0123456789abcdef\nextra",
    "abcdef.0123456789abcdef0", b"abcdef.\xff123456789abcdef",
])
def test_a_token_file_that_holds_no_token_is_refused_without_showing_it(root, content):
    path = node_file(root, "bootstrap-token", content)
    found, text = problems(root, token_mode(root, bootstrap_token_file=path))
    assert list(found) == ["bootstrap_token_file"]
    assert found["bootstrap_token_file"].value == path
    assert "<6 chars>.<16 chars>" in found["bootstrap_token_file"].expected  # the form it must have
    assert TOKEN_SECRET[:10] not in text and "0123456789" not in text


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_token_file_others_can_read_is_refused(root, mode):
    path = node_file(root, "bootstrap-token", TOKEN, mode=mode)
    found, text = problems(root, token_mode(root, bootstrap_token_file=path))
    assert list(found) == ["bootstrap_token_file"]
    assert "chmod 600" in found["bootstrap_token_file"].expected
    assert TOKEN_SECRET not in text


def test_a_token_file_owned_by_another_user_is_refused(root):
    path = node_file(root, "bootstrap-token", TOKEN)
    os.chown(root / path.lstrip("/"), 1000, 1000)
    found, _ = problems(root, token_mode(root, bootstrap_token_file=path))
    assert "chown root:" in found["bootstrap_token_file"].expected


def test_a_token_file_that_is_missing_or_a_directory(root):
    found, _ = problems(root, token_mode(root, bootstrap_token_file="/etc/aks-flex-node/nothing"))
    problem = found["bootstrap_token_file"]
    assert problem.value == "/etc/aks-flex-node/nothing"
    assert str(root / "etc/aks-flex-node/nothing") in problem.expected  # where it was looked for
    (root / "etc/aks-flex-node/token-dir").mkdir()
    found, _ = problems(root, token_mode(root, bootstrap_token_file="/etc/aks-flex-node/token-dir"))
    problem = found["bootstrap_token_file"]
    assert problem.value == "/etc/aks-flex-node/token-dir" and "directory" in problem.expected


@pytest.mark.parametrize("content", ["not a certificate\n", "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
                                     "-----BEGIN CERTIFICATE-----\nMIIB\n"])
def test_a_cluster_ca_without_a_certificate_is_refused(root, content):
    path = node_file(root, "cluster-ca.crt", content, mode=0o644)
    found, _ = problems(root, token_mode(root, cluster_ca_file=path))
    assert list(found) == ["cluster_ca_file"]
    assert found["cluster_ca_file"].value == path and "CERTIFICATE" in found["cluster_ca_file"].expected


def test_a_real_cluster_ca_bundle_is_accepted(root):
    cafile = ssl.get_default_verify_paths().cafile
    if not cafile or not os.path.isfile(cafile):
        pytest.skip("no system CA bundle")
    with open(cafile, "rb") as f:
        pem = f.read()[:200_000]
    cfg = load(root, token_mode(root, cluster_ca_file=node_file(root, "ca.pem", pem, mode=0o644)))
    assert "BEGIN CERTIFICATE" in cfg.cluster_ca()


def test_a_cluster_ca_others_can_write_is_refused(root):
    path = node_file(root, "cluster-ca.crt", CA_PEM, mode=0o666)
    found, _ = problems(root, token_mode(root, cluster_ca_file=path))
    assert "chmod go-w" in found["cluster_ca_file"].expected


@pytest.mark.parametrize("value,url", [
    ("aks.example.com", "https://aks.example.com:443"),
    ("aks.example.com:6443", "https://aks.example.com:6443"),
    ("https://AKS.example.com", "https://aks.example.com:443"),
    ("https://aks.example.com:443/", "https://aks.example.com:443"),
    ("10.1.0.4", "https://10.1.0.4:443"),
    ("[fd00::4]:6443", "https://[fd00::4]:6443"),
])
def test_api_server_url_is_normalised(root, value, url):
    assert load(root, token_mode(root, api_server=value)).api_server_url == url


def test_a_token_file_changed_after_loading_is_a_config_error_that_hides_it(root):
    cfg = load(root, token_mode(root))
    (root / "etc/aks-flex-node/bootstrap-token").write_text("abcdef:" + TOKEN_SECRET)
    with pytest.raises(ConfigError) as excinfo:
        cfg.bootstrap_token()
    assert excinfo.value.problems[0].key == "bootstrap_token_file"
    assert TOKEN_SECRET not in str(excinfo.value)


def test_the_token_never_reaches_as_dict(root):
    cfg = load(root, token_mode(root))
    assert TOKEN_SECRET not in json.dumps(cfg.as_dict(redact=False))
    assert cfg.as_dict()["bootstrap_token_file"] == "/etc/aks-flex-node/bootstrap-token"


# ---------------------------------------------------------------------------- is_set


def test_is_set_counts_the_file_and_overrides_never_defaults(root):
    cfg = load(root, with_values(max_pods="110"), overrides={"node_ip": "10.0.0.5", "cluster_dns": None})
    assert cfg.is_set("tenant_id") and cfg.is_set("max_pods") and cfg.is_set("node_ip")
    assert not cfg.is_set("cluster_dns")  # the default, 10.0.0.10
    assert not cfg.is_set("arc_resource_group") and cfg.arc_resource_group == "aks-rg"  # derived
    assert not cfg.is_set("machine_name") and cfg.machine_name == "edge-node-01"  # the hostname
    assert not cfg.is_set("join_mode")
    with pytest.raises(KeyError):
        cfg.is_set("agent_pool_name")


def test_is_set_an_empty_value_is_unset(root):
    cfg = load(root, with_values(api_server="", kubernetes_version=""))
    assert not cfg.is_set("api_server") and not cfg.is_set("kubernetes_version")


def test_is_set_from_values(root):
    cfg = config.from_values({"tenant_id": MINIMAL["azure"]["tenant_id"], "auth_method": "azure-cli",
                              "cluster_resource_id": MINIMAL["cluster"]["cluster_resource_id"]}, root=str(root))
    assert cfg.is_set("auth_method") and not cfg.is_set("log_level")
