"""Migrations of earlier releases' layouts (steps/migrations.py), each from a ledger as the
older release wrote it (the JSON literals below: the keys and values its code recorded, read
from git history), run once at the start of a run (engine/migration.py), before any check.

- OLDEST: before the artifact record (b08481d): each installed file recorded with
  `artifact`, `artifact_url` and `sha256`; the Kubernetes binaries as files in /usr/local/bin.
- SINGLE_VERSION: with the artifact record (e072788), before the versioned directories
  (0696dce): the `kubernetes` record lists /usr/local/bin/{kubelet,kubectl,kubeadm}.
"""

import hashlib
import json
import os

import pytest

from aks_flex_node.engine import migration as mg
from aks_flex_node.engine.context import Context
from aks_flex_node.engine.ledger import Ledger
from aks_flex_node.engine.runner import BLOCKED, Runner
from aks_flex_node.engine.step import Plan, Step
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import Host
from aks_flex_node.paths import LEDGER
from aks_flex_node.steps import workflow
from aks_flex_node.steps.artifacts import node_arch
from aks_flex_node.steps.context import JoinContext, JoinOptions
from aks_flex_node.steps.kubernetes import CniPluginsStep, KubernetesBinariesStep
from aks_flex_node.steps.migrations import bootstrap_migrations
from aks_flex_node.steps.runtime import RuncStep
from tests.config_fixtures import load, make_root, with_values

KUBE, RUNC, CNI = "1.30.4", "1.1.12", "1.4.0"
ARCH = node_arch()
KUBE_URL = f"https://dl.k8s.io/v{KUBE}/kubernetes-node-linux-{ARCH}.tar.gz"
RUNC_URL = f"https://github.com/opencontainers/runc/releases/download/v{RUNC}/runc.{ARCH}"
CNI_URL = f"https://github.com/containernetworking/plugins/releases/download/v{CNI}/cni-plugins-linux-{ARCH}-v{CNI}.tgz"
TOOLS = ("kubelet", "kubectl", "kubeadm")
CONTENT = {f"/usr/local/bin/{t}": f"#!/bin/sh\necho {t} v{KUBE}\n".encode() for t in TOOLS}
CONTENT["/usr/local/bin/runc"] = b"runc " + RUNC.encode()
CONTENT["/opt/cni/bin/bridge"] = b"bridge " + CNI.encode()
CONTENT["/opt/cni/bin/portmap"] = b"portmap " + CNI.encode()


def sha(path):
    return hashlib.sha256(CONTENT[path]).hexdigest()


def file_entry(step, artifact, url, path):
    return {"artifact": artifact, "artifact_url": url, "id": path, "kind": "file",
            "sha256": sha(path), "step": step}


JOINED = {"arc_resource_group": "aks-rg", "cluster_resource_id": "/subscriptions/s/x",
          "machine_name": "edge-node-01", "subscription_id": "s",
          "facts": {"kubernetes_version": KUBE, "arc_location": "westeurope"}}

OLDEST = {
    "version": 1, "joined": JOINED, "owed": [],
    "entries": [
        {"id": "/usr/local/bin", "kind": "parent_dir", "step": "runc"},
        file_entry("runc", "runc", RUNC_URL, "/usr/local/bin/runc"),
        *[file_entry("kubernetes", "kubernetes", KUBE_URL, f"/usr/local/bin/{t}") for t in TOOLS],
        {"id": "/opt/cni", "kind": "parent_dir", "step": "cni"},
        {"id": "/opt/cni/bin", "kind": "parent_dir", "step": "cni"},
        file_entry("cni", "cni", CNI_URL, "/opt/cni/bin/bridge"),
        file_entry("cni", "cni", CNI_URL, "/opt/cni/bin/portmap"),
        {"id": "kubelet", "kind": "unit", "step": "services"},
    ]}

