"""Conditions and events on the node's own Node, sent with the node's own credential (an
x509 system:node:<name> client certificate, as the kubelet holds after TLS bootstrap) through
our real client to the emulated API server, and read back as the operator reads them: the
API as the cluster admin, and `kubectl describe node` where kubectl is on PATH.

The Node authorizer and NodeRestriction let a node patch its own Node's status and create
events, and nothing of another node's: a patch of another Node's status is 403.
"""

import base64
import datetime
import json
import os
import shutil
import subprocess
import types

import pytest
import yaml

from aks_flex_node import kube, paths
from aks_flex_node.health import conditions as hc
from aks_flex_node.health import node_report, report_record
from aks_flex_node.host import Host
from tests.apiserver_fixtures import make_csr
from tests.emulator import constants as C
from tests.harness import MACHINE_NAME

KUBECTL = shutil.which("kubectl", path="/usr/local/bin:/usr/bin:/bin")
NOW = datetime.datetime(2026, 11, 27, 18, 0, 0, tzinfo=datetime.timezone.utc)
LATER = NOW + datetime.timedelta(minutes=10)

ROLLED_BACK = {"operation": "bootstrap", "state": "failed", "exit_code": 1,
               "error": {"error": "upgrade-failed", "message": "kubelet 1.32.1 was not Ready"},
               "phases": [{"name": "kubelet", "status": "unchanged"}, {"name": "kubelet-upgrade", "status": "failed"}],
               "kubelet": {"active": "1.31.2", "upgrade": {"from": "1.31.2", "to": "1.32.1", "phase": "failed"}}}
SUCCEEDED = {"operation": "bootstrap", "state": "succeeded", "exit_code": 0, "error": None,
             "phases": [{"name": "kubelet", "status": "unchanged"}], "kubelet": {"active": "1.31.2"}}
EXPIRING = [types.SimpleNamespace(kind="service-principal-certificate", source="/etc/aks-flex-node/sp.pem",
                                  renewable=False, not_after=NOW + datetime.timedelta(days=3))]


class Cluster:
    def __init__(self, emu, tmp):
        self.emu, self.tmp = emu, tmp
        added = emu.add_cluster(name="aks-conditions", resource_group=C.CLUSTER_RG, kubernetes_version="1.32.3")
        self.server, self.cluster_id = added["apiserver"], added["id"]
        status, _, creds = emu.arm_call("POST", f"{self.cluster_id}/listClusterAdminCredential", "2026-08-01")
        assert status == 200, creds
        self.admin_config = yaml.safe_load(base64.b64decode(creds["kubeconfigs"][0]["value"]))
        self.admin = {"Authorization": f"Bearer {self.admin_config['users'][0]['user']['token']}"}
        with open(emu.ca_bundle, "rb") as f:
            self.ca_pem = f.read()

    def api(self, method, path, body=None):
        status, _, payload = self.emu.http(method, self.server + path, body, self.admin)
        return status, payload

    def add_node(self, name):
        status, body = self.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        assert status == 201, body
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                            "message": "kubelet is posting ready status",
                                            "lastHeartbeatTime": "2026-11-27T17:00:00Z",
                                            "lastTransitionTime": "2026-11-27T17:00:00Z"}]}}
        status, _, body = self.emu.http("PATCH", f"{self.server}/api/v1/nodes/{name}/status", json.dumps(ready).encode(),
                                        dict(self.admin, **{"Content-Type": "application/strategic-merge-patch+json"}))
        assert status == 200, body

    def node_client(self, name):
        """Our KubeClient as system:node:<name>, with a client certificate the cluster signed."""
        csr_pem, key_pem = make_csr(f"system:node:{name}")
        status, csr = self.api("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", {
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name},
            "spec": {"request": base64.b64encode(csr_pem).decode(), "usages": ["digital signature", "client auth"],
                     "signerName": "kubernetes.io/kube-apiserver-client-kubelet"}})
        assert status == 201 and csr["status"].get("certificate"), csr
        path = os.path.join(self.tmp, f"{name}.pem")
        with open(path, "wb") as f:
            f.write(base64.b64decode(csr["status"]["certificate"]) + key_pem)
        return kube.KubeClient(self.server, self.ca_pem, client_cert=path, timeout=10)

    def node(self, name):
        status, body = self.api("GET", f"/api/v1/nodes/{name}")
        assert status == 200, body
        return body

    def events(self, name):
        status, body = self.api("GET", "/api/v1/events?fieldSelector=" + f"involvedObject.kind=Node,involvedObject.name={name}")
        assert status == 200, body
        return body["items"]


