"""What a bootstrap killed half-way through installing an artifact leaves, and how the next
run and unbootstrap deal with it (the fault matrix's "kill -9: kubernetes (middle)", "cni
(middle)" and "... (start)" cells, docs/reliability.md).

The states below are the ones a kill -9 leaves, made exactly: an install records each file
in the ledger before it writes it, so a run killed among the members of an archive leaves
ledger entries (and files) for the first members only; a run killed while the cache's
CACHEDIR.TAG was being written leaves the cache directory recorded as ours, untagged, with
the writer's temp file (host/fs.py names it .<name>.<pid>.<random>.tmp) next to it.
"""

import hashlib
import json
import os
import shutil

from aks_flex_node import paths

LEDGER = "/var/lib/aks-flex-node/ledger.json"
CACHE = paths.DEFAULT_CACHE_DIR
TAG = f"{CACHE}/{paths.CACHE_TAG_NAME}"
KUBE_LIB = "/usr/local/lib/aks-flex-node/kubernetes"
KUBE_DIR = KUBE_LIB + "/v1.30.4"
DEAD_PID = 4194999  # above any pid_max (2^22, proc(5)): no such process


def cut_short(node, *lost):
    """The ledger and files of a run killed just before it recorded the files `lost`."""
    ledger = json.loads(node.read(LEDGER))
    ledger["entries"] = [e for e in ledger["entries"] if not (e["kind"] == "file" and e["id"] in lost)]
    with open(node.path(LEDGER), "w") as f:
        json.dump(ledger, f)
    for path in lost:
        os.remove(node.path(path))


def planned(node, *args):
    proc, summary = node.cli_json("bootstrap", "--dry-run", *args)
    assert proc.returncode == 0, proc.stderr
    return {p["name"]: [c["what"] for c in p["changes"]] for p in summary["phases"] if p["changes"]}


def test_an_install_cut_short_is_installed_again(node):
    node.cli("bootstrap", check=True)
    kubeadm, portmap = f"{KUBE_DIR}/kubeadm", "/opt/cni/bin/portmap"
    wanted = {path: node.read(path) for path in (kubeadm, portmap)}
    cut_short(node, kubeadm, portmap)

    plans = planned(node)
    assert any(w.startswith("install kubernetes ") for w in plans.get("kubernetes", [])), plans
    assert any(w.startswith("install cni ") for w in plans.get("cni", [])), plans
    assert "runc" not in plans and "containerd" not in plans, "an intact install is left alone"

    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert {path: node.read(path) for path in wanted} == wanted
    phases = {p["name"]: p["status"] for p in summary["phases"]}
    assert phases["kubernetes"] == "changed" and phases["cni"] == "changed"
    # And it sticks: the next run finds everything in place.
    assert not {"kubernetes", "cni"} & set(planned(node))


def test_an_install_an_earlier_release_recorded_is_kept_without_a_restart(node):
    """An earlier release recorded each file, not the archive's list: after `apt upgrade`
    its intact install is adopted, not installed again (which would restart containerd and
    download the checksums). (The Kubernetes binaries' earlier layout: the test below.)"""
    node.cli("bootstrap", check=True)
    single = {"runc", "containerd", "cni"}
    ledger = json.loads(node.read(LEDGER))
    ledger["entries"] = [e for e in ledger["entries"] if not (e["kind"] == "artifact" and e["id"] in single)]
    with open(node.path(LEDGER), "w") as f:
        json.dump(ledger, f)
    assert not single & set(planned(node))
    assert not single & {e["id"] for e in json.loads(node.read(LEDGER))["entries"] if e["kind"] == "artifact"}, \
        "a dry run writes nothing"
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert summary["owed"] == [] and not [p for p in summary["phases"] if p["changes"]], summary
    adopted = {e["id"] for e in json.loads(node.read(LEDGER))["entries"] if e["kind"] == "artifact"}
    assert adopted == single | {"kubernetes/v1.30.4"}, adopted