SINGLE_VERSION = {
    "version": 1, "joined": JOINED, "owed": [],
    "entries": [
        {"id": "runc", "kind": "artifact", "members": ["/usr/local/bin/runc"], "step": "runc", "url": RUNC_URL},
        file_entry("runc", "runc", RUNC_URL, "/usr/local/bin/runc"),
        {"id": "kubernetes", "kind": "artifact", "members": [f"/usr/local/bin/{t}" for t in TOOLS],
         "step": "kubernetes", "url": KUBE_URL},
        *[file_entry("kubernetes", "kubernetes", KUBE_URL, f"/usr/local/bin/{t}") for t in TOOLS],
    ]}


@pytest.fixture
def node(tmp_path):
    root = make_root(tmp_path)
    cfg = load(root, with_values(runc_version=RUNC, cni_version=CNI))
    host = Host(str(root))
    for path, data in CONTENT.items():
        host.write_file(path, data, 0o755)
    return cfg, host


def put_ledger(host, data):
    host.ensure_dir("/var/lib/aks-flex-node", 0o700)
    host.write_file(LEDGER, json.dumps(data, indent=2, sort_keys=True).encode(), 0o600)


def context(cfg, host, dry_run=False):
    return JoinContext(cfg, host, Ledger(host), options=JoinOptions(dry_run=dry_run))


def migrate(cfg, host, dry_run=False):
    ctx = context(cfg, host, dry_run)
    steps = workflow.bootstrap_steps(ctx.mode)
    return ctx, Runner([], ctx, dry_run=dry_run, migrations=bootstrap_migrations(steps)).run()


def entries(host):
    return {(e["kind"], e["id"]): e for e in json.loads(host.read_bytes(LEDGER))["entries"]}


def check(step, ctx):
    ctx.data.kubernetes_version = KUBE
    return step.check(ctx)


def test_the_oldest_layout_gets_its_artifact_records_and_its_installs_stand(node):
    cfg, host = node
    put_ledger(host, {**OLDEST, "entries": [e for e in OLDEST["entries"] if e["step"] != "kubernetes"]})
    ctx, result = migrate(cfg, host)
    assert [(m.name, m.status) for m in result.migrations] == [("artifact-records", mg.MIGRATED)]
    after = entries(host)
    assert after["artifact", "runc"] == {"id": "runc", "kind": "artifact", "step": "runc", "url": RUNC_URL,
                                         "members": ["/usr/local/bin/runc"]}
    assert after["artifact", "cni"]["members"] == ["/opt/cni/bin/bridge", "/opt/cni/bin/portmap"]
    # The steps read today's layout: installed and intact, nothing to download or restart.
    for step in (RuncStep(), CniPluginsStep()):
        plan = check(step, context(cfg, host))
        assert not plan.actions and "installed and intact" in plan.noop_reason
    # Once: a second run finds nothing to migrate.
    assert migrate(cfg, host)[1].migrations == []


def test_the_oldest_kubernetes_install_goes_through_both_migrations(node):
    cfg, host = node
    put_ledger(host, OLDEST)
    _ctx, result = migrate(cfg, host)
    assert [(m.name, m.status) for m in result.migrations] == [
        ("artifact-records", mg.MIGRATED), ("kubernetes-versioned-layout", mg.MIGRATED)]
    assert_moved(cfg, host)


def test_the_single_version_layout_is_moved_into_the_versioned_directories(node):
    cfg, host = node
    put_ledger(host, SINGLE_VERSION)
    _ctx, result = migrate(cfg, host)
    assert [(m.name, m.status) for m in result.migrations] == [("kubernetes-versioned-layout", mg.MIGRATED)]
    assert "move kubernetes 1.30.4" in result.migrations[0].what
    assert_moved(cfg, host)
    assert migrate(cfg, host)[1].migrations == []


