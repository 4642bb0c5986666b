"""Convergence and cleanup under trouble: drift is repaired without needless restarts,
unbootstrap finishes locally when Azure is unreachable and lists what is left, and the
run lock keeps two runs apart."""

import os
import subprocess
import sys

from aks_flex_node import config
from tests import harness
from tests.emulator import constants as C
from tests.harness import REPO

# What a run that stops before changing the host leaves: its lock, status and marker.
# What any run writes about itself, refused or not: the lock, its status and the metrics
# record that counts it (health/metrics.py).
RUN_RECORDS_ONLY = {"/var/lib/aks-flex-node", "/var/lib/aks-flex-node/lock", "/var/lib/aks-flex-node/status.json",
                    "/var/lib/aks-flex-node/provision.complete", "/var/lib/aks-flex-node/metrics.json"}


def kubelet_starts(node):
    return [argv for argv in node.fake.calls("systemctl")  # ["systemctl", verb, unit...]
            if argv[1:2] in (["start"], ["restart"]) and "kubelet" in " ".join(argv[2:])]


def test_a_stopped_kubelet_is_started_without_touching_anything_else(node):
    node.cli("bootstrap", check=True)
    node.fake.stop_units()
    subprocess.run(["systemctl", "stop", "kubelet"], env=node.env, check=True)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    changed = {p["name"]: [c["what"] for c in p["changes"]] for p in summary["phases"] if p["changes"]}
    assert changed == {"services": ["start kubelet"]}, changed


def test_a_converged_run_asks_each_thing_once(node):
    """What a converged re-run costs (make bench times it): one `azcmagent show` (preflight
    reads it, the arc phase reuses it), one systemctl call for both units, one Entra token
    for the cluster and permission reads made at the same time, and no ARM write."""
    node.cli("bootstrap", check=True)
    node.emu.admin("DELETE", "requests")
    before = len(node.fake.calls())
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0 and not any(p["changes"] for p in summary["phases"]), proc.stderr
    calls = node.fake.calls()[before:]
    assert [c for c in calls if c[0] == "azcmagent"] == [["azcmagent", "show", "-j"]]
    assert [c for c in calls if c[0] == "systemctl"] == [
        ["systemctl", "show", "--property=UnitFileState,ActiveState", "containerd.service", "kubelet.service"]]
    assert len(node.emu.requests(server="entra", method="POST")) == 1
    arm = node.emu.requests(server="arm")
    assert [r["method"] for r in arm if r["method"] not in ("GET", "POST")] == []
    assert [r for r in arm if r["method"] == "POST"] == [
        r for r in arm if r["path"].endswith("/listClusterUserCredential")], "a read, not a write"


def test_unbootstrap_with_azure_unreachable_cleans_locally_and_lists_leftovers(node):
    node.cli("bootstrap", check=True)
    emu = node.emu
    emu.faults([{"match": {"server": "arm"}, "drop": True},
                {"match": {"server": "entra"}, "drop": True}])
    proc, summary = node.cli_json("unbootstrap", timeout=600)
    emu.clear_faults()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    leftovers = " ".join(summary["leftovers"])
    assert "role assignment" in leftovers and "Arc machine" in leftovers
    # Local cleanup completed all the same.
    assert not os.path.exists(node.path("/usr/local/bin/kubelet"))
    assert not os.path.exists(node.path("/etc/systemd/system/kubelet.service"))
    # The ledger still knows the cloud leftovers, so a later unbootstrap finishes the job.
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert emu.state()["machines"] == []


def test_keep_cloud_resources(node):
    node.cli("bootstrap", check=True)
    proc, summary = node.cli_json("unbootstrap", "--keep-cloud-resources")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = " ".join(summary["kept"])
    assert "arc_machine" in kept and "role_assignment" in kept
    assert len(node.emu.state()["machines"]) == 1
    assert not os.path.exists(node.path("/usr/local/bin/kubelet"))


