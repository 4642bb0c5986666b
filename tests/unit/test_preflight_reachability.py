"""Preflight reachability (azure-endpoints, himds, cluster-api): one dropped connection or
one stall is tried again; what still fails for a transient reason exits 75 (the agent tries
again), what fails for good (refused, TLS that does not verify, a name that does not resolve)
exits 3. Against loopback listeners that misbehave on purpose (the network boundary)."""

import datetime
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from aks_flex_node.steps.preflight import checks as preflight
from aks_flex_node.steps.preflight import reachability
from aks_flex_node.errors import ExitCode
from aks_flex_node.http_policy import DIRECT, HttpPolicy
from tests.emulator import tls
from tests.waiting import connects_to, pauses

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


class Listener:
    """Accepts connections on 127.0.0.1 and treats each as `script` says, in turn: "drop"
    (close without a word), "stall" (read, never answer) or "answer"; the last one repeats."""

    def __init__(self, *script, tls_paths=None):
        self.script = list(script)
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.tls = None
        if tls_paths:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(tls_paths["cert"], tls_paths["key"])
        scheme = "https" if tls_paths else "http"
        self.url = f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            action = self.script[min(self.connections, len(self.script) - 1)]
            self.connections += 1
            try:
                if self.tls:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                if action == "drop":
                    conn.close()
                    continue
                conn.recv(65536)
                if action == "stall":
                    self.held.append(conn)
                    continue
                conn.sendall(ANSWER)
                conn.close()
            except (OSError, ssl.SSLError):
                conn.close()

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def listen():
    made = []

    def make(*script, **kw):
        listener = Listener(*script, **kw)
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.close()


def test_one_dropped_connection_is_tried_again(listen):
    # Fault matrix "entra drop", "himds drop", "apiserver drop": this used to fail preflight.
    server = listen("drop", "answer")
    assert reachability.reachable(server.url, DIRECT, pause=0) is None
    assert server.connections == 2


def test_one_stall_is_tried_again(listen):
    server = listen("stall", "answer")
    assert reachability.reachable(server.url, DIRECT, timeout=0.5, pause=0) is None
    assert server.connections == 2


def test_drops_that_last_are_transient(listen):
    server = listen("drop")
    failure = reachability.reachable(server.url, DIRECT, pause=0)
    assert failure.transient and ("reset" in failure.why or "closed" in failure.why)
    assert server.connections == 2


def test_stalls_that_last_are_transient(listen):
    server = listen("stall")
    failure = reachability.reachable(server.url, DIRECT, timeout=0.3, pause=0)
    assert failure.transient and "timed out" in failure.why


def test_refused_is_definite_and_not_retried(monkeypatch):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    sock.close()  # nothing listens there now
    # Nothing listens, so no listener can count: the connection attempts are counted where
    # they leave this process (socket.connect, the network boundary), the pause by time.sleep.
    attempts = connects_to(monkeypatch, port)
    slept = pauses(monkeypatch)
    failure = reachability.reachable(url, DIRECT, pause=5)
    assert not failure.transient and "refused" in failure.why
    assert len(attempts) == 1 and slept == []  # no pause: not tried again


def test_a_certificate_that_does_not_verify_is_definite(listen, tmp_path):
    _ca, paths = tls.ensure_pki(tmp_path)  # a CA nobody trusts
    server = listen("answer", tls_paths={"cert": str(paths["cert"]), "key": str(paths["key"])})
    failure = reachability.reachable(server.url, DIRECT, pause=5)
    assert not failure.transient
    assert failure.why == ("TLS certificate verify failed against the system's CAs: "
                           "unable to get local issuer certificate")
    assert server.connections == 1


def test_the_emulators_certificates_pass_the_strict_profile(listen, tmp_path):
    """Trusted, the emulator CA's server certificate (shaped as a real CA issues them) passes
    the RFC 5280 checks every context of ours makes (http_policy.verifying_context)."""
    _ca, paths = tls.ensure_pki(tmp_path)
    server = listen("answer", tls_paths={"cert": str(paths["cert"]), "key": str(paths["key"])})
    assert reachability.reachable(server.url, HttpPolicy(ca_bundle=paths["ca"]), pause=5) is None


def test_a_leaf_without_authority_key_id(listen, tmp_path, monkeypatch):
    """A TLS-inspecting proxy's leaf without the Authority Key Identifier (RFC 5280 4.2.1.1),
    on every Python (http_policy's "TLS"): its CA in ca_bundle vouches for it; the same CA
    among the system's (public) CAs does not, and the refusal names them and the reason."""
    ca, paths = tls.ensure_pki(tmp_path)
    cert = x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes())
    key = serialization.load_pem_private_key((tmp_path / "server-key.pem").read_bytes(), password=None)
    now = datetime.datetime.now(datetime.timezone.utc)
    bare = x509.CertificateBuilder(
        issuer_name=cert.issuer, subject_name=cert.subject, public_key=key.public_key(),
        serial_number=x509.random_serial_number(), not_valid_before=now - datetime.timedelta(minutes=5),
        not_valid_after=now + datetime.timedelta(days=1),
        extensions=[e for e in cert.extensions if not isinstance(e.value, x509.AuthorityKeyIdentifier)],
    ).sign(ca.key, hashes.SHA256())
    (tmp_path / "bare.pem").write_bytes(bare.public_bytes(serialization.Encoding.PEM))
    server = listen("answer", tls_paths={"cert": str(tmp_path / "bare.pem"), "key": str(paths["key"])})
    assert reachability.reachable(server.url, HttpPolicy(ca_bundle=paths["ca"]), pause=5) is None
    # OpenSSL's default verify paths (the system's CAs) are read from SSL_CERT_FILE when set.
    monkeypatch.setenv("SSL_CERT_FILE", paths["ca"])
    failure = reachability.reachable(server.url, DIRECT, pause=5)
    assert not failure.transient
    assert failure.why == "TLS certificate verify failed against the system's CAs: Missing Authority Key Identifier"


def test_dns_answers():
    assert not reachability.is_transient(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    assert reachability.is_transient(socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"))


def result(name, transient):
    return preflight.Result(name, preflight.ERROR, f"{name} is unreachable", "check it", transient)


def test_only_transient_failures_exit_75():
    with pytest.raises(preflight.PreflightTransientError) as caught:
        preflight.raise_for([result("azure-endpoints", True), result("himds", True),
                             preflight.Result("os", "pass")])
    assert caught.value.exit_code == ExitCode.TEMPFAIL
    assert "azure-endpoints: azure-endpoints is unreachable" in caught.value.message
    assert "--ignore-preflight-errors=azure-endpoints,himds" in caught.value.remedy


def test_a_definite_failure_among_them_exits_3():
    with pytest.raises(preflight.PreflightError) as caught:
        preflight.raise_for([result("azure-endpoints", True), result("cluster-api", False)])
    assert caught.value.exit_code == ExitCode.PREFLIGHT
    assert not isinstance(caught.value, preflight.PreflightTransientError)
