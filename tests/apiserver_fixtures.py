"""Callers of the kube-apiserver stand-in (tests/emulator/apiserver.py): a client with a
bearer token or a client certificate, a bootstrap token minted the contract's way, the
cluster admin, a CSR and its certificates.k8s.io/v1 object, a node's x509 client, the clock
moved past a client certificate's renewal point. Shared by tests/unit/test_emulator_csr.py,
test_emulator_node_authorizer.py, test_emulator_kubelet.py, tests/integration/test_real_clients.py
and test_agent_pool.py."""

import base64
import datetime
import json
import ssl
import tempfile
import urllib.error
import urllib.request

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.emulator import constants as C

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"


class KubeClient:
    """A caller of one cluster's apiserver stand-in with a bearer token or a client certificate."""

    def __init__(self, emu, token=None, cert=None, server=None):
        self.server = server or emu.apiserver
        self.token = token
        ctx = ssl.create_default_context(cafile=emu.ca_bundle)
        if cert:
            with tempfile.NamedTemporaryFile("wb") as f:
                f.write(cert[0] + b"\n" + cert[1])
                f.flush()
                ctx.load_cert_chain(f.name)
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                  urllib.request.HTTPSHandler(context=ctx))

    def __call__(self, method, path, body=None, content_type="application/json"):
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.server + path, data=data, headers=headers, method=method)
        try:
            with self.opener.open(request, timeout=15) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, json.loads(raw) if raw.startswith(b"{") else raw.decode()


def bootstrap_token(emu):
    """A bootstrap token minted the contract's way: listBootstrapData on the FlexNodes pool."""
    status, _, body = emu.arm_call("POST", f"{C.FLEX_POOL_ID}/listBootstrapData", C.AGENTPOOL_API, {})
    assert status == 200, body
    return body["azure"]["bootstrapToken"]["token"]


def admin_client(emu):
    _, _, creds = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01")
    user = yaml.safe_load(base64.b64decode(creds["kubeconfigs"][0]["value"]))["users"][0]["user"]
    return KubeClient(emu, token=user["token"])


def make_csr(cn="system:node:n1", orgs=("system:nodes",), sans=(), key=None):
    """(csr_pem, key_pem) for an EC P-256 key."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]), critical=False)
    csr = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return csr.public_bytes(serialization.Encoding.PEM), key_pem


def csr_object(csr_pem, name=None, signer=KUBELET_SIGNER, usages=("digital signature", "client auth"), **spec):
    meta = {"name": name} if name else {"generateName": "csr-"}
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": meta,
            "spec": {"request": base64.b64encode(csr_pem).decode(), "signerName": signer, "usages": list(usages),
                     **spec}}


def node_client(emu, node, token=None):
    """A client authenticated by the client certificate of system:node:<node>, obtained through a
    bootstrap-token CSR (auto-approved as nodeclient); returns (client, cert_pem)."""
    boot = KubeClient(emu, token=token or bootstrap_token(emu))
    csr_pem, key_pem = make_csr(f"system:node:{node}")
    status, created = boot("POST", CSRS, csr_object(csr_pem))
    assert status == 201 and created["status"].get("certificate"), created
    cert_pem = base64.b64decode(created["status"]["certificate"])
    return KubeClient(emu, cert=(cert_pem, key_pem)), cert_pem



def advance_past_renewal(emu, kubelet_status):
    """Move the emulator's clock to 95 % of the lifetime of the kubelet's client certificate
    (cert_not_before and cert_not_after of the stand-in's kubelet-status.json): past the
    latest point a kubelet renews it (90 %: client-go util/certificate/certificate_manager.go
    nextRotationDeadline), before it expires. Nothing real is waited for: the 5 % left of
    the lifetime (18 days of a year's certificate) is all a loaded machine needs to be quicker
    than. Returns the seconds advanced."""
    start, end = (datetime.datetime.fromisoformat(kubelet_status[key].replace("Z", "+00:00")).timestamp()
                  for key in ("cert_not_before", "cert_not_after"))
    seconds = start + 0.95 * (end - start) - emu.admin("GET", "clock")["now"]
    assert seconds > 0, f"the kubelet's certificate is already past 95 % of its lifetime: {kubelet_status}"
    emu.advance_clock(seconds)
    return seconds
