"""The bootstrap-token join mode through the real CLI, against the emulator: the operator
gives a bootstrap token, the API server and its CA; the node asks Azure nothing (no ARM, no
Entra ID, no Arc) and the kubelet joins by TLS bootstrap.

The token is minted the way an operator would get one for this mode: listBootstrapData on
the pool, called by the test with the operator's credential (the emulator's request log
shows those calls before the node's first one, and none after).
"""

import base64
import json
import os

import pytest

from tests.emulator import constants as C
from tests.harness import MACHINE_NAME
from tests.workload_fixtures import registered_node

POOL_SCOPE = f"{C.CLUSTER_ID}/agentPools/{C.FLEX_POOL}"
TOKEN_PATH = "/etc/aks-flex-node/bootstrap-token"
CLUSTER_CA_PATH = "/etc/aks-flex-node/cluster-ca.pem"
AZURE_SERVERS = ("arm", "entra", "himds")


def mint_bootstrap_data(emu):
    """The pool's bootstrap data, asked for with the operator's credential (as `az rest`
    would): a fresh token, the API server and its CA."""
    status, _, body = emu.arm_call("POST", f"{POOL_SCOPE}/listBootstrapData", C.AGENTPOOL_API, body={})
    assert status == 200, body
    return body


def write_private(node, node_path, text, mode=0o600):
    path = node.path(node_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
        f.write(text)
    os.chmod(path, mode)


@pytest.fixture
def token_node(node):
    """The scratch node, configured for bootstrap-token mode: no [auth] at all."""
    return configure(node)


def configure(node):
    from tests import harness

    data = mint_bootstrap_data(node.emu)
    write_private(node, TOKEN_PATH, data["azure"]["bootstrapToken"]["token"] + "\n")
    write_private(node, CLUSTER_CA_PATH, base64.b64decode(data["node"]["kubelet"]["caCertData"]).decode(), 0o644)
    harness.write_config(node.root, node.emu, node.wrapper, extra={
        "join_mode": "bootstrap-token", "bootstrap_token_file": TOKEN_PATH,
        "api_server": "https://" + data["node"]["kubelet"]["clusterFQDN"], "cluster_ca_file": CLUSTER_CA_PATH,
        "kubernetes_version": data["components"]["kubernetes"],
        "auth_method": "", "sp_client_id": "", "sp_client_secret_file": "", "arc_tags": "", "himds_endpoint": ""})
    os.unlink(node.path(harness.SECRET_PATH))  # no Azure credential on this node at all
    node.token = data["azure"]["bootstrapToken"]["token"]
    node.log_mark = len(node.emu.state()["requests"])
    return node


AZURE_PROBES = {("GET", "")}  # preflight's reachability probes of ARM and Entra (method, path without its last /)
# preflight's image-registry probe: the test's pause image lives on the emulator's ARM host.
# Preflight probes each origin once per run, so whether it asks for /v2/ here or for the
# artifacts (the same origin) is the order its checks happen to take.
REGISTRY_PROBE = ("GET", "/v2")


def azure_requests_since(node, probes=False):
    """The node's requests to Azure (ARM, Entra ID, HIMDS) after the fixture minted its token,
    never the image registry's probe (REGISTRY_PROBE; the emulator files it under entra);
    `probes` False leaves out preflight's anonymous reachability probes of ARM and Entra (GET /)."""
    skipped = {REGISTRY_PROBE} | (set() if probes else AZURE_PROBES)
    return [f"{r['server']} {r['method']} {r['path']}" for r in node.emu.state()["requests"][node.log_mark:]
            if r["server"] in AZURE_SERVERS and (r["method"], r["path"].rstrip("/")) not in skipped]


def test_join_status_again_and_unbootstrap_ask_azure_nothing(token_node):
    node, emu = token_node, token_node.emu
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    phases = {p["name"]: p for p in summary["phases"]}
    for arc_only in ("arc", "roles", "rbac-propagation"):
        assert "bootstrap-token mode" in phases[arc_only]["message"]
    assert "bootstrap-token mode" in phases["machine"]["message"]

    # The kubelet created its Node as system:node:NAME with the certificate it got by TLS bootstrap.
    registered = registered_node(emu)
    assert registered["_registeredBy"] == f"system:node:{MACHINE_NAME}"
    assert registered["_authenticatedBy"] == "x509"
    assert [c["status"] for c in registered["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    assert node.mode("/var/lib/kubelet/bootstrap-kubeconfig") == 0o600
    bootstrap = json.loads(node.read("/var/lib/kubelet/bootstrap-kubeconfig"))
    assert bootstrap["users"][0]["user"]["token"] == node.token
    assert token_node.token not in proc.stdout + proc.stderr

    # Status, and a second bootstrap: converged, nothing changes.
    shown = node.cli("status")
    assert shown.returncode == 0, shown.stderr
    proc, again = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert [p["name"] for p in again["phases"] if p["status"] == "changed"] == []

    proc, _checks = node.cli_json("preflight")
    assert proc.returncode == 0, proc.stderr

    # Unbootstrap: our files gone; the Node asked to go as the kubelet, and since a kubelet
    # may not delete its own Node (Kubernetes >= 1.13), left to the cluster, said plainly.
    proc, undone = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stdout
    assert emu.requests(server="apiserver", method="DELETE", path_contains=f"/nodes/{MACHINE_NAME}")
    [left] = [k for k in undone["kept"] if k.startswith(f"Kubernetes node {MACHINE_NAME}")]
    assert "left to the cluster" in left and f"kubectl delete node {MACHINE_NAME}" in left
    assert not os.path.exists(node.path("/var/lib/kubelet"))
    assert not os.path.exists(node.path("/var/lib/aks-flex-node/ledger.json"))
    # The operator's files stay.
    assert os.path.exists(node.path(TOKEN_PATH)) and os.path.exists(node.path(CLUSTER_CA_PATH))

    assert azure_requests_since(node) == []


def _refused_and_untouched(node, proc):
    assert proc.returncode == 4, (proc.stdout, proc.stderr)
    assert f"bootstrap_token_file = '{TOKEN_PATH}'" in proc.stderr
    assert "does not accept this bootstrap token" in proc.stderr and "nothing was changed" in proc.stderr
    assert "kubeadm token create" in proc.stderr  # what to do


def test_an_unknown_token_is_refused_naming_the_file_and_nothing_changes(token_node):
    node = token_node
    write_private(node, TOKEN_PATH, "abcdef.0123456789abcdef\n")  # well formed, minted by nobody
    before = node.files()
    proc = node.cli("bootstrap")
    _refused_and_untouched(node, proc)
    assert "abcdef.0123456789abcdef" not in proc.stdout + proc.stderr
    # Only the run's own record (status.json, the lock) is new: the host is untouched.
    assert {f for f in node.files() - before if not f.startswith("/var/lib/aks-flex-node")} == set()
    assert azure_requests_since(node) == []


def test_an_expired_token_is_refused_but_a_joined_node_does_not_need_it(node):
    """The token only matters while the kubelet has no certificate: once joined, an expired
    token changes nothing; a node that must bootstrap again is told to replace it."""
    node.emu.settings(bootstrap_token_ttl=600.0)
    configure(node)
    proc = node.cli("bootstrap")
    assert proc.returncode == 0, proc.stderr
    node.emu.advance_clock(601)  # the token has expired, in the API server's eyes
    proc, again = node.cli_json("bootstrap")  # the kubelet's certificate is good
    assert proc.returncode == 0, proc.stderr
    for name in os.listdir(node.path("/var/lib/kubelet/pki")):
        os.unlink(os.path.join(node.path("/var/lib/kubelet/pki"), name))
    before = node.files()
    proc = node.cli("bootstrap")
    _refused_and_untouched(node, proc)
    assert {f for f in node.files() - before if not f.startswith("/var/lib/aks-flex-node")} == set()


def test_preflight_asks_azure_nothing_and_checks_the_api_server_with_the_given_ca(token_node):
    node, emu = token_node, token_node.emu
    proc, checks = node.cli_json("preflight")
    assert proc.returncode == 0, proc.stderr
    assert azure_requests_since(node, probes=True) == []
    readyz = [r for r in emu.state()["requests"][node.log_mark:]
              if r["server"] == "apiserver" and r["path"] == "/readyz"]
    assert readyz, "the API server's /readyz was not asked before the join"
    # The CA is the one given: with another, the API server is not trusted.
    write_private(node, CLUSTER_CA_PATH, other_ca_pem(), 0o644)
    proc, checks = node.cli_json("preflight")
    assert proc.returncode == 3, proc.stderr
    [failed] = [c for c in checks["checks"] if c["status"] == "error"]
    assert failed["name"] == "cluster-api" and "certificate verify failed" in failed["message"]


def other_ca_pem():
    """A self-signed CA certificate that signed nothing the emulator serves."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "another-cluster-ca")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()
