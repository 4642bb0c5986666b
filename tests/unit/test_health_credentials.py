"""health/credentials.py: each credential's lifetime read from real PEM files under a
scratch root (certificates made here with python3-cryptography); absent is absent, a
malformed file is unknown with why, and a private key beside a certificate is never parsed."""

import datetime
import os

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aks_flex_node.health.credentials import CredentialKind, Found, lifetimes
from aks_flex_node.host import Host
from tests.config_fixtures import load, make_root, secret_file, sp, with_values

UTC = datetime.timezone.utc
SOON = datetime.datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC)
LATER = datetime.datetime(2030, 6, 7, 8, 9, 10, tzinfo=UTC)


def certificate(not_after, name="test"):
    """A self-signed certificate PEM and its key's PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(datetime.datetime(2020, 1, 1, tzinfo=UTC)).not_valid_after(not_after)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def put(root, node_path, data, mode=0o644):
    path = root / node_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def by_kind(found):
    return {lifetime.kind: lifetime for lifetime in found}


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def test_arc_node_reports_the_cluster_ca_and_no_kubelet_certificate(root):
    put(root, "/etc/kubernetes/certs/ca.crt", certificate(LATER)[0])
    found = by_kind(lifetimes(Host(root), load(root, with_values())))
    assert set(found) == {CredentialKind.KUBELET_CLIENT_CERTIFICATE, CredentialKind.CLUSTER_CA}
    ca = found[CredentialKind.CLUSTER_CA]
    assert (ca.found, ca.not_after, ca.expiry_seconds, ca.renewable) == (
        Found.KNOWN, LATER, int(LATER.timestamp()), True)
    assert ca.source == "/etc/kubernetes/certs/ca.crt"
    assert found[CredentialKind.KUBELET_CLIENT_CERTIFICATE].found is Found.ABSENT
    assert found[CredentialKind.KUBELET_CLIENT_CERTIFICATE].expiry_seconds is None


def test_a_ca_bundle_during_rotation_lasts_as_long_as_its_longest_lived_ca(root):
    put(root, "/etc/kubernetes/certs/ca.crt", certificate(SOON)[0] + certificate(LATER)[0])
    found = by_kind(lifetimes(Host(root), load(root, with_values())))
    assert found[CredentialKind.CLUSTER_CA].not_after == LATER


def test_kubelet_client_certificate_with_its_key_in_the_same_file(root):
    cert, key = certificate(SOON, "system:node:edge-node-01")
    put(root, "/var/lib/kubelet/pki/kubelet-client-current.pem", cert + key, mode=0o600)
    token = secret_file(root, "abcdef.0123456789abcdef\n", name="bootstrap-token")
    put(root, "/etc/aks-flex-node/cluster-ca.pem", certificate(LATER)[0])
    cfg = load(root, with_values(join_mode="bootstrap-token", bootstrap_token_file=token,
                                 api_server="https://10.0.0.1", cluster_ca_file="/etc/aks-flex-node/cluster-ca.pem"))
    found = by_kind(lifetimes(Host(root), cfg))
    kubelet = found[CredentialKind.KUBELET_CLIENT_CERTIFICATE]
    assert (kubelet.found, kubelet.not_after, kubelet.renewable) == (Found.KNOWN, SOON, True)
    # The operator's CA and token: nothing on the node renews them. The CA reported is the
    # one the kubelet trusts, not yet written by a bootstrap here.
    assert found[CredentialKind.CLUSTER_CA].renewable is False
    assert found[CredentialKind.CLUSTER_CA].found is Found.ABSENT
    bootstrap = found[CredentialKind.BOOTSTRAP_TOKEN]
    assert (bootstrap.found, bootstrap.not_after, bootstrap.renewable, bootstrap.source) == (
        Found.UNKNOWN, None, False, token)
    assert "abcdef" not in repr(found)  # the token is never read


def test_service_principal_certificate_is_read_without_its_key(root):
    """The SP's PEM holds the key first: only the CERTIFICATE block is parsed. A key block
    that is garbage proves it: parsing it would fail the whole file."""
    cert, _ = certificate(SOON, "sp")
    bogus_key = b"-----BEGIN PRIVATE KEY-----\nTk9UIEEgS0VZ\n-----END PRIVATE KEY-----\n"
    path = "/etc/aks-flex-node/sp.pem"
    put(root, path, bogus_key + cert, mode=0o600)
    found = by_kind(lifetimes(Host(root), load(root, sp(sp_certificate_file=path))))
    spc = found[CredentialKind.SERVICE_PRINCIPAL_CERTIFICATE]
    assert (spc.found, spc.not_after, spc.renewable, spc.source) == (Found.KNOWN, SOON, False, path)
    assert "TK9UIEEgS0VZ".lower() not in repr(spc).lower()


@pytest.mark.parametrize("content, why", [
    (b"not a certificate at all\n", "no CERTIFICATE"),
    (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "does not parse"),
])
def test_a_malformed_file_is_unknown_with_why(root, content, why):
    put(root, "/etc/kubernetes/certs/ca.crt", content)
    ca = by_kind(lifetimes(Host(root), load(root, with_values())))[CredentialKind.CLUSTER_CA]
    assert (ca.found, ca.not_after) == (Found.UNKNOWN, None)
    assert why in ca.why and "/etc/kubernetes/certs/ca.crt" in ca.why


def test_a_link_or_fifo_is_unknown_never_followed_or_waited_on(root):
    target = root / "elsewhere.pem"
    target.write_bytes(certificate(LATER)[0])
    (root / "etc/kubernetes/certs").mkdir(parents=True)
    os.symlink(target, root / "etc/kubernetes/certs/ca.crt")
    (root / "var/lib/kubelet/pki").mkdir(parents=True)
    os.mkfifo(root / "var/lib/kubelet/pki/kubelet-client-current.pem")
    found = by_kind(lifetimes(Host(root), load(root, with_values())))
    assert found[CredentialKind.CLUSTER_CA].found is Found.UNKNOWN
    assert found[CredentialKind.KUBELET_CLIENT_CERTIFICATE].found is Found.UNKNOWN


def test_agent_pool_token_is_the_bootstrap_kubeconfigs_and_renewable(root):
    cfg = load(root, sp(join_mode="agent-pool", agent_pool="flex",
                        sp_client_secret_file=secret_file(root)))
    bootstrap = by_kind(lifetimes(Host(root), cfg))[CredentialKind.BOOTSTRAP_TOKEN]
    assert (bootstrap.found, bootstrap.renewable, bootstrap.source) == (
        Found.ABSENT, True, "/var/lib/kubelet/bootstrap-kubeconfig")
    put(root, "/var/lib/kubelet/bootstrap-kubeconfig", b"{}", mode=0o600)
    bootstrap = by_kind(lifetimes(Host(root), cfg))[CredentialKind.BOOTSTRAP_TOKEN]
    assert bootstrap.found is Found.UNKNOWN and bootstrap.why
