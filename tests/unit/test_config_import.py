"""`config import` as a library call (aks_flex_node.config.importer): every bad input is a
ConfigError naming the file or flag, and nothing is written unless everything is right."""

import json
import os
import stat
import subprocess

import pytest

from aks_flex_node import config, paths
from aks_flex_node.config import importer
from aks_flex_node.errors import ConfigError
from tests.config_fixtures import make_root
from tests.upstream_fixtures import SECRET, document

CONF = paths.CONFIG
SECRET_NODE = paths.SECRET


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path, "import-host")


def upstream(tmp_path, change=None, name="upstream-readme-sp.json"):
    doc = document(name)
    if change:
        change(doc)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


def state(root):
    """Every file under the root with its content and mode."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = (f.read(), stat.S_IMODE(os.stat(path).st_mode))
    return out


def good_import(root, tmp_path):
    return importer.import_upstream(upstream(tmp_path), root=str(root))


def test_an_import_writes_both_files_0600_and_they_load(root, tmp_path):
    done = good_import(root, tmp_path)
    assert done.secret_file == SECRET_NODE
    for node_path in (CONF, SECRET_NODE):
        st = os.stat(root / node_path.lstrip("/"))
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, os.geteuid())
    cfg = config.load(root=str(root))
    assert cfg.client_secret() == SECRET and cfg.machine_name == "edge-node-02"
    assert SECRET not in (root / CONF.lstrip("/")).read_text()


def set_path(doc, dotted, value):
    *parents, last = dotted.split(".")
    node = doc
    for part in parents:
        node = node[part]
    node[last] = value


@pytest.mark.parametrize("dotted,value,key", [
    ("azure.tenantId", "nope", "tenant_id"),
    ("azure.arc.machineName", "edge\nnode", "machine_name"),
    ("azure.arc.location", "x" * 100000, "arc_location"),
], ids=["tenant", "machine-name-newline", "location-100k"])
def test_a_bad_value_over_a_good_config_changes_nothing(root, tmp_path, dotted, value, key):
    """The defect: the secret and the config were written before the check (exit 2, but
    a config with tenant_id = nope, or a secret without its config, was left)."""
    good_import(root, tmp_path)
    before = state(root)
    bad = upstream(tmp_path, lambda doc: set_path(doc, dotted, value))
    (tmp_path / "new-secret").unlink(missing_ok=True)
    with pytest.raises(ConfigError) as excinfo:
        importer.import_upstream(bad, root=str(root), secret_file="/etc/aks-flex-node/new-secret")
    assert key in {p.key for p in excinfo.value.problems}, str(excinfo.value)
    assert state(root) == before


def test_a_bad_value_on_a_fresh_node_writes_neither_file(root, tmp_path):
    bad = upstream(tmp_path, lambda doc: set_path(doc, "azure.tenantId", "nope"))
    with pytest.raises(ConfigError):
        importer.import_upstream(bad, root=str(root))
    assert not (root / "etc/aks-flex-node").exists()


def test_warnings_are_given_as_soon_as_known_even_when_the_import_fails(root, tmp_path):
    bad = upstream(tmp_path, lambda doc: set_path(doc, "azure.tenantId", "nope"))
    heard = []
    with pytest.raises(ConfigError):
        importer.import_upstream(bad, root=str(root), warn=heard.append)
    assert any(w.startswith("agent.logDir: ignored") for w in heard)
    assert any(w.startswith("azure.servicePrincipal.tenantId: absent") for w in heard)


@pytest.mark.parametrize("kwargs,key,expected", [
    ({"secret_file": "sp-secret"}, "--secret-file", "an absolute path on the node"),
    ({"secret_file": "/etc/aks-flex-node/\0"}, "--secret-file", "an absolute path on the node"),
    ({"secret_file": "/nowhere/sp-secret"}, "--secret-file", "a file in an existing directory"),
    ({"secret_file": "/etc"}, "--secret-file", "a file, not a directory"),
    ({"secret_file": CONF}, "--secret-file", "another file than the configuration file"),
    ({"output": "/nowhere/aks.conf"}, "--output", "a file in an existing directory"),
    ({"output": "/etc"}, "--output", "a file, not a directory"),
])
def test_bad_flags_are_named_and_nothing_is_written(root, tmp_path, kwargs, key, expected):
    before = state(root)
    with pytest.raises(ConfigError) as excinfo:
        importer.import_upstream(upstream(tmp_path), root=str(root), **kwargs)
    assert excinfo.value.exit_code == 2
    problem = next(p for p in excinfo.value.problems if p.key == key)
    assert expected in problem.expected
    assert state(root) == before


@pytest.mark.parametrize("content,expected", [
    (None, "a readable file (No such file or directory)"),
    ("dir", "a readable file (Is a directory)"),
    (b"\xff\xfe{}", "UTF-8 JSON"),
    (b"[1, 2]", "a JSON object"),
    (b"[" * 100000, "JSON nested a few levels deep"),
    (b" " * ((1 << 20) + 1), "at most 1048576 bytes"),
])
def test_an_input_that_is_not_a_config_json_names_the_file(root, tmp_path, content, expected):
    path = tmp_path / "config.json"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as excinfo:
        importer.import_upstream(path, root=str(root))
    assert expected in str(excinfo.value)
    assert str(path) in str(excinfo.value)
    assert not (root / "etc/aks-flex-node").exists()


def test_a_multi_line_secret_is_refused_and_not_shown(root, tmp_path):
    bad = upstream(tmp_path, lambda doc: set_path(doc, "azure.servicePrincipal.clientSecret", "abc\ndef"))
    with pytest.raises(ConfigError) as excinfo:
        importer.import_upstream(bad, root=str(root))
    assert "abc" not in str(excinfo.value) and "a secret on one line" in str(excinfo.value)
    assert not (root / "etc/aks-flex-node").exists()


def test_an_existing_certificate_conflicting_with_the_imported_secret_is_caught_first(root, tmp_path):
    """The import merges into the existing file: the merged text is what is checked."""
    good_import(root, tmp_path)
    pem = root / "etc/aks-flex-node/sp.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
                   "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    pem.chmod(0o600)
    config.write(None, {"sp_certificate_file": "/etc/aks-flex-node/sp.pem"}, root=str(root))
    before = state(root)
    with pytest.raises(ConfigError) as excinfo:
        importer.import_upstream(upstream(tmp_path), root=str(root))
    assert "only one of sp_client_secret_file and sp_certificate_file" in str(excinfo.value)
    assert state(root) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_a_failed_write_puts_the_secret_back(root, tmp_path):
    """The secret is written first; when the configuration cannot be written after it
    (here: a read-only filesystem), the old secret comes back."""
    good_import(root, tmp_path)
    secret = root / SECRET_NODE.lstrip("/")
    readonly = root / "ro"
    readonly.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,mode=0755", "tmpfs", str(readonly)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        secret.write_text("the old secret\n")
        secret.chmod(0o600)
        before = state(root)
        with pytest.raises(Exception):
            importer.import_upstream(upstream(tmp_path), output="/ro/aks.conf", root=str(root))
        assert state(root) == before
        assert secret.read_text() == "the old secret\n"
    finally:
        subprocess.run(["umount", str(readonly)], check=True)
