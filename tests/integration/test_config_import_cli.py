"""`aks-flex-node config import` run as an operator runs it: a bad config.json or flag
exits 2 with a message naming the file or flag, and leaves the node as it was."""

import json
import os
import subprocess
import sys

import pytest

from aks_flex_node import paths
from tests.harness import REPO
from tests.config_fixtures import make_root
from tests.upstream_fixtures import SECRET, document


def run(root, *args):
    return subprocess.run([sys.executable, "-m", "aks_flex_node", "config", "import", *args, "--root", str(root)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)


def files(root):
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = (f.read(), os.stat(path).st_mode)
    return out


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path, "import-host")


def config_json(tmp_path, **changes):
    doc = document("upstream-readme-sp.json")
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = doc
        for part in parents:
            node = node[part]
        node[last] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_good_import_prints_its_warnings_and_what_it_wrote(root, tmp_path):
    proc = run(root, str(config_json(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "warning: agent.logDir: ignored" in proc.stderr
    assert proc.stdout.strip() == f"wrote {paths.CONFIG} and {paths.SECRET} (0600)"
    assert (root / paths.SECRET.lstrip("/")).read_text() == SECRET + "\n"


def test_a_bad_tenant_over_a_good_config_exits_2_and_changes_nothing(root, tmp_path):
    """The defect: exit 2, but aks-flex-node.conf had tenant_id = nope and the secret was
    overwritten."""
    assert run(root, str(config_json(tmp_path))).returncode == 0
    before = files(root)
    proc = run(root, str(config_json(tmp_path, azure__tenantId="nope",
                                     azure__servicePrincipal__clientSecret="another-secret")))
    assert proc.returncode == 2, proc.stderr
    assert "tenant_id = 'nope'" in proc.stderr
    assert "warning: agent.logDir: ignored" in proc.stderr  # warnings even on failure
    assert files(root) == before


def test_a_newline_in_the_machine_name_leaves_no_secret_behind(root, tmp_path):
    proc = run(root, str(config_json(tmp_path, azure__arc__machineName="edge\nnode")))
    assert proc.returncode == 2, proc.stderr
    assert "machine_name" in proc.stderr and "a value on a single line" in proc.stderr
    assert not (root / "etc/aks-flex-node").exists()


@pytest.mark.parametrize("args,named", [
    (["{missing}"], "config file = '{missing}': expected a readable file (No such file or directory)"),
    (["{good}", "--secret-file", "sp-secret"], "--secret-file = 'sp-secret': expected an absolute path"),
    (["{good}", "--output", "/nowhere/aks.conf"], "--output = '/nowhere/aks.conf': expected a file in an "
                                                  "existing directory"),
], ids=["missing-input", "relative-secret-file", "output-in-a-missing-dir"])
def test_a_bad_input_or_flag_is_named_not_an_internal_error(root, tmp_path, args, named):
    where = {"missing": str(tmp_path / "nope.json"), "good": str(config_json(tmp_path))}
    proc = run(root, *[a.format(**where) for a in args])
    assert proc.returncode == 2, proc.stderr
    assert named.format(**where) in proc.stderr
    assert "internal error" not in proc.stderr
    assert not (root / "etc/aks-flex-node").exists()


# ---------------------------------------------------------------------------- join modes

TOKEN_SECRET = "0123456789abcdef"


def mode_json(tmp_path, name, **changes):
    doc = document(name)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = doc
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    return path


def test_a_bootstrap_token_import_writes_the_token_and_ca_apart(root, tmp_path):
    proc = run(root, str(mode_json(tmp_path, "upstream-v0010-bootstrap-token.json")))
    assert proc.returncode == 0, proc.stderr
    assert TOKEN_SECRET not in proc.stdout + proc.stderr
    conf = (root / paths.CONFIG.lstrip("/")).read_text()
    assert "join_mode = bootstrap-token" in conf and TOKEN_SECRET not in conf
    assert (root / "etc/aks-flex-node/bootstrap-token").stat().st_mode & 0o777 == 0o600
    validate = subprocess.run([sys.executable, "-m", "aks_flex_node", "config", "show", "--json", "--root", str(root)],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
    assert validate.returncode == 0, validate.stderr
    shown = json.loads(validate.stdout)
    assert shown["join_mode"] == "bootstrap-token" and TOKEN_SECRET not in validate.stdout


@pytest.mark.parametrize("name,changes,named", [
    ("upstream-v0010-bootstrap-token.json", {"azure__bootstrapToken__token": "abcdef:0123456789abcdef"},
     "azure.bootstrapToken.token = '***': expected a Kubernetes bootstrap token"),
    ("upstream-v0010-bootstrap-token.json", {"node__kubelet__caCertData": "bm90IGEgY2VydA=="},
     "node.kubelet.caCertData"),
    ("upstream-v0010-bootstrap-token.json", {"node__kubelet__serverURL": "http://aks.example.com"},
     "api_server = 'http://aks.example.com'"),
    ("upstream-agent-pool-mi.json", {"azure__targetAgentPoolName": "flex_pool"}, "agent_pool = 'flex_pool'"),
    ("upstream-agent-pool-sp.json", {"azure__targetAgentPoolName": "Flex"}, "agent_pool = 'Flex'"),
], ids=["token-malformed", "ca-not-pem", "server-http", "pool-underscore", "pool-with-sp-secret-uppercase"])
def test_a_bad_join_mode_value_exits_2_and_writes_nothing(root, tmp_path, name, changes, named):
    """Over a good import: nothing changes, no token, CA or secret file is (re)written."""
    assert run(root, str(mode_json(tmp_path, "upstream-v0010-bootstrap-token.json"))).returncode == 0
    before = files(root)
    proc = run(root, str(mode_json(tmp_path, name, **changes)))
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr
    assert TOKEN_SECRET not in proc.stdout + proc.stderr and "internal error" not in proc.stderr
    assert files(root) == before


def test_a_bad_agent_pool_import_on_a_fresh_node_creates_nothing(root, tmp_path):
    proc = run(root, str(mode_json(tmp_path, "upstream-agent-pool-sp.json", azure__targetAgentPoolName="1pool")))
    assert proc.returncode == 2, proc.stderr
    assert "agent_pool = '1pool'" in proc.stderr
    assert not (root / "etc/aks-flex-node").exists()
