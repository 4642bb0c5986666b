"""registry_mirrors and registry_ca_file: the values taken and refused, and the hosts.toml
each registry gets (read back by a TOML parser: containerd ignores a hosts.toml it cannot
decode and pulls from the registry itself, core/remotes/docker/config/hosts.go loadHostDir)."""

import pytest

from aks_flex_node.config.checks import Invalid
from aks_flex_node.config.checks_registry import check_registry_mirrors, mirror_pairs
from aks_flex_node.errors import ConfigError
from aks_flex_node.steps.registry_mirrors import hosts_toml, toml_string, wanted_files
from tests.config_fixtures import load, make_root, only_problem, with_values

tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python 3.11 and later")

CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"
CA_NODE_PATH = "/etc/aks-flex-node/registry-ca.crt"


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def ca_file(root, content=CA_PEM, mode=0o644):
    path = root / CA_NODE_PATH.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(mode)
    return CA_NODE_PATH


# ---- the value -----------------------------------------------------------------------------


@pytest.mark.parametrize("value,typed", [
    ("", []),
    ("mcr.microsoft.com=https://registry.example:5000",
     ["mcr.microsoft.com=https://registry.example:5000"]),
    # blanks around items and '=', a trailing "/" dropped: containerd adds /v2 to the root
    (" mcr.microsoft.com = https://registry.example:5000/ , docker.io=https://10.0.0.5",
     ["mcr.microsoft.com=https://registry.example:5000", "docker.io=https://10.0.0.5"]),
    ("registry.example:5000=https://registry.example:5000", ["registry.example:5000=https://registry.example:5000"]),
    ("10.1.2.3:5000=https://[fd00::5]:5000", ["10.1.2.3:5000=https://[fd00::5]:5000"]),
    ("_default=https://mirror.example", ["_default=https://mirror.example"]),
])
def test_registry_mirrors_are_typed_as_registry_mirror_pairs(value, typed):
    assert check_registry_mirrors(value) == typed


@pytest.mark.parametrize("value", [
    "mcr.microsoft.com",  # no mirror
    "=https://mirror.example",  # no registry
    "mcr.microsoft.com/oss=https://mirror.example",  # a repository, not a registry host
    "../etc=https://mirror.example",  # would be a directory outside certs.d
    "..=https://mirror.example",
    "mcr.microsoft.com:99999=https://mirror.example",
    "[fd00::5]:5000=https://mirror.example",
    "mcr.microsoft.com=https://mirror.example?x=1",
    "mcr.microsoft.com=https://mirror.example#x",
    'mcr.microsoft.com=https://mirror.example/"',
    "mcr.microsoft.com=https://mirror.example\\",
    "mcr.microsoft.com=https://mirror .example",
    "mcr.microsoft.com=https://mirror.example\x7f",
    "mcr.microsoft.com=https://",
    "mcr.microsoft.com=https://mirror.example:0",
    "mcr.microsoft.com=https://mirror.example:",
    "mcr.microsoft.com=https://mirror_example",
    "mcr.microsoft.com=https://mirrör.example",
    "mcr.microsoft.com=ftp://mirror.example",
    "docker.io=https://a.example, docker.io=https://b.example",
])
def test_a_bad_registry_mirrors_value_is_refused_whole(value):
    with pytest.raises(Invalid) as excinfo:
        check_registry_mirrors(value)
    assert excinfo.value.value == value


def test_a_bad_value_names_the_key_and_the_value_and_the_config_is_not_loaded(root):
    value = "mcr.microsoft.com=http://registry.example:5000"
    problem = only_problem(root, with_values(registry_mirrors=value), "registry_mirrors")
    assert problem.value == value
    assert "registry_mirrors" in str(problem) and repr(value) in str(problem)


def test_registry_ca_file_is_checked_as_a_pem_file_of_certificates(root):
    ca_file(root, b"not a certificate\n")
    problem = only_problem(root, with_values(registry_mirrors="mcr.microsoft.com=https://registry.example",
                                             registry_ca_file=CA_NODE_PATH), "registry_ca_file")
    assert problem.value == CA_NODE_PATH and "CERTIFICATE" in problem.expected


