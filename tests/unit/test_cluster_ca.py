"""steps/cluster_ca.py and the kubelet's side of a CA rotation (steps/kubelet_auth.py): a
client certificate is judged by the CA's signature, not its name (AKS's CA is CN=ca before and
after `az aks rotate-certs`), with RSA and EC CAs; real PEM files under a scratch root."""

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from aks_flex_node.host import Host
from aks_flex_node.steps import cluster_ca, kubelet_auth
from aks_flex_node.steps.kubelet_paths import KUBELET_CLIENT_CERT

UTC = datetime.timezone.utc
NOW = datetime.datetime.now(UTC)


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(kind):
    """A CA named CN=ca, as AKS names every one of its cluster CAs."""
    key = rsa.generate_private_key(65537, 2048) if kind == "rsa" else ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("ca")).issuer_name(_name("ca"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(NOW - datetime.timedelta(days=1)).not_valid_after(NOW + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def client_cert(ca):
    """A kubelet client certificate (with its key after it, as kubelet-client-current.pem)."""
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("system:node:n1")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(NOW - datetime.timedelta(hours=1)).not_valid_after(NOW + datetime.timedelta(days=365))
            .sign(ca_key, hashes.SHA256()))
    return _pem(cert) + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_a_certificate_is_judged_by_the_signature_not_the_name(kind):
    old, new = make_ca(kind), make_ca(kind)
    leaf = client_cert(old)
    assert cluster_ca.signed_by_any(leaf, _pem(old[0])) is True
    assert cluster_ca.signed_by_any(leaf, _pem(new[0])) is False  # same name, another key
    assert cluster_ca.signed_by_any(leaf, _pem(new[0]) + _pem(old[0])) is True  # a bundle with both


def test_nothing_to_judge_is_none():
    ca = make_ca("ec")
    assert cluster_ca.signed_by_any(b"", _pem(ca[0])) is None
    assert cluster_ca.signed_by_any(client_cert(ca), b"not a PEM") is None
    assert cluster_ca.signed_by_any(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                                    _pem(ca[0])) is None


def test_a_kubelet_certificate_of_the_old_ca_needs_a_token(tmp_path):
    old, new = make_ca("rsa"), make_ca("rsa")
    path = tmp_path / KUBELET_CLIENT_CERT.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_bytes(client_cert(old))
    path.chmod(0o600)
    host = Host(tmp_path)
    # A year left: by its dates alone no token is needed.
    assert not kubelet_auth.token_needed(host)
    assert not kubelet_auth.token_needed(host, _pem(old[0]))
    assert not kubelet_auth.client_cert_stale(host, _pem(old[0]))
    # After a rotation the CA is another: the kubelet must bootstrap again.
    assert kubelet_auth.client_cert_stale(host, _pem(new[0]))
    assert kubelet_auth.token_needed(host, _pem(new[0]))
    # No certificate: not stale (there is nothing to replace), but a token is needed.
    path.unlink()
    assert not kubelet_auth.client_cert_stale(host, _pem(new[0]))
    assert kubelet_auth.token_needed(host, _pem(new[0]))
