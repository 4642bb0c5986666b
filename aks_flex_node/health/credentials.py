"""The node's credential lifetimes, as plain data: when each credential the node lives by
stops working, and whether anything on the node renews it before then.

What is read, and how:
- every file through the host door's careful read (no link followed, no FIFO waited on,
  a regular file, at most MAX_PEM bytes);
- of a PEM file only its CERTIFICATE blocks (RFC 7468, section 5) are handed to the X.509
  parser: the service principal's file and the kubelet's kubelet-client-current.pem also
  hold a private key, which is never parsed, kept or shown;
- a file that is not there is ABSENT, one that cannot be read or parsed is UNKNOWN with
  why (never a traceback): an operator is told what is known, nothing is guessed.

A bootstrap token's expiry lives in its Secret, kube-system/bootstrap-token-<id>, field
`expiration` (Kubernetes, "Authenticating with Bootstrap Tokens"), which the node may not
read: the token is reported present with its expiry UNKNOWN, never with an invented one.
"""

import dataclasses
import datetime

from aks_flex_node import x509_validity
from aks_flex_node.host import careful_read
from aks_flex_node.steps.kubelet_paths import BOOTSTRAP_KUBECONFIG, CA_PATH, KUBELET_CLIENT_CERT
from aks_flex_node.words import WordEnum

# A certificate chain or CA bundle is a few KiB; this is far above any real one.
MAX_PEM = 256 * 1024



class CredentialKind(WordEnum):
    """The credentials a node lives by; the words are the metrics' `credential` label."""
    KUBELET_CLIENT_CERTIFICATE = "kubelet-client-certificate"
    CLUSTER_CA = "cluster-ca"
    SERVICE_PRINCIPAL_CERTIFICATE = "service-principal-certificate"
    BOOTSTRAP_TOKEN = "bootstrap-token"


class Found(WordEnum):
    KNOWN = "known"      # present, and its expiry read
    ABSENT = "absent"    # not on this node (not this join mode's, not yet issued, removed)
    UNKNOWN = "unknown"  # present, but its expiry cannot be told (`why` says why)


@dataclasses.dataclass(frozen=True)
class Lifetime:
    """One credential: `kind`, where it was looked for (`source`, a node path), what was
    found, its expiry (`not_after`, an aware UTC datetime, only when KNOWN), whether the
    node renews it without an operator (`renewable`), and `why` when UNKNOWN."""
    kind: CredentialKind
    source: str
    found: Found
    not_after: datetime.datetime = None
    renewable: bool = False
    why: str = ""

    @property
    def expiry_seconds(self):
        """`not_after` as Unix seconds, or None when not KNOWN."""
        return None if self.not_after is None else int(self.not_after.timestamp())


def lifetimes(host, config):
    """The lifetimes of the credentials this node's configuration uses, in a fixed order."""
    mode = config.mode
    found = [
        # TLS bootstrap modes: the kubelet rotates its own client certificate
        # (rotateCertificates, steps/kubelet_auth.py); in Arc mode there is none.
        _certificate(host, CredentialKind.KUBELET_CLIENT_CERTIFICATE, KUBELET_CLIENT_CERT,
                     renewable=mode.tls_bootstrap, pick=_first),
        # The CA the kubelet trusts. A bundle during a CA rotation holds the old and the new
        # CA: trust lasts as long as its longest-lived certificate. A full pass writes it
        # again from what AKS answers unless the operator gave cluster_ca_file.
        _certificate(host, CredentialKind.CLUSTER_CA, CA_PATH,
                     renewable=mode.asks_azure and not config.is_set("cluster_ca_file"), pick=_latest),
    ]
    if config.is_set("sp_certificate_file"):
        # Entra ID certificates are renewed by whoever owns the application, never by us.
        found.append(_certificate(host, CredentialKind.SERVICE_PRINCIPAL_CERTIFICATE,
                                  config.sp_certificate_file, renewable=False, pick=_first))
    if mode.tls_bootstrap:
        found.append(_bootstrap_token(host, config))
    return found


def _bootstrap_token(host, config):
    """Whether a bootstrap token is on the node; its expiry is not known here (module doc).
    Only its presence is looked at: the token itself is never read."""
    if config.is_set("bootstrap_token_file"):
        source, renewable = config.bootstrap_token_file, False  # the operator's token
    else:
        # agent-pool: the token AKS mints (listBootstrapData), asked again when the kubelet
        # needs one (steps/agentpool.py); it sits in the bootstrap kubeconfig meanwhile.
        source, renewable = BOOTSTRAP_KUBECONFIG, True
    if host.lstat(source) is None:
        return Lifetime(CredentialKind.BOOTSTRAP_TOKEN, source, Found.ABSENT, renewable=renewable)
    return Lifetime(CredentialKind.BOOTSTRAP_TOKEN, source, Found.UNKNOWN, renewable=renewable,
                    why="a bootstrap token's expiry is in its Secret in kube-system, which the node cannot read")


def _certificate(host, kind, source, *, renewable, pick):
    """The expiry of the certificate in PEM file `source` that `pick` chooses."""
    def unknown(why):
        return Lifetime(kind, source, Found.UNKNOWN, renewable=renewable, why=why)

    try:
        data = host.read_carefully(source, MAX_PEM)
    except careful_read.Unsafe as unsafe:
        if unsafe.code == "absent":
            return Lifetime(kind, source, Found.ABSENT, renewable=renewable)
        return unknown(f"{source}: {unsafe.why}")
    blocks = x509_validity.certificate_blocks(data)
    if not blocks:
        return unknown(f"{source}: no CERTIFICATE PEM block in it")
    expiries = []
    for number, block in enumerate(blocks, 1):
        try:
            # The standard library's reading, not python3-cryptography's: every agent pass
            # reports these, and importing cryptography was a quarter of a local pass's CPU
            # (x509_validity.py).
            expiries.append(x509_validity.not_after(block))
        except ValueError:
            return unknown(f"{source}: certificate {number} of {len(blocks)} does not parse as X.509")
    return Lifetime(kind, source, Found.KNOWN, not_after=pick(expiries), renewable=renewable)


def _first(expiries):
    """A leaf certificate comes first in its file (a chain after it, RFC 8446 4.4.2's order)."""
    return expiries[0]


def _latest(expiries):
    return max(expiries)
