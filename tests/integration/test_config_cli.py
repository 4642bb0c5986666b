"""Configuration through the CLI: every bad value fails before anything changes (exit 2),
all problems at once; the upstream agent's config.json works directly and by import."""

import json
import os

import pytest

from tests.emulator import constants as C
from tests.harness import CONFIG_PATH, SECRET_PATH

BAD_VALUES = [
    ("subscription_id", "not-a-guid", "subscription_id"),
    ("cluster_resource_id", "/subscriptions/x/resourceGroups/y", "cluster_resource_id"),
    ("machine_name", "Bad_Name!", "machine_name"),
    ("max_pods", "9000", "max_pods"),
    ("auth_method", "password", "auth_method"),
    ("role_preset", "everything", "role_preset"),
    ("role_preset", "minimal", "join_mode = agent-pool"),
    ("join_mode", "flex", "join_mode"),
    ("agent_pool", "flexpool", "join_mode = arc"),
    ("api_server", "http://aks.example.com", "api_server"),
    ("kubernetes_version", "latest", "kubernetes_version"),
    ("node_taints", "dedicated=edge:Sometimes", "node_taints"),
    ("node_ip", "300.1.1.1", "node_ip"),
    ("https_proxy", "ftp://proxy", "https_proxy"),
]


def set_value(node, key, value):
    path = node.path(CONFIG_PATH)
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if not line.startswith(f"{key} =")]
    section = next(i for i, line in enumerate(lines) if line.startswith("["))
    lines.insert(section + 1, f"{key} = {value}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("key,value,named", BAD_VALUES, ids=[f"{b[0]}={b[1]}" for b in BAD_VALUES])
def test_a_bad_value_is_named_and_nothing_changes(node, key, value, named):
    from aks_flex_node import config

    # Put the key in its own section, as an operator would.
    path = node.path(CONFIG_PATH)
    with open(path) as f:
        text = f.read()
    text = "\n".join(l for l in text.splitlines() if not l.startswith(f"{key} ="))
    section = config.section_of(key)
    text = text.replace(f"[{section}]\n", f"[{section}]\n{key} = {value}\n") if f"[{section}]" in text \
        else text + f"\n[{section}]\n{key} = {value}\n"
    with open(path, "w") as f:
        f.write(text)
    before = node.files()
    proc = node.cli("bootstrap")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr and value.split(":")[0] in proc.stderr
    assert "expected" in proc.stderr
    assert node.files() == before
    assert node.emu.state()["machines"] == []


def test_all_problems_are_reported_at_once(node):
    set_value(node, "max_pods", "0")
    set_value(node, "tenant_id", "nope")
    proc, doc = node.cli_json("config", "validate")
    assert proc.returncode == 2
    keys = {p["key"] for p in doc["problems"]}
    assert {"max_pods", "tenant_id"} <= keys
    assert all(p["expected"] for p in doc["problems"])


def test_a_world_readable_secret_file_is_refused(node):
    os.chmod(node.path(SECRET_PATH), 0o644)
    proc = node.cli("bootstrap")
    assert proc.returncode == 2
    assert "sp_client_secret_file" in proc.stderr and "0644" in proc.stderr or "mode" in proc.stderr


def test_config_show_redacts_and_validate_passes(node):
    proc = node.cli("config", "validate")
    assert proc.returncode == 0, proc.stderr
    proc, shown = node.cli_json("config", "show")
    assert proc.returncode == 0
    assert shown["cluster_resource_id"] == C.CLUSTER_ID
    assert shown["sp_client_secret_file"] == SECRET_PATH
    assert C.SP_CLIENT_SECRET not in proc.stdout
    proc = node.cli("config", "show")  # the INI form people read
    assert proc.returncode == 0, proc.stderr
    assert f"cluster_resource_id = {C.CLUSTER_ID}" in proc.stdout
    assert C.SP_CLIENT_SECRET not in proc.stdout


def upstream_doc(node):
    return {
        "azure": {
            "subscriptionId": C.SUBSCRIPTION_ID, "tenantId": C.TENANT_ID,
            "servicePrincipal": {"tenantId": C.TENANT_ID, "clientId": C.SP_CLIENT_ID,
                                 "clientSecret": C.SP_CLIENT_SECRET},
            "arc": {"enabled": True, "machineName": "flex-node-1", "tags": {"env": "test"}},
            "targetCluster": {"resourceId": C.CLUSTER_ID, "location": C.LOCATION},
        },
        "kubernetes": {"version": "1.30.4"},
        "node": {"maxPods": 50, "labels": {"team": "edge"}},
        "agent": {"logLevel": "debug"},
    }


def test_config_import_writes_ini_and_a_private_secret(node, tmp_path):
    source = tmp_path / "config.json"
    source.write_text(json.dumps(upstream_doc(node)))
    os.remove(node.path(CONFIG_PATH))
    proc = node.cli("config", "import", str(source))
    assert proc.returncode == 0, proc.stderr
    assert node.mode(CONFIG_PATH) == 0o600
    text = node.read(CONFIG_PATH).decode()
    assert "max_pods = 50" in text and C.SP_CLIENT_SECRET not in text
    secret_file = "/etc/aks-flex-node/sp-client-secret"
    assert node.mode(secret_file) == 0o600
    assert node.read(secret_file).decode().strip() == C.SP_CLIENT_SECRET


def test_upstream_config_json_is_accepted_directly(node, tmp_path):
    doc = upstream_doc(node)
    source = node.path("/etc/aks-flex-node/config.json")  # --config paths are node paths
    with open(source, "w") as f:
        json.dump(doc, f)
    os.chmod(source, 0o600)
    proc, shown = node.cli_json("config", "show", "--config", "/etc/aks-flex-node/config.json")
    assert proc.returncode == 0, proc.stderr
    assert shown["max_pods"] == 50 and shown["auth_method"] == "service-principal"
    assert C.SP_CLIENT_SECRET not in proc.stdout
