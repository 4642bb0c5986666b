"""`az aks rotate-certs` (issue 27 item 3): the emulator models certificate rotation as Learn's
"Certificate rotation in Azure Kubernetes Service (AKS)" documents it (tests/emulator/cluster_pki.py),
and one agent full pass brings the node back with no step by hand.

What is asserted is what the cluster sees (the kubelet's heartbeats answered 200 again, the
Node Ready, a DriftRepaired event) and what is on the node (the CA the kubelet trusts is the
new one, the kubelet's client certificate is from the new CA).
"""

import base64
import json
import os
import socket
import ssl
import urllib.parse

from cryptography import x509

from tests.emulator import constants as C
from tests.harness import MACHINE_NAME
from tests.waiting import wait_for

API_VERSION = "2026-08-01"  # ManagedClusters_RotateClusterCertificates (stable)
CA_PATH = "/etc/kubernetes/certs/ca.crt"
CLIENT_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"
HEARTBEAT = f"/api/v1/nodes/{MACHINE_NAME}/status"


def _cluster(emu):
    [cl] = [c for c in emu.state()["clusters"] if c["id"].lower() == C.CLUSTER_ID.lower()]
    return cl


def _rotate(emu):
    """`az aks rotate-certs`: the ARM action, followed to its end as the SDK's poller does."""
    status, headers, _ = emu.arm_call("POST", f"{C.CLUSTER_ID}/rotateClusterCertificates", API_VERSION)
    assert status == 202, status
    status, _, _ = emu.http("GET", headers["Location"], headers={"Authorization": f"Bearer {emu.arm_token()}"})
    assert status == 204, status
    return _cluster(emu)["ca"].encode()


def _served_certificate(server):
    """The certificate the API server presents (not verified: we look at who signed it)."""
    url = urllib.parse.urlsplit(server)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        with context.wrap_socket(sock, server_hostname=url.hostname) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def _subject(pem):
    return x509.load_pem_x509_certificate(pem).subject


def _heartbeats(emu, since):
    return [r["status"] for r in emu.requests(server="apiserver", method="PATCH")
            if r["path"] == HEARTBEAT and r["time"] > since]


def _client_cert_issuer(node):
    """Who signed the kubelet's current client certificate; None while it has none (between
    the removal of the old one and the end of its TLS bootstrap)."""
    try:
        return x509.load_pem_x509_certificate(node.read(CLIENT_CERT)).issuer
    except (OSError, ValueError):
        return None


def _kubelet_status(node):
    with open(os.path.join(node.state_dir, "kubelet-status.json")) as f:
        return json.load(f)


def _event_reasons(emu):
    events = emu.state()["kube_objects"].get(C.CLUSTER_ID.lower(), {}).get("events", {}).values()
    return [e["reason"] for e in events
            if e["involvedObject"].get("name") == MACHINE_NAME and e.get("reportingComponent") == "aks-flex-node"]


def _ready(emu):
    node = {n["metadata"]["name"]: n for n in emu.state()["nodes"][C.CLUSTER_NAME]}[MACHINE_NAME]
    return [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"] == ["True"]


def _last_request_time(emu):
    return max(r["time"] for r in emu.state()["requests"])


def test_the_emulator_rotates_the_cluster_ca_as_aks_documents(node):
    """A new CA: the API server's certificate is from it, the credential listings carry it, a
    client certificate of the old CA is refused (401)."""
    emu = node.emu
    old_ca = _cluster(emu)["ca"].encode()
    server = emu.apiserver_for(C.CLUSTER_ID)
    _, _, admin_before = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", API_VERSION)
    new_ca = _rotate(emu)
    assert new_ca != old_ca and _cluster(emu)["certificate_rotations"] == 1
    assert _served_certificate(server).issuer == _subject(new_ca)

    _, _, user = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterUserCredential", API_VERSION)
    kubeconfig = base64.b64decode(user["kubeconfigs"][0]["value"]).decode()
    assert base64.b64encode(new_ca).decode() in kubeconfig

    # The admin credential fetched before the rotation: its client certificate is the old
    # CA's: refused. The one fetched again works.
    def readyz_as(credential, ca_pem, tmp):
        text = base64.b64decode(credential["kubeconfigs"][0]["value"]).decode()
        fields = dict(line.strip().split(": ", 1) for line in text.splitlines() if ": " in line)
        cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
        with open(cert, "wb") as f:
            f.write(base64.b64decode(fields["client-certificate-data"]))
        with open(key, "wb") as f:
            f.write(base64.b64decode(fields["client-key-data"]))
        context = ssl.create_default_context(cadata=ca_pem.decode())
        context.load_cert_chain(cert, key)
        url = urllib.parse.urlsplit(server)
        import http.client
        conn = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=30)
        conn.request("GET", f"/api/v1/nodes/{MACHINE_NAME}")
        return conn.getresponse().status

    tmp = os.path.join(node.state_dir, "rotation-admin")
    os.makedirs(tmp, exist_ok=True)
    assert readyz_as(admin_before, new_ca, tmp) == 401
    _, _, admin_after = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", API_VERSION)
    assert readyz_as(admin_after, new_ca, tmp) in (200, 404)


