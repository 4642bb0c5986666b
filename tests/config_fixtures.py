"""Config files for tests: the minimal answers, a root with a hostname, a configuration
written and loaded (config.load), its problems by key. Shared by the tests of config/ and of
the commands that read it."""

from aks_flex_node import config

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
SUB = "11111111-2222-3333-4444-555555555555"
OTHER_SUB = "66666666-7777-8888-9999-000000000000"
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