@pytest.fixture
def cluster(fresh_emulator, tmp_path):
    cl = Cluster(fresh_emulator, str(tmp_path))
    for name in ("n1", "n2"):
        cl.add_node(name)
    return cl


def by_type(node):
    return {c["type"]: c for c in node["status"]["conditions"]}


def test_a_failed_upgrade_shows_on_the_node_and_the_kubelets_conditions_stay(cluster):
    client = cluster.node_client("n1")
    assert node_report.report(lambda: client, "n1", ROLLED_BACK, EXPIRING, NOW) is True
    conds = by_type(cluster.node("n1"))
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "KubeletReady"
    assert (conds[hc.PASS_FAILED]["status"], conds[hc.PASS_FAILED]["reason"]) == ("True", "KubeletUpgradeFailed")
    assert conds[hc.UPGRADE_ROLLED_BACK]["status"] == "True"
    assert (conds[hc.CREDENTIAL_EXPIRING]["status"], conds[hc.CREDENTIAL_EXPIRING]["reason"]) == \
        ("True", "CredentialExpiresSoon")
    node_uid = cluster.node("n1")["metadata"]["uid"]
    events = cluster.events("n1")
    assert [(e["reason"], e["type"], e["reportingComponent"], e["reportingInstance"]) for e in events] == \
        [("KubeletUpgradeRolledBack", "Warning", "aks-flex-node", "n1"),
         ("CredentialExpiring", "Warning", "aks-flex-node", "n1")]
    assert events[0]["involvedObject"]["uid"] == node_uid and events[0]["metadata"]["namespace"] == "default"
    assert "Ready" not in by_type(cluster.node("n2")) or hc.PASS_FAILED not in by_type(cluster.node("n2"))

    # The next pass succeeds: the failure clears with a new transition time, the credential's
    # condition keeps its own, and the recovery is an event.
    assert node_report.report(lambda: client, "n1", SUCCEEDED, EXPIRING, LATER) is True
    again = by_type(cluster.node("n1"))
    assert again[hc.PASS_FAILED]["status"] == "False"
    assert again[hc.PASS_FAILED]["lastTransitionTime"] == "2026-11-27T18:10:00Z"
    assert again[hc.CREDENTIAL_EXPIRING]["lastTransitionTime"] == "2026-11-27T18:00:00Z"
    assert again[hc.CREDENTIAL_EXPIRING]["lastHeartbeatTime"] == "2026-11-27T18:10:00Z"
    assert [e["reason"] for e in cluster.events("n1")] == \
        ["KubeletUpgradeRolledBack", "CredentialExpiring", "PassRecovered"]


def test_a_node_cannot_patch_another_nodes_status(cluster):
    client = cluster.node_client("n1")
    with pytest.raises(kube.Forbidden):
        client.patch_node_status("n2", hc.status_patch(hc.conditions_of(ROLLED_BACK, None, NOW)))
    assert hc.PASS_FAILED not in by_type(cluster.node("n2"))
    # Best effort: report() as another node's identity warns and returns, it never raises.
    assert node_report.report(lambda: client, "n2", ROLLED_BACK, None, NOW) is False
    assert hc.PASS_FAILED not in by_type(cluster.node("n2"))


