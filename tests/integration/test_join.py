"""Bootstrap, re-run, status and unbootstrap through the real CLI, against the emulator.

Azure is the emulator, host commands and the kubelet are the stand-ins: what these tests
assert is the state left in the root prefix and in the emulator.
"""

import base64
import json
import os

from tests.emulator import constants as C
from tests.harness import MACHINE_NAME

ARTIFACTS = ("kubernetes-node-v", "containerd-", "runc-v", "cni-plugins-")


def machines(emu):
    return emu.state()["machines"]


def machine_role_assignments(emu):
    """Role assignments held by Arc machine identities (the operator's own are not ours)."""
    state = emu.state()
    principals = {m["principal_id"] for m in state["machines"]}
    principals |= {p["object_id"] for p in state["principals"] if p["kind"] == "ManagedIdentity"}
    return [a for a in state["role_assignments"] if a["principal_id"] in principals]


def nodes(emu, cluster=C.CLUSTER_NAME):
    return {n["metadata"]["name"]: n for n in emu.state()["nodes"].get(cluster, [])}


def artifact_downloads(emu):
    return [r for r in emu.requests(path_contains="/artifacts/")
            if any(a in r["path"] for a in ARTIFACTS) and not r["path"].endswith(".sha256")]


def test_bootstrap_joins_then_a_second_run_changes_nothing(node):
    emu = node.emu
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert summary["state"] == "succeeded"
    statuses = {p["name"]: p["status"] for p in summary["phases"]}
    assert statuses["arc"] == "changed" and statuses["node-ready"] in ("changed", "unchanged")

    # Azure: an Arc machine with an identity, the legacy preset's three roles on the cluster.
    [machine] = machines(emu)
    assert machine["name"] == MACHINE_NAME
    principal = machine["principal_id"]
    assigned = [a for a in machine_role_assignments(emu) if a["principal_id"] == principal]
    assert sorted(a["role_guid"] for a in assigned) == sorted(
        [C.ROLE_READER, C.ROLE_AKS_RBAC_CLUSTER_ADMIN, C.ROLE_AKS_CLUSTER_ADMIN])
    assert all(a["scope"].lower() == C.CLUSTER_ID.lower() for a in assigned)
    # The stand-in kubelet registered through the exec plugin: Ready, with our labels.
    registered = nodes(emu)[MACHINE_NAME]
    ready = [c for c in registered["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert registered["metadata"]["labels"]["team"] == "edge"
    assert registered["metadata"]["labels"]["kubernetes.azure.com/managed"] == "false"
    # Host: the kubelet's kubeconfig is private and holds no secret, only the exec plugin.
    assert node.mode("/var/lib/kubelet/kubeconfig") == 0o600
    kubeconfig = json.loads(node.read("/var/lib/kubelet/kubeconfig"))
    user = kubeconfig["users"][0]["user"]
    assert set(user) == {"exec"} and user["exec"]["args"] == ["token"]
    assert C.SP_CLIENT_SECRET.encode() not in node.read("/var/lib/kubelet/kubeconfig")
    assert base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]) == \
        node.read("/etc/kubernetes/certs/ca.crt")
    assert b"#/swapfile none swap sw 0 0" in node.read("/etc/fstab")
    assert node.mode("/usr/local/bin/kubelet") == 0o755
    assert b"127.0.0.1:10257" in node.read("/etc/containerd/config.toml")
    dropin = node.read("/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf").decode()
    assert f"--hostname-override={MACHINE_NAME}" in dropin
    assert "kubernetes.azure.com/managed=false" in dropin and "team=edge" in dropin

    downloads = len(artifact_downloads(emu))
    writes = [r for r in emu.requests(method="PUT")]
    assert downloads == 4

    proc, again = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    changed = {p["name"]: p["changes"] for p in again["phases"] if p["status"] != "unchanged"}
    assert changed == {}, changed
    assert len(artifact_downloads(emu)) == downloads, "a second run downloads nothing"
    assert len(emu.requests(method="PUT")) == len(writes), "a second run writes nothing to ARM"