def test_a_second_run_waits_or_names_the_holder(node):
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "from aks_flex_node.host import Host\n"
        "from aks_flex_node.engine.lock import RunLock\n"
        "with RunLock(Host(%r), 'bootstrap'):\n"
        "    print('held', flush=True); sys.stdin.read()\n" % (REPO, node.root))
    # It holds the lock until the test closes its stdin: however slow the run below, it
    # meets the lock held (a time bound here would let it go first on a loaded machine).
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = node.cli("bootstrap")
        assert proc.returncode == 75
        assert f"pid {holder.pid}" in proc.stderr
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
        holder.stdout.close()


def test_preflight_failure_stops_bootstrap_before_any_change(node):
    os.remove(node.path("/sys/fs/cgroup/cgroup.controllers"))
    before = node.files()
    proc = node.cli("bootstrap")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "cgroups" in proc.stderr and "--ignore-preflight-errors=cgroups" in proc.stderr
    assert node.files() - before <= RUN_RECORDS_ONLY
    proc, report = node.cli_json("preflight")
    assert proc.returncode == 3
    assert {c["name"]: c["status"] for c in report["checks"]}["cgroups"] == "error"
    proc = node.cli("bootstrap", "--ignore-preflight-errors=cgroups")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_preflight_says_what_it_cannot_tell(node):
    """A container shows no /proc/modules and no /proc/swaps: preflight warns that it cannot
    tell (issue 9, defect 9), and no longer calls the modules missing or swap off."""
    proc, report = node.cli_json("preflight")
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["swap"]["status"] == "warning"  # the prepared root has a swap file on
    assert checks["kernel-modules"]["status"] == "warning" and "neither loaded" in checks["kernel-modules"]["message"]
    os.remove(node.path("/proc/modules"))
    os.remove(node.path("/proc/swaps"))
    proc, report = node.cli_json("preflight")
    checks = {c["name"]: c for c in report["checks"]}
    assert "cannot tell whether swap is on: /proc/swaps is absent" in checks["swap"]["message"]
    assert "cannot tell whether kernel module(s) overlay, br_netfilter are loaded" in \
        checks["kernel-modules"]["message"], checks["kernel-modules"]


def test_preflight_exits_75_when_every_failure_may_pass_on_its_own(node):
    """A dropped connection, twice, is not a configuration problem: `preflight` ends as a
    bootstrap would, with 75 (try again later), and 3 once a definite failure is among them."""
    node.emu.faults([{"match": {"server": "any"}, "drop": True}])  # preflight probes ARM's root
    proc, report = node.cli_json("preflight")
    checks = {c["name"]: c for c in report["checks"]}
    assert proc.returncode == 75, proc.stdout + proc.stderr
    assert checks["azure-endpoints"]["status"] == "error" and checks["azure-endpoints"]["transient"]
    os.remove(node.path("/sys/fs/cgroup/cgroup.controllers"))
    proc, _report = node.cli_json("preflight")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    node.emu.clear_faults()


def test_joined_elsewhere_is_refused(node):
    node.cli("bootstrap", check=True)
    config.write(None, {"cluster_resource_id": C.CLUSTER2_ID}, root=node.root)
    proc = node.cli("bootstrap")
    assert proc.returncode == 3
    assert "joined-elsewhere" in proc.stderr and "unbootstrap" in proc.stderr


def test_a_wrong_secret_is_an_auth_error_before_any_host_change(node):
    with open(node.path(harness.SECRET_PATH), "w") as f:
        f.write("not-the-secret\n")
    before = node.files()
    proc = node.cli("bootstrap")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "AADSTS7000215" in proc.stderr and "sp_client_secret_file" in proc.stderr
    assert "not-the-secret" not in proc.stdout + proc.stderr
    changed = node.files() - before
    assert changed <= RUN_RECORDS_ONLY, changed


def test_missing_permission_is_an_auth_error(node):
    # The reader principal may read the cluster but not assign roles.
    with open(node.path(harness.SECRET_PATH), "w") as f:
        f.write(C.READER_SP_CLIENT_SECRET + "\n")
    config.write(None, {"sp_client_id": C.READER_SP_CLIENT_ID}, root=node.root)
    proc = node.cli("bootstrap")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "roleAssignments/write" in proc.stderr or "Owner" in proc.stderr