def test_a_ca_rotation_leaves_a_pool_node_ready_after_one_agent_pass(pool_node):
    node, emu = pool_node, pool_node.emu
    node.cli("bootstrap", check=True)
    serial = _kubelet_status(node)["cert_serial"]
    new_ca = _rotate(emu)

    proc = node.cli("agent", "--once")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert node.read(CA_PATH) == new_ca
    bootstrap = json.loads(node.read("/var/lib/kubelet/bootstrap-kubeconfig"))
    assert base64.b64decode(bootstrap["clusters"][0]["cluster"]["certificate-authority-data"]) == new_ca
    assert _client_cert_issuer(node) == _subject(new_ca)
    repaired = _last_request_time(emu)
    assert wait_for(lambda: 200 in _heartbeats(emu, repaired), 60), _heartbeats(emu, repaired)
    assert wait_for(lambda: _kubelet_status(node).get("cert_serial") not in (None, serial), 30)
    assert _ready(emu)
    assert "DriftRepaired" in _event_reasons(emu), proc.stderr

    # Converged: the next pass changes nothing.
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert [p["name"] for p in summary["phases"] if p["status"] == "changed"] == []


def test_a_ca_rotation_leaves_an_arc_node_ready_after_one_agent_pass(node):
    emu = node.emu
    emu.settings(rbac_propagation_delay=0)
    node.cli("bootstrap", check=True)
    new_ca = _rotate(emu)

    proc = node.cli("agent", "--once")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert node.read(CA_PATH) == new_ca
    kubeconfig = json.loads(node.read("/var/lib/kubelet/kubeconfig"))
    assert base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]) == new_ca
    repaired = _last_request_time(emu)
    assert wait_for(lambda: 200 in _heartbeats(emu, repaired), 60), _heartbeats(emu, repaired)
    assert _ready(emu)
    assert "DriftRepaired" in _event_reasons(emu), proc.stderr


def test_the_running_agent_repairs_a_rotation_without_waiting_for_its_cloud_interval(pool_node):
    """A local pass cannot read the new CA (it asks Azure nothing), but it must not pass over
    a kubelet that lost the API server: it fails, and the full pass after a failure repairs.
    The drift probe does not repeat the Node's read (agent.py): a real local pass reads it
    at least every --probe-max-age seconds (5 here, 300 by default), well inside the cloud
    interval."""
    from tests.agent_fixtures import start_agent, status

    node, emu = pool_node, pool_node.emu
    node.cli("bootstrap", check=True)
    agent = start_agent(node, "--interval", "1", "--cloud-interval", "3600", "--probe-max-age", "5")
    try:
        assert wait_for(lambda: status(node).get("pass") == "local" and status(node).get("state") == "succeeded",
                        60), status(node)
        new_ca = _rotate(emu)
        assert wait_for(lambda: node.read(CA_PATH) == new_ca and status(node).get("state") == "succeeded", 120), \
            status(node)
        assert wait_for(lambda: _client_cert_issuer(node) == _subject(new_ca), 60)
        repaired = _last_request_time(emu)
        assert wait_for(lambda: 200 in _heartbeats(emu, repaired), 60), _heartbeats(emu, repaired)
    finally:
        agent.terminate()
        _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