def test_status_reports_the_run(node):
    node.cli("bootstrap", check=True)
    proc, status = node.cli_json("status")
    assert proc.returncode == 0
    assert status["state"] == "succeeded" and status["exit_code"] == 0
    assert status["machine_name"] == MACHINE_NAME
    assert [p["name"] for p in status["phases"]][0] == "preflight"
    assert all("duration_s" in p for p in status["phases"])
    proc = node.cli("status", "--wait", "--timeout", "5")
    assert proc.returncode == 0 and "state: succeeded" in proc.stdout


def test_unbootstrap_removes_everything_we_created(node):
    before = node.files()
    node.cli("bootstrap", check=True)
    emu = node.emu
    assert machines(emu) and machine_role_assignments(emu) and nodes(emu)

    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["state"] == "unjoined" and summary["leftovers"] == []
    assert machines(emu) == []
    assert machine_role_assignments(emu) == []
    assert nodes(emu) == {}, "the Node object is deleted"
    assert json.loads(node.read("/var/lib/aks-flex-node/status.json"))["state"] == "unjoined"
    after = node.files()
    ours = {p for p in after - before if not p.startswith("/var/lib/aks-flex-node")}
    assert ours == set(), sorted(ours)
    # /etc/fstab is restored as it was.
    assert b"\n/swapfile none swap sw 0 0" in node.read("/etc/fstab")
    units = node.fake.fake_state("systemd.json").get("units", {})
    assert not any(u.get("enabled") or u.get("active") for u in units.values()), units


def test_dry_run_changes_nothing(node):
    before = node.files()
    proc, summary = node.cli_json("bootstrap", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    statuses = {p["name"]: p["status"] for p in summary["phases"]}
    assert statuses["system"] == "planned" and statuses["kubelet"] == "planned"
    plans = {p["name"]: p["changes"] for p in summary["phases"]}
    assert any("connect to Azure Arc" in c["what"] for c in plans["arc"])
    assert all(c["why"] for cs in plans.values() for c in cs)
    # Only the run lock (a dry run still keeps a concurrent run from changing things under it).
    assert node.files() - before == {"/var/lib/aks-flex-node", "/var/lib/aks-flex-node/lock"}
    assert machines(node.emu) == []


def test_phase_selection(node):
    proc, summary = node.cli_json("bootstrap", "--phase", "system")
    assert proc.returncode == 0, proc.stderr
    assert [p["name"] for p in summary["phases"]] == ["system"]
    assert node.read("/etc/sysctl.d/90-aks-flex-node.conf")
    assert machines(node.emu) == []
    proc = node.cli("bootstrap", "--phase", "nope")
    assert proc.returncode == 2 and "nope" in proc.stderr


def test_the_kubelet_resolves_through_systemd_resolved_upstreams_when_it_runs(node):
    """Ubuntu's (and any systemd-resolved host's) /etc/resolv.conf names only the stub
    127.0.0.53, which pods cannot reach: the kubelet gets resolved's upstream list
    (/run/systemd/resolve/resolv.conf), as kubeadm does (kubernetes.io/docs/tasks/
    administer-cluster/dns-debugging-resolution/#known-issues); without resolved, /etc's."""
    proc = node.cli("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(node.read("/var/lib/kubelet/config.yaml"))["resolvConf"] == "/etc/resolv.conf"
    os.makedirs(node.path("/run/systemd/resolve"), exist_ok=True)
    with open(node.path("/run/systemd/resolve/resolv.conf"), "w") as f:
        f.write("nameserver 192.0.2.53\n")
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(node.read("/var/lib/kubelet/config.yaml"))["resolvConf"] == "/run/systemd/resolve/resolv.conf"
    assert {p["name"]: p["status"] for p in summary["phases"]}["kubelet"] == "changed"