def assert_moved(cfg, host):
    directory = f"/usr/local/lib/aks-flex-node/kubernetes/v{KUBE}"
    after = entries(host)
    assert ("artifact", "kubernetes") not in after
    assert after["artifact", f"kubernetes/v{KUBE}"]["members"] == [f"{directory}/{t}" for t in TOOLS]
    assert os.readlink(host.path("/usr/local/lib/aks-flex-node/kubernetes/current")) == f"v{KUBE}"
    for tool in TOOLS:
        assert host.read_bytes(f"{directory}/{tool}") == CONTENT[f"/usr/local/bin/{tool}"]
        assert os.readlink(host.path(f"/usr/local/bin/{tool}")) == f"../lib/aks-flex-node/kubernetes/current/{tool}"
        assert after["file", f"/usr/local/bin/{tool}"]["link"].endswith(f"current/{tool}")
        assert after["file", f"{directory}/{tool}"]["fingerprint"]
    # The kubernetes phase finds its version installed, intact and active: no download,
    # no restart owed.
    plan = check(KubernetesBinariesStep(), context(cfg, host))
    assert not plan.actions, [a.what for a in plan.actions]


def test_a_changed_single_version_install_is_not_moved_its_record_is_forgotten(node):
    cfg, host = node
    put_ledger(host, SINGLE_VERSION)
    host.write_file("/usr/local/bin/kubelet", b"someone else's kubelet", 0o755)
    _ctx, result = migrate(cfg, host)
    assert "forget the record" in result.migrations[0].what
    after = entries(host)
    assert ("artifact", "kubernetes") not in after and ("file", "/usr/local/bin/kubelet") in after
    assert not os.path.lexists(host.path("/usr/local/lib/aks-flex-node"))
    # The kubernetes phase installs the wanted version as on a new node.
    whats = [a.what for a in check(KubernetesBinariesStep(), context(cfg, host)).actions]
    assert whats[0] == f"install kubernetes {KUBE} into /usr/local/lib/aks-flex-node/kubernetes/v{KUBE}"


def test_a_url_the_configuration_no_longer_builds_is_not_moved(node, tmp_path):
    _cfg, host = node
    cfg = load(make_root(tmp_path / "other"), with_values(
        runc_version=RUNC, kubernetes_url="https://mirror.example/k8s/{version}/node-{arch}.tgz"))
    put_ledger(host, SINGLE_VERSION)
    _ctx, result = migrate(cfg, host)
    assert result.ok and "forget the record" in result.migrations[0].what
    assert not os.path.lexists(host.path("/usr/local/lib/aks-flex-node"))


def test_a_dry_run_writes_nothing_and_plans_from_the_migrated_ledger(node):
    cfg, host = node
    put_ledger(host, OLDEST)
    before = host.read_bytes(LEDGER)
    ctx, result = migrate(cfg, host, dry_run=True)
    assert [(m.name, m.status) for m in result.migrations] == [
        ("artifact-records", mg.PENDING), ("kubernetes-versioned-layout", mg.PENDING)]
    assert host.read_bytes(LEDGER) == before
    assert not os.path.lexists(host.path("/usr/local/lib/aks-flex-node"))
    # The ledger-only migration was applied in memory, for the dry run's checks.
    assert not check(RuncStep(), ctx).actions
    assert ctx.ledger.is_detached and host.read_bytes(LEDGER) == before


def test_migrations_run_before_any_check_and_a_failed_one_blocks_every_phase(tmp_path):
    host = Host(str(tmp_path))
    seen = []

    class Note(mg.Migration):
        name = "note"

        def pending(self, ctx):
            return None if seen else "note it"

        def apply(self, ctx):
            seen.append("migrated")

    class Breaks(mg.Migration):
        name = "breaks"

        def pending(self, ctx):
            return "break"

        def apply(self, ctx):
            raise FlexNodeError("cannot")

    class Reads(Step):
        name = "reads"

        def check(self, ctx):
            seen.append("checked")
            return Plan()

    result = Runner([Reads()], Context(None, host, Ledger(host)), migrations=[Note()]).run()
    assert result.ok and seen == ["migrated", "checked"]
    result = Runner([Reads()], Context(None, host, Ledger(host)), migrations=[Note(), Breaks()]).run()
    assert not result.ok and result.error.message == "cannot"
    assert [(p.name, p.status, p.message) for p in result.phases] == [
        ("reads", BLOCKED, "not run: migration breaks failed")]
    assert seen == ["migrated", "checked"]
    assert result.migrations[0].to_dict() == {"name": "breaks", "status": mg.FAILED, "what": "break",
                                              "error": "cannot"}
