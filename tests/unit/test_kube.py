"""KubeClient against a loopback TLS apiserver stand-in (the HTTP boundary)."""

import datetime
import http.server
import ipaddress
import json
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aks_flex_node import kube
from aks_flex_node.errors import ExitCode, TemporaryError


def make_ca_and_server_cert(tmp_path, key_identifiers=True):
    """A throwaway cluster CA and an apiserver certificate for 127.0.0.1 / localhost, shaped
    as kubeadm's (and AKS's) are: Go's crypto/x509 gives the CA a Subject Key Identifier and
    copies it into what it signs as the Authority Key Identifier (RFC 5280 4.2.1.1, 4.2.1.2),
    basicConstraints critical on the CA, keyUsage critical on both (kubeadm's pkiutil,
    client-go's cert.NewSelfSignedCACert). `key_identifiers=False`: neither identifier, as a
    CA made by Go before 1.15 (or by hand) is; Python 3.13's default context refuses those."""
    now = datetime.datetime.now(datetime.timezone.utc)

    def usage(cert_sign):
        return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                             data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
                             crl_sign=False, encipher_only=False, decipher_only=False)

    def build(subject, issuer, public_key, signing_key, ca, sans=None):
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(usage(cert_sign=ca), critical=True)
        )
        if key_identifiers and ca:
            builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        if key_identifiers and not ca:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()), critical=False)
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        return builder.sign(signing_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    ca_cert = build(ca_name, ca_name, ca_key.public_key(), ca_key, True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = build(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apiserver")]),
        ca_name,
        key.public_key(),
        ca_key,
        False,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    cert_file, key_file = tmp_path / "server.crt", tmp_path / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_cert.public_bytes(serialization.Encoding.PEM), cert_file, key_file


class ApiserverStandIn:
    """Nodes in a dict; tokens in `allowed` get 200s, tokens in `forbidden` get 403s."""

    def __init__(self, tmp_path, key_identifiers=True):
        self.ca_pem, cert_file, key_file = make_ca_and_server_cert(tmp_path, key_identifiers)
        self.nodes = {}
        self.allowed = {"good"}
        self.forbidden = set()
        self.requests = []
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _auth(self):
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                standin.requests.append((self.command, self.path, token))
                if token in standin.forbidden:
                    self._reply(403, {"kind": "Status", "message": 'nodes "n1" is forbidden: User "x" cannot get resource'})
                    return False
                if token not in standin.allowed:
                    self._reply(401, {"kind": "Status", "message": "Unauthorized"})
                    return False
                return True

            def _name(self):
                prefix = "/api/v1/nodes/"
                return self.path[len(prefix):] if self.path.startswith(prefix) else None

            def do_GET(self):
                if not self._auth():
                    return
                node = standin.nodes.get(self._name())
                if node is None:
                    return self._reply(404, {"kind": "Status", "reason": "NotFound"})
                self._reply(200, node)

            def do_DELETE(self):
                if not self._auth():
                    return
                node = standin.nodes.pop(self._name(), None)
                if node is None:
                    return self._reply(404, {"kind": "Status", "reason": "NotFound"})
                self._reply(200, node)

            def _reply(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def add_node(self, name, ready):
        self.nodes[name] = {
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletNotReady", "message": "PLEG is not healthy"}]},
        }

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def apiserver(tmp_path):
    standin = ApiserverStandIn(tmp_path)
    yield standin
    if standin.thread.is_alive():
        standin.close()


def client(apiserver, token="good"):
    return kube.KubeClient(apiserver.url, apiserver.ca_pem, lambda: token, timeout=5)


def test_get_node_and_absent(apiserver):
    apiserver.add_node("n1", ready=True)
    c = client(apiserver)
    assert c.get_node("n1")["metadata"]["name"] == "n1"
    assert c.get_node("n2") is None
    assert apiserver.requests[0] == ("GET", "/api/v1/nodes/n1", "good")


def test_node_ready(apiserver):
    apiserver.add_node("up", ready=True)
    apiserver.add_node("down", ready=False)
    c = client(apiserver)
    assert c.node_ready("up") is True
    assert c.node_ready("down") is False
    assert c.node_ready("absent") is None


def test_delete_node(apiserver):
    apiserver.add_node("n1", ready=True)
    c = client(apiserver)
    assert c.delete_node("n1") is True
    assert "n1" not in apiserver.nodes
    assert c.delete_node("n1") is False


def test_401_and_403_are_typed(apiserver):
    apiserver.forbidden.add("not-yet")
    with pytest.raises(kube.Forbidden, match="403") as forbidden:
        client(apiserver, "not-yet").get_node("n1")
    assert forbidden.value.exit_code == ExitCode.AUTH
    assert "propagat" in forbidden.value.remedy
    with pytest.raises(kube.Unauthorized, match="401"):
        client(apiserver, "stranger").delete_node("n1")


def test_token_provider_is_called_per_request(apiserver):
    tokens = iter(["not-yet", "good"])
    apiserver.forbidden.add("not-yet")
    apiserver.add_node("n1", ready=True)
    c = kube.KubeClient(apiserver.url, apiserver.ca_pem, lambda: next(tokens))
    with pytest.raises(kube.Forbidden):
        c.get_node("n1")
    assert c.get_node("n1") is not None


def test_wait_node_ready_sees_forbidden_then_ready(apiserver):
    """403 while RBAC propagates, then the kubelet registers and turns Ready."""
    apiserver.forbidden.add("good")
    apiserver.allowed.add("good")
    polls = []

    def sleep(seconds):
        polls.append(seconds)
        if len(polls) == 2:
            apiserver.forbidden.clear()  # propagated
            apiserver.add_node("n1", ready=False)
        if len(polls) == 3:
            apiserver.add_node("n1", ready=True)

    c = client(apiserver)
    node = kube.wait_node_ready(lambda: c, "n1", timeout=60, sleep=sleep)
    assert node["status"]["conditions"][0]["status"] == "True"
    assert len(polls) == 3


def test_wait_node_ready_times_out_with_what_was_last_seen(apiserver):
    apiserver.add_node("n1", ready=False)
    c = client(apiserver)
    with pytest.raises(TemporaryError, match="not Ready after 0.5s; last seen: Node Ready=False \\(KubeletNotReady"):
        kube.wait_node_ready(lambda: c, "n1", timeout=0.5)


def test_wrong_ca_is_refused_not_retried(apiserver, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    other_ca, _, _ = make_ca_and_server_cert(other)
    c = kube.KubeClient(apiserver.url, other_ca, lambda: "good", timeout=5)
    with pytest.raises(kube.KubeError) as caught:
        c.get_node("n1")
    assert not isinstance(caught.value, TemporaryError)
    assert caught.value.code == "apiserver-tls-untrusted" and apiserver.url in caught.value.message


def test_a_cluster_ca_without_key_identifiers_is_trusted_on_every_python(tmp_path):
    """A cluster CA Go made before 1.15 has no Subject Key Identifier, nor do the apiserver
    certificates it signed carry an Authority Key Identifier: the kubelet trusts them, and
    so do we, on Python 3.13 as on 3.11 (a CA we were given is verified without
    VERIFY_X509_STRICT: http_policy's "TLS"). The chain and the host name still count
    (test_wrong_ca_is_refused_not_retried)."""
    standin = ApiserverStandIn(tmp_path, key_identifiers=False)
    standin.add_node("n1", ready=True)
    try:
        node = kube.KubeClient(standin.url, standin.ca_pem, lambda: "good", timeout=5).get_node("n1")
    finally:
        standin.close()
    assert node["metadata"]["name"] == "n1"


def test_nothing_listening_is_temporary(apiserver):
    url = apiserver.url
    apiserver.close()
    with pytest.raises(TemporaryError) as caught:
        kube.KubeClient(url, apiserver.ca_pem, lambda: "good", timeout=5).get_node("n1")
    assert caught.value.code == "apiserver-unreachable" and url in caught.value.message


def test_bad_inputs_name_the_field(apiserver):
    with pytest.raises(kube.KubeError, match="server = 'http://x'"):
        kube.KubeClient("http://x", apiserver.ca_pem, lambda: "t")
    with pytest.raises(kube.KubeError, match="certificate-authority-data"):
        kube.KubeClient(apiserver.url, b"not a cert", lambda: "t")
    with pytest.raises(kube.KubeError, match="node name = 'a/b'"):
        client(apiserver).get_node("a/b")


def test_the_run_policy_decides_the_proxy_for_the_apiserver(apiserver, monkeypatch):
    """The policy's proxy is used (nothing listens there: unreachable); with the host in
    no_proxy the call is direct; the environment's proxy variables are never read."""
    import socket

    from aks_flex_node.errors import TemporaryError
    from aks_flex_node.http_policy import HttpPolicy

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    apiserver.add_node("n1", ready=True)
    proxied = kube.KubeClient(apiserver.url, apiserver.ca_pem, lambda: "good", timeout=5,
                              policy=HttpPolicy(https_proxy=dead))
    with pytest.raises(TemporaryError) as caught:
        proxied.get_node("n1")
    assert caught.value.code == "apiserver-unreachable"
    monkeypatch.setenv("https_proxy", dead)
    monkeypatch.setenv("HTTPS_PROXY", dead)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    direct = kube.KubeClient(apiserver.url, apiserver.ca_pem, lambda: "good", timeout=5,
                             policy=HttpPolicy(https_proxy=dead, no_proxy=("127.0.0.0/8",)))
    assert direct.get_node("n1")["metadata"]["name"] == "n1"
