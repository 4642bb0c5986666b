"""Whether a certificate was signed by the cluster's CA: how a full pass tells that the
cluster's certificates were rotated under the kubelet.

`az aks rotate-certs` regenerates the cluster CA and every certificate it signed; afterwards
"old certificates will stop working" (Learn, "Certificate rotation in Azure Kubernetes Service
(AKS)", https://learn.microsoft.com/azure/aks/certificate-rotation). AKS reimages its own
nodes; nothing reimages a flex node, so its full pass reads the CA again (listClusterUserCredential
in Arc mode, listBootstrapData in agent-pool mode) and the kubelet's phase sees a client
certificate the new CA did not sign: the kubelet bootstraps again (steps/kubelet_auth.py).

A rotated CA keeps its name (AKS's is CN=ca before and after), so the name is not enough: the
signature is checked with the CA's public key, as X.509 path validation does (RFC 5280 6.1.3
(a)(1)). cryptography 38 (Debian 12) has no Certificate.verify_directly_issued_by (added in
40), so the two key types a Kubernetes CA has are checked here: RSA with PKCS #1 v1.5 (what
Go's crypto/x509 signs with for an RSA CA) and ECDSA.
"""

import re

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


def certificates_of(pem):
    """The certificates of a PEM bundle (a CA file may hold more than one), unreadable ones
    left out. cryptography 38 has no load_pem_x509_certificates (added in 39)."""
    from cryptography import x509

    out = []
    for block in _PEM_CERT.findall(pem or b""):
        try:
            out.append(x509.load_pem_x509_certificate(block))
        except ValueError:
            continue
    return out


def _signed_by(cert, ca):
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    if cert.issuer != ca.subject:
        return False
    key = ca.public_key()
    try:
        if isinstance(key, rsa.RSAPublicKey):
            key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
        else:
            return True  # a key type no Kubernetes signer uses: the names match, trust that
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def signed_by_any(cert_pem, ca_pem):
    """Whether the first certificate of `cert_pem` was signed by a certificate of the bundle
    `ca_pem`; None when either cannot be read (nothing to judge)."""
    certs, cas = certificates_of(cert_pem), certificates_of(ca_pem)
    if not certs or not cas:
        return None
    return any(_signed_by(certs[0], ca) for ca in cas)