def test_registry_ca_file_may_not_be_changed_by_others(root):
    ca_file(root, mode=0o666)
    problem = only_problem(root, with_values(registry_mirrors="mcr.microsoft.com=https://registry.example",
                                             registry_ca_file=CA_NODE_PATH), "registry_ca_file")
    assert problem.value == CA_NODE_PATH


def test_registry_ca_file_means_nothing_without_mirrors(root):
    ca_file(root)
    problem = only_problem(root, with_values(registry_ca_file=CA_NODE_PATH), "registry_ca_file")
    assert "registry_mirrors" in problem.expected


# ---- hosts.toml ------------------------------------------------------------------------------


def test_hosts_toml_names_the_mirror_as_the_only_server_with_its_ca():
    ca_path = "/etc/containerd/certs.d/mcr.microsoft.com/aks-flex-node-ca.crt"
    parsed = tomllib.loads(hosts_toml("https://registry.example:5000", ca_path).decode())
    # The server is the mirror (without one containerd falls back to the registry itself,
    # docs/hosts.md), and so is the one [host] (containerd 1.6 and 1.7 refuse a hosts.toml
    # without a [host] table, and then pull from the registry: the e2e scenario saw it).
    settings = {"capabilities": ["pull", "resolve"], "ca": ca_path}
    assert parsed == {"server": "https://registry.example:5000", **settings,
                      "host": {"https://registry.example:5000": settings}}


def test_hosts_toml_without_a_ca_leaves_the_system_roots():
    settings = {"capabilities": ["pull", "resolve"]}
    assert tomllib.loads(hosts_toml("https://registry.example").decode()) == {
        "server": "https://registry.example", **settings, "host": {"https://registry.example": settings}}


@pytest.mark.parametrize("text", [
    "", "plain", 'a "quoted" word', "back\\slash", "\\u0041 is not an escape here", "new\nline",
    "tab\tand\rreturn", "\x00\x01\x1f\x7f", "bell\b and feed\f", "émoji ✓ 𝄞", "'single'", '"""',
    "[host.\"https://x\"]\nskip_verify = true",
])
def test_a_toml_string_reads_back_as_the_same_text(text):
    assert tomllib.loads(f"value = {toml_string(text)}\n") == {"value": text}
    assert "\n" not in toml_string(text)  # one line, whatever the text


# ---- the files a configuration asks for ------------------------------------------------------


def test_each_registry_gets_its_ca_then_its_hosts_toml(root):
    cfg = load(root, with_values(
        registry_mirrors="mcr.microsoft.com=https://registry.example:5000, registry.example:5000=https://registry.example:5000",
        registry_ca_file=ca_file(root)))
    files = wanted_files(cfg)
    assert list(files) == [
        "/etc/containerd/certs.d/mcr.microsoft.com/aks-flex-node-ca.crt",
        "/etc/containerd/certs.d/mcr.microsoft.com/hosts.toml",
        "/etc/containerd/certs.d/registry.example:5000/aks-flex-node-ca.crt",
        "/etc/containerd/certs.d/registry.example:5000/hosts.toml",
    ]
    assert files["/etc/containerd/certs.d/mcr.microsoft.com/aks-flex-node-ca.crt"] == CA_PEM
    hosts = tomllib.loads(files["/etc/containerd/certs.d/registry.example:5000/hosts.toml"].decode())
    assert hosts["ca"] == "/etc/containerd/certs.d/registry.example:5000/aks-flex-node-ca.crt"
    assert mirror_pairs(cfg.registry_mirrors) == [("mcr.microsoft.com", "https://registry.example:5000"),
                                                  ("registry.example:5000", "https://registry.example:5000")]


def test_no_mirror_asks_for_no_file(root):
    assert wanted_files(load(root, with_values())) == {}


def test_a_ca_file_spoiled_after_the_config_was_loaded_is_refused_when_read(root):
    cfg = load(root, with_values(registry_mirrors="mcr.microsoft.com=https://registry.example",
                                 registry_ca_file=ca_file(root)))
    (root / CA_NODE_PATH.lstrip("/")).write_bytes(b"garbage\n")
    with pytest.raises(ConfigError) as excinfo:
        wanted_files(cfg)
    assert [p.key for p in excinfo.value.problems] == ["registry_ca_file"]