def single_version_layout(node):
    """Make the node as a release before the versioned directories left it: the three
    binaries as files in /usr/local/bin, each recorded with its URL and sha256, and one
    `kubernetes` record listing them; no /usr/local/lib/aks-flex-node."""
    ledger = json.loads(node.read(LEDGER))
    url = next(e["url"] for e in ledger["entries"] if e["kind"] == "artifact" and e["id"] == "kubernetes/v1.30.4")
    entries, members = [], []
    for entry in ledger["entries"]:
        path = entry["id"]
        if path.startswith(KUBE_LIB) or (entry["kind"] == "parent_dir" and KUBE_LIB.startswith(path + "/")
                                          and path.startswith("/usr/local/lib")):
            continue
        if entry["kind"] == "artifact" and path == "kubernetes/v1.30.4":
            entry = {"step": "kubernetes", "kind": "artifact", "id": "kubernetes", "url": url, "members": members}
        elif entry["kind"] == "file" and path.startswith("/usr/local/bin/kube"):
            data = node.read(f"{KUBE_DIR}/{os.path.basename(path)}")
            os.remove(node.path(path))
            with open(node.path(path), "wb") as f:
                f.write(data)
            os.chmod(node.path(path), 0o755)
            members.append(path)
            entry = {"step": "kubernetes", "kind": "file", "id": path, "artifact": "kubernetes",
                     "artifact_url": url, "sha256": hashlib.sha256(data).hexdigest()}
        entries.append(entry)
    ledger["entries"] = entries
    with open(node.path(LEDGER), "w") as f:
        json.dump(ledger, f)
    shutil.rmtree(node.path("/usr/local/lib/aks-flex-node"))


def test_the_single_version_layout_is_moved_aside_without_a_download_or_a_restart(node):
    node.cli("bootstrap", check=True)
    single_version_layout(node)
    node.emu.admin("DELETE", "requests")
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert summary["owed"] == [], "the same bytes: the running kubelet is that version"
    # Moved by its migration, before any check (steps/migrations.py): no phase changes.
    assert [(m["name"], m["status"]) for m in summary["migrations"]] == [
        ("kubernetes-versioned-layout", "migrated")], summary.get("migrations")
    changed = {p["name"] for p in summary["phases"] if p["status"] == "changed"}
    assert changed == set(), summary["phases"]
    assert not [r for r in node.emu.requests() if "kubernetes-node" in r["path"]], "nothing downloaded"
    assert os.readlink(node.path(f"{KUBE_LIB}/current")) == "v1.30.4"
    assert os.readlink(node.path("/usr/local/bin/kubelet")) == "../lib/aks-flex-node/kubernetes/current/kubelet"
    ids = {(e["kind"], e["id"]) for e in json.loads(node.read(LEDGER))["entries"]}
    assert ("artifact", "kubernetes") not in ids and ("artifact", "kubernetes/v1.30.4") in ids
    assert not [p for p in planned(node)], "converged"
    before = node.files()
    proc = node.cli("unbootstrap")
    assert proc.returncode == 0, proc.stderr
    assert not {p for p in before if p.startswith(("/usr/local/bin/kube", "/usr/local/lib/aks-flex-node"))} \
        & node.files()


def test_unbootstrap_removes_what_an_install_cut_short_wrote(node):
    before = node.files()
    node.cli("bootstrap", check=True)
    cut_short(node, f"{KUBE_DIR}/kubeadm")
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stderr + json.dumps(summary)
    assert not os.path.exists(node.path(LEDGER)), "the install's record was left in the ledger"
    left = {p for p in node.files() - before if p.startswith(("/usr/local/bin", "/usr/local/lib", "/opt/cni", CACHE))}
    assert not left, left


def test_an_untagged_cache_of_ours_is_tagged_again(node):
    node.cli("bootstrap", check=True)
    os.remove(node.path(TAG))

    plans = planned(node)
    whats = [w for ws in plans.values() for w in ws]
    assert whats.count(f"write {TAG} (mode 0644)") == 1, plans  # one phase plans it, not each

    node.cli("bootstrap", check=True)
    assert node.read(TAG) == paths.CACHE_TAG
    assert not any(TAG in w for ws in planned(node).values() for w in ws)


def test_a_cache_of_another_program_is_never_tagged(node):
    """Only a directory the ledger records as ours gets our tag."""
    node.cli("bootstrap", check=True)
    ledger = json.loads(node.read(LEDGER))
    ledger["entries"] = [e for e in ledger["entries"] if e["kind"] != "cache_dir"]
    with open(node.path(LEDGER), "w") as f:
        json.dump(ledger, f)
    os.remove(node.path(TAG))
    assert not any(TAG in w for ws in planned(node).values() for w in ws)
    node.cli("bootstrap", check=True)
    assert not os.path.exists(node.path(TAG))


def test_unbootstrap_removes_a_cache_whose_tag_a_killed_run_never_wrote(node):
    before = node.files()
    node.cli("bootstrap", check=True)
    os.remove(node.path(TAG))
    temp = node.path(f"{CACHE}/.{paths.CACHE_TAG_NAME}.{DEAD_PID}.k1ll3d_x.tmp")
    with open(temp, "wb") as f:
        f.write(paths.CACHE_TAG[:20])
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stderr + json.dumps(summary)
    assert not os.path.exists(node.path(CACHE)), sorted(os.listdir(node.path(CACHE)))
    assert not {p for p in node.files() - before if p.startswith(CACHE)}
