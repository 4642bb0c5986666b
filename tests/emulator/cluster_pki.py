"""A cluster's CA, and certificate rotation as AKS documents it (`az aks rotate-certs`).

Learn, "Certificate rotation in Azure Kubernetes Service (AKS)"
(https://learn.microsoft.com/azure/aks/certificate-rotation): rotation "regenerates" the
cluster CA and every certificate it signed (the API server's, the clients'), nodes are
reimaged, and afterwards "old certificates will stop working": a kubeconfig fetched before
must be fetched again (`az aks get-credentials`). The ARM call is
ManagedClusters_RotateClusterCertificates, `POST .../managedClusters/{name}/rotateClusterCertificates`,
a long-running operation answering 202 with a Location header (or 204)
(azure-rest-api-specs, specification/containerservice/.../aks/stable/2026-08-01/managedClusters.json).

Modelled here, per cluster:
- until a rotation the cluster's CA is the emulator's own (tls.py), so every existing test
  and client keeps the one CA bundle it has;
- a rotation makes a new CA (its own subject, "... cluster CA <n>", so that a certificate names
  which CA signed it), a new API server certificate from it, and forgets the admin identity
  (listClusterAdminCredential mints a new one from the new CA); listClusterUserCredential and
  listBootstrapData carry the new CA data; the CSR signer signs with it;
- the API server's TLS layer still takes a client certificate of any CA the cluster had
  (kube-apiserver only requests one: tls.RequestClientCert), and its x509 authenticator
  answers 401 for one the current CA did not sign (kubeauth.authenticate);
- the rotation is done when the POST answers (202, then the Location monitor says 204 at
  once). Not documented, so not modelled: a window in which old-CA client certificates keep
  working (Learn says only that they stop working), and rotation's node reimage (a flex
  node is not an AKS-managed VM: nothing reimages it; its agent must notice).
Bootstrap tokens are Secrets, not certificates: a rotation leaves them as they are.
"""

import ssl
import tempfile
import threading

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.emulator import tls

_lock = threading.Lock()
_contexts = {}  # (cluster id, CA PEM) -> ssl.SSLContext


def rotation_of(cl):
    """How many times the cluster's certificates were rotated (0: the emulator's CA)."""
    return int((cl.get("pki") or {}).get("rotation", 0))


def ca_of(app, cl):
    """The CertificateAuthority that signs this cluster's certificates now."""
    pki = cl.get("pki")
    if not pki:
        return app.ca
    return tls.CertificateAuthority(
        x509.load_pem_x509_certificate(pki["ca"].encode()),
        serialization.load_pem_private_key(pki["ca_key"].encode(), password=None))


def ca_pem_of(app, cl):
    """The PEM of the cluster's CA: what its kubeconfigs and bootstrap data carry."""
    pki = cl.get("pki")
    return pki["ca"].encode() if pki else app.ca_pem


def issuer_name_of(app, cl):
    """The common name of the cluster CA's subject: the issuer of what it signs now."""
    pki = cl.get("pki")
    cert = x509.load_pem_x509_certificate(pki["ca"].encode()) if pki else app.ca.cert
    return cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value


def rotate(app, cl):
    """`az aks rotate-certs`: a new CA, a new API server certificate, no admin identity."""
    previous = list((cl.get("pki") or {}).get("previous", []))
    previous.append(ca_pem_of(app, cl).decode())
    number = rotation_of(cl) + 1
    ca = tls.new_ca(f"aks-flex-node test emulator cluster CA {number}")
    cert_pem, key_pem = ca.issue("127.0.0.1", server_names=("127.0.0.1", "localhost", "::1"))
    cl["pki"] = {"rotation": number, "ca": ca.pem.decode(), "ca_key": tls.key_pem(ca.key).decode(),
                 "server_cert": cert_pem.decode(), "server_key": key_pem.decode(), "previous": previous}
    cl.pop("admin", None)
    app.state.mark_dirty()


def apiserver_context(app, cluster_id):
    """The TLS server context of the cluster's API server, as its PKI is now (after a reset
    the cluster is back on the emulator's CA)."""
    cl = app.state.cluster(cluster_id)
    pki = (cl or {}).get("pki")
    if not pki:
        return app.apiserver_tls
    key = (cluster_id.lower(), pki["ca"])
    with _lock:
        context = _contexts.get(key)
        if context is None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            # load_cert_chain takes files only: a private temporary file, gone when closed.
            with tempfile.NamedTemporaryFile(dir=app.state_dir, suffix=".pem") as chain:
                chain.write((pki["server_cert"] + pki["server_key"]).encode())
                chain.flush()
                context.load_cert_chain(chain.name)
            # Every CA the cluster had: an old client certificate reaches the authenticator,
            # which refuses it with a 401 (see the module's docstring).
            context.load_verify_locations(cadata="".join([pki["ca"]] + pki["previous"]))
            context.verify_mode = ssl.CERT_OPTIONAL
            context.verify_flags |= tls.NO_CHECK_TIME
            _contexts[key] = context
    return context