def test_an_unreachable_api_server_is_a_warning(cluster, caplog):
    client = kube.KubeClient("https://127.0.0.1:9", cluster.ca_pem, client_cert=None, timeout=5)
    assert node_report.report(lambda: client, "n1", ROLLED_BACK, None, NOW) is False
    assert any("apiserver-unreachable" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


@pytest.mark.skipif(not KUBECTL, reason="kubectl is not on PATH")
def test_kubectl_describe_node_shows_the_conditions_and_events(cluster):
    client = cluster.node_client("n1")
    assert node_report.report(lambda: client, "n1", ROLLED_BACK, EXPIRING, NOW) is True
    path = os.path.join(cluster.tmp, "admin.kubeconfig")
    with open(path, "w") as f:
        json.dump(cluster.admin_config, f)
    env = {"PATH": "/usr/bin:/bin", "HOME": cluster.tmp, "KUBECONFIG": path}
    proc = subprocess.run([KUBECTL, "describe", "node", "n1"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for word in (hc.PASS_FAILED, hc.UPGRADE_ROLLED_BACK, hc.CREDENTIAL_EXPIRING, "KubeletUpgradeFailed",
                 "CredentialExpiresSoon", "KubeletReady"):
        assert word in out, out
    events = out.split("Events:", 1)[1]
    # Listed once (kubectl asks by the Node's uid and by its name: the emulator selects both).
    assert events.count("KubeletUpgradeRolledBack") == 1 and "aks-flex-node" in events, events


# -- through the CLI: the after-run hook, as the node (Arc mode: the HIMDS token) -------------

def flex_conditions(emu):
    node = {n["metadata"]["name"]: n for n in emu.state()["nodes"][C.CLUSTER_NAME]}[MACHINE_NAME]
    return {c["type"]: c for c in node["status"]["conditions"] if c["type"].startswith("FlexNode")}


def event_reasons(emu):
    events = emu.state()["kube_objects"].get(C.CLUSTER_ID.lower(), {}).get("events", {}).values()
    return [e["reason"] for e in sorted(events, key=lambda e: e["metadata"]["name"])
            if e["involvedObject"].get("name") == MACHINE_NAME and e.get("reportingComponent") == "aks-flex-node"]


def test_a_join_then_a_failed_pass_show_on_the_node(node):
    node.emu.settings(rbac_propagation_delay=0)
    node.cli("bootstrap", check=True)
    conds = flex_conditions(node.emu)
    assert conds[hc.PASS_FAILED]["status"] == "False" and conds[hc.REPAIR_DID_NOT_STICK]["status"] == "False"
    assert event_reasons(node.emu) == ["NodeJoined"]
    # Drift the kubelet's config and make its restart fail: the services phase fails.
    with open(node.path("/var/lib/kubelet/config.yaml"), "ab") as f:
        f.write(b"\n# an operator's edit\n")
    node.fake.fail("systemctl", "Job for kubelet.service failed", verb="restart")
    proc = node.cli("bootstrap")
    assert proc.returncode != 0
    failed = flex_conditions(node.emu)[hc.PASS_FAILED]
    assert (failed["status"], failed["reason"]) == ("True", "ServicesFailed")
    patches = [r for r in node.emu.requests(server="apiserver", method="PATCH")
               if r["path"] == f"/api/v1/nodes/{MACHINE_NAME}/status"]
    assert patches and all(r["status"] == 200 for r in patches)


def test_leaving_is_an_event_sent_before_the_credential_goes(node):
    node.emu.settings(rbac_propagation_delay=0)
    node.cli("bootstrap", check=True)
    node.cli("unbootstrap", check=True)
    assert event_reasons(node.emu)[-1:] == ["NodeLeaving"]  # after NodeJoined where the hook sent it


# -- a pass with nothing new sends nothing (health/report_record.py) -------------------------

def state_root(tmp_path):
    root = tmp_path / "root"
    os.makedirs(root / "var/lib/aks-flex-node")
    return Host(str(root))


def sent_to(cluster):
    """How many requests the API server stand-in has had."""
    return len(cluster.emu.requests(server="apiserver"))


def test_a_pass_with_nothing_new_sends_nothing_until_the_heartbeat_is_due(cluster, tmp_path):
    host, client = state_root(tmp_path), cluster.node_client("n1")

    def report(summary, at):
        return node_report.report(lambda: client, "n1", summary, EXPIRING, at, host=host)

    assert report(SUCCEEDED, NOW) is True
    assert [e["reason"] for e in cluster.events("n1")] == ["NodeJoined", "CredentialExpiring"]
    before = sent_to(cluster)
    assert report(SUCCEEDED, NOW + datetime.timedelta(minutes=1)) is True
    assert sent_to(cluster) == before, "the same conditions, no event: nothing sent"

    # A condition that changed is sent at once, and so is its recovery.
    assert report(ROLLED_BACK, NOW + datetime.timedelta(minutes=2)) is True
    assert by_type(cluster.node("n1"))[hc.PASS_FAILED]["status"] == "True"
    assert report(SUCCEEDED, NOW + datetime.timedelta(minutes=3)) is True
    assert by_type(cluster.node("n1"))[hc.PASS_FAILED]["status"] == "False"
    before = sent_to(cluster)
    assert report(SUCCEEDED, NOW + datetime.timedelta(minutes=7)) is True
    assert sent_to(cluster) == before

    # The heartbeat period after the last send: sent again, lastHeartbeatTime moves,
    # lastTransitionTime does not.
    due = NOW + datetime.timedelta(minutes=3) + datetime.timedelta(seconds=report_record.RESYNC)
    assert report(SUCCEEDED, due) is True
    assert sent_to(cluster) > before
    again = by_type(cluster.node("n1"))[hc.PASS_FAILED]
    assert (again["lastHeartbeatTime"], again["lastTransitionTime"]) == ("2026-11-27T18:08:00Z", "2026-11-27T18:03:00Z")
    assert [e["reason"] for e in cluster.events("n1")] == \
        ["NodeJoined", "CredentialExpiring", "KubeletUpgradeRolledBack", "PassRecovered"]


def test_a_send_that_failed_is_sent_again_on_the_next_pass(cluster, tmp_path):
    host = state_root(tmp_path)
    down = kube.KubeClient("https://127.0.0.1:9", cluster.ca_pem, client_cert=None, timeout=5)
    assert node_report.report(lambda: down, "n1", SUCCEEDED, None, NOW, host=host) is False
    assert not os.path.exists(host.path(paths.NODE_REPORT_RECORD))
    client = cluster.node_client("n1")
    assert node_report.report(lambda: client, "n1", SUCCEEDED, None, NOW + datetime.timedelta(minutes=1),
                              host=host) is True
    assert by_type(cluster.node("n1"))[hc.PASS_FAILED]["status"] == "False"


def _garbage(path):
    with open(path, "wb") as f:
        f.write(b"\x1b]0;owned\x07{not json")


def _wrong_types(path):
    with open(path, "w") as f:
        json.dump({"node": "n1", "digest": "0" * 64, "sent": "soon"}, f)


def _from_the_future(path):  # the clock went back, or a record written to never expire
    data = json.loads(open(path).read())
    with open(path, "w") as f:
        json.dump(dict(data, sent=data["sent"] + 10 ** 9), f)


def _another_node(path):
    data = json.loads(open(path).read())
    with open(path, "w") as f:
        json.dump(dict(data, node="n2"), f)


def _symlink(path):  # a link to a record that would be trusted: never followed
    os.rename(path, path + ".real")
    os.symlink(path + ".real", path)


def _fifo(path):  # a reader that waited on it would hold the pass
    os.remove(path)
    os.mkfifo(path)


def _huge(path):
    data = open(path).read()
    with open(path, "w") as f:
        f.write(data.rstrip("}\n") + ', "pad": "' + "x" * report_record.MAX_RECORD + '"}')


@pytest.mark.parametrize("spoil", [_garbage, _wrong_types, _from_the_future, _another_node, _symlink, _fifo, _huge],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_record_that_cannot_be_trusted_means_the_report_is_sent(cluster, tmp_path, spoil):
    host, client = state_root(tmp_path), cluster.node_client("n1")
    assert node_report.report(lambda: client, "n1", SUCCEEDED, None, NOW, host=host) is True
    record = host.path(paths.NODE_REPORT_RECORD)
    spoil(str(record))
    before = sent_to(cluster)
    assert node_report.report(lambda: client, "n1", SUCCEEDED, None, NOW + datetime.timedelta(minutes=1),
                              host=host) is True
    assert sent_to(cluster) > before
    # Replaced by a record this release wrote (a link replaced, not followed).
    assert os.path.isfile(record) and not os.path.islink(record)
    assert json.loads(open(record).read())["sent"] == int((NOW + datetime.timedelta(minutes=1)).timestamp())


def test_a_converged_pass_sends_nothing_and_unbootstrap_forgets_the_record(node):
    node.emu.settings(rbac_propagation_delay=0)
    node.cli("bootstrap", check=True)
    record = node.path(paths.NODE_REPORT_RECORD)
    assert oct(os.stat(record).st_mode & 0o777) == "0o600"
    node.emu.admin("DELETE", "requests")
    node.cli("bootstrap", check=True)
    # Ours, not the kubelet stand-in's status updates.
    reports = [(r["method"], r["path"]) for r in node.emu.requests(server="apiserver")
               if not (r["user_agent"] or "").startswith("kubelet/")
               and ((r["method"] == "PATCH" and r["path"] == f"/api/v1/nodes/{MACHINE_NAME}/status")
                    or (r["method"] == "POST" and r["path"].endswith("/events")))]
    assert reports == []
    node.cli("unbootstrap", check=True)
    assert not os.path.lexists(record)
