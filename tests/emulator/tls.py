"""A throwaway CA and the certificates the emulator serves, kept in the state directory.

Generated once per state directory and reused, so a restarted emulator keeps the CA the
clients already trust (and startup stays fast). EC P-256 keys: quick to generate.

Two clocks. The CA and the server certificate are judged by the clients, on this machine's
time, and dated by it. Client certificates are judged by the emulator (kubeauth.py) on its
injectable clock (clock.py): those signed for CSRs are dated by that clock (`sign_csr(now=)`),
and the apiserver's TLS handshake checks their chain but not their dates (`NO_CHECK_TIME`),
so that a certificate issued after a test moved the clock, or one the clock moved past,
reaches kubeauth, which answers 401 for an expired one as the real kube-apiserver does.
"""

import datetime
import ipaddress
import os
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
SERVER_CERT_FILE = "server.pem"
SERVER_KEY_FILE = "server-key.pem"

_VALIDITY = datetime.timedelta(days=3650)

# OpenSSL's X509_V_FLAG_NO_CHECK_TIME (include/openssl/x509_vfy.h, 1.1.0 and later): verify a
# chain without checking its dates. Python's ssl passes unnamed verify flags through.
NO_CHECK_TIME = 0x200000


def _now(timestamp=None):
    """A naive UTC datetime (what cryptography's builder takes): this machine's time, or the
    given seconds since the epoch (the emulator's clock)."""
    if timestamp is None:
        return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).replace(tzinfo=None)


def _write_private(path, data):
    """Write key material readable by the owner only (0600) from the first byte on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def key_pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


class CertificateAuthority:
    """The emulator CA: signs the server certificate and client certificates on demand."""

    def __init__(self, cert, key):
        self.cert = cert
        self.key = key

    @property
    def pem(self):
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def _identify(self, builder):
        """The Authority Key Identifier (RFC 5280 4.2.1.1: this CA's key identifier) that every
        certificate a CA issues carries; Python 3.13's VERIFY_X509_STRICT refuses one without
        it. Go's crypto/x509, which AKS's and kube-controller-manager's signers use, copies it
        from the CA's Subject Key Identifier and gives a leaf no identifier of its own: so here."""
        return builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(self.cert.public_key()), critical=False)

    def issue(self, common_name, *, org=None, server_names=(), client=False):
        """Sign a leaf certificate valid for ten years from five minutes ago, by this machine's
        time; returns (cert_pem, key_pem). Good on the emulator's clock too, for a client
        certificate (the cluster admin's): that clock is never behind this machine's."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, org))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        builder = self._identify(builder)
        if server_names:
            alt = []
            for n in server_names:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(n)))
                except ValueError:
                    alt.append(x509.DNSName(n))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        usage = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)

    def sign_csr(self, csr, *, now, lifetime, key_usages, extended_usages, backdate=datetime.timedelta(0)):
        """Sign a PKCS#10 request (a cryptography CertificateSigningRequest whose signature the
        caller has checked) as kube-controller-manager's local signer does
        (kubernetes/kubernetes pkg/controller/certificates/authority/authority.go and policies.go,
        PermissiveSigningPolicy): the request's subject and public key, the request's SANs, the
        given usages, not a CA, NotBefore = now - backdate, NotAfter = NotBefore + backdate + lifetime
        capped at the CA's own NotAfter; `now` is seconds since the epoch (the emulator's clock).
        `key_usages` are x509.KeyUsage keyword names set to True (digital_signature,
        key_encipherment); `extended_usages` are ExtendedKeyUsageOIDs. Returns the certificate PEM."""
        now = _now(now)
        not_before = now - backdate
        not_after = min(now + lifetime, self.cert.not_valid_after)
        flags = {name: name in key_usages for name in (
            "digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
            "key_agreement", "key_cert_sign", "crl_sign")}
        builder = (
            x509.CertificateBuilder()
            .subject_name(csr.subject)
            .issuer_name(self.cert.subject)
            .public_key(csr.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        builder = self._identify(builder)
        if any(flags.values()):
            builder = builder.add_extension(x509.KeyUsage(**flags, encipher_only=False, decipher_only=False),
                                            critical=True)
        if extended_usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(list(extended_usages)), critical=False)
        try:
            sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            builder = builder.add_extension(sans.value, critical=False)
        except x509.ExtensionNotFound:
            pass
        return builder.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def new_ca(common_name="aks-flex-node test emulator CA"):
    """A new self-signed CA (a cluster's after a rotation has a name of its own: cluster_pki.py)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    subject = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        # RFC 5280 4.2.1.2: a CA's certificate carries a Subject Key Identifier (the strict
        # verification of Python 3.13 refuses a CA without one); what it issues names it.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(cert, key)


def ensure_pki(state_dir):
    """Load or create the CA and the 127.0.0.1/localhost server certificate in state_dir.

    Returns (ca, paths) where paths has "ca", "cert" and "key".
    """
    state_dir = pathlib.Path(state_dir)
    ca_path = state_dir / CA_FILE
    ca_key_path = state_dir / CA_KEY_FILE
    cert_path = state_dir / SERVER_CERT_FILE
    key_path = state_dir / SERVER_KEY_FILE
    if ca_path.exists() and ca_key_path.exists():
        ca = CertificateAuthority(
            x509.load_pem_x509_certificate(ca_path.read_bytes()),
            serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None),
        )
    else:
        ca = new_ca()
        _write_private(ca_key_path, key_pem(ca.key))
        ca_path.write_bytes(ca.pem)
        ca_path.chmod(0o644)
        cert_path.unlink(missing_ok=True)
    if not (cert_path.exists() and key_path.exists()):
        # login.microsoftonline.com: the public authority's name, which the suite routes here on an
        # azure-identity that accepts only Entra ID's own hosts (tests/sitehook/emulator_routes.py).
        cert_pem, server_key = ca.issue("127.0.0.1", server_names=("127.0.0.1", "localhost", "::1",
                                                                   "login.microsoftonline.com"))
        _write_private(key_path, server_key)
        cert_path.write_bytes(cert_pem)
    return ca, {"ca": str(ca_path), "cert": str(cert_path), "key": str(key_path)}
