"""Config files for tests: the minimal answers, a root with a hostname, a configuration
written and loaded (config.load), its problems by key (or the one problem it must have), a
service-principal configuration with its secret file. Shared by the tests of config/ and of
the commands that read it."""

import pytest

from aks_flex_node import config
from aks_flex_node.errors import ConfigError

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
SUB = "11111111-2222-3333-4444-555555555555"
OTHER_SUB = "66666666-7777-8888-9999-000000000000"
SP_ID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
CLUSTER_ID = f"/subscriptions/{SUB}/resourceGroups/aks-rg/providers/Microsoft.ContainerService/managedClusters/aks-edge"
MINIMAL = {
    "azure": {"tenant_id": TENANT},
    "auth": {"auth_method": "azure-cli"},
    "cluster": {"cluster_resource_id": CLUSTER_ID},
}


def make_root(tmp_path, hostname="edge-node-01"):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/hostname").write_text(hostname + "\n")
    return root


def conf_text(sections):
    lines = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def with_values(**extra):
    """MINIMAL plus key = value pairs, each put in its own section."""
    sections = {name: dict(values) for name, values in MINIMAL.items()}
    for key, value in extra.items():
        sections.setdefault(config.section_of(key), {})[key] = value
    return sections


def write_conf(root, sections_or_text):
    path = root / "etc/aks-flex-node/aks-flex-node.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = sections_or_text if isinstance(sections_or_text, str) else conf_text(sections_or_text)
    path.write_text(text)
    return path


def load(root, sections_or_text, **kwargs):
    write_conf(root, sections_or_text)
    return config.load(root=str(root), **kwargs)


def problems_of(excinfo):
    return {p.key: p for p in excinfo.value.problems}


def only_problem(root, sections, key):
    """Loading `sections` fails with exactly one problem, about `key`; that problem."""
    with pytest.raises(ConfigError) as excinfo:
        load(root, sections)
    problems = excinfo.value.problems
    assert [p.key for p in problems] == [key], [str(p) for p in problems]
    return problems[0]


def secret_file(root, content="s3cr3t\n", mode=0o600, name="sp-secret"):
    """A client secret file under the root's /etc/aks-flex-node; its node path."""
    path = root / "etc/aks-flex-node" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    path.chmod(mode)
    return "/etc/aks-flex-node/" + name


def sp(**extra):
    """MINIMAL as a service principal (SP_ID) plus key = value pairs."""
    return with_values(auth_method="service-principal", sp_client_id=SP_ID, **extra)
