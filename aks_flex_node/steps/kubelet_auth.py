"""How the kubelet, and this node when it asks the API server itself, authenticate: one
object per mechanism, chosen once from the join mode (`for_mode`) or from a ledger record
(`for_record`), so that no step asks which mode it is in.

- ExecPlugin (Arc mode): the kubeconfig names `aks-flex-node token`, which fetches a short
  lived Entra token for the Arc identity from HIMDS on each refresh; nothing secret is
  written (the upstream agent, Azure/AKSFlexNode v0.0.10 pkg/components/kubelet/, wrote a
  token.sh script with the service principal's secret in it, mode 0755). The node asks as
  that identity.
- TlsBootstrap (agent-pool and bootstrap-token modes;
  kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/): a bootstrap
  kubeconfig (0600: it holds the bootstrap token) is written only while the kubelet has no
  client certificate that will last; the kubelet makes its key, has its CSR signed, writes
  its own kubeconfig and certificate under /var/lib/kubelet and renews the certificate
  itself (rotateCertificates). The node asks with that certificate.
"""

import base64
import datetime
import json
import time

from aks_flex_node import cached_token, kube
from aks_flex_node.azure import himds
from aks_flex_node.errors import FlexNodeError, TemporaryError
from aks_flex_node.steps import cluster_ca, tracked
from aks_flex_node.steps.kinds import Kind
from aks_flex_node.steps.kubelet_paths import (
    BOOTSTRAP_KUBECONFIG, CA_PATH, CERT_DIR, KUBECONFIG, KUBELET_CLIENT_CERT, restart_kubelet)

EXEC_API_VERSION = "client.authentication.k8s.io/v1"
# The kubelet renews its certificate at 70-90 % of its life (client-go's certificate
# manager, k8s.io/client-go/util/certificate/certificate_manager.go nextRotationDeadline);
# one that has under this many seconds left when we look will not make it.
CERT_MARGIN = 300
# How undo must ask to delete the Node: the ledger's node record says, whatever the config
# says by then (a `credential` field; none: the Arc identity).
KUBELET_CERT_CREDENTIAL = "kubelet-client-certificate"
# A HIMDS token is fetched again when it has less than this left (each fetch is a
# challenge round trip).
TOKEN_MARGIN = 300


def _kubeconfig(cluster, server, ca_pem, user_name, user, context):
    """JSON is YAML: the kubelet reads it, and we need no YAML emitter."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user_name}}],
        "current-context": context,
    }
    return (json.dumps(doc, indent=2) + "\n").encode()


def kubeconfig(cfg, server, ca_pem, root):
    """The kubelet's kubeconfig in Arc mode: the exec credential plugin."""
    exec_config = {
        "apiVersion": EXEC_API_VERSION,
        "command": cfg.exec_plugin_command,
        "args": ["token"],
        "env": None,
        "provideClusterInfo": False,
        # Required with client.authentication.k8s.io/v1 (kubernetes.io/docs/reference/
        # access-authn-authz/authentication/#client-go-credential-plugins); the kubelet has no TTY.
        "interactiveMode": "Never",
    }
    if str(root) != "/":
        exec_config["env"] = [{"name": "AKS_FLEX_NODE_ROOT", "value": str(root)}]
    return _kubeconfig(cfg.cluster.name, server, ca_pem, "aks-flex-node", {"exec": exec_config},
                       context=cfg.cluster.name)


def bootstrap_kubeconfig(cfg, server, ca_pem, token):
    """The kubelet's bootstrap kubeconfig: the bootstrap token as a static bearer token."""
    return _kubeconfig(cfg.cluster.name, server, ca_pem, "kubelet-bootstrap", {"token": token},
                       context="bootstrap")


def bootstrap_token_of(host):
    """The token in the bootstrap kubeconfig we wrote, or None when there is none we can read
    (the file is ours and rewritten whenever a token is needed, so anything odd is "none")."""
    raw = host.read_bytes(BOOTSTRAP_KUBECONFIG)
    if raw is None:
        return None
    try:
        token = json.loads(raw.decode("utf-8"))["users"][0]["user"]["token"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return token if isinstance(token, str) and token else None


def client_cert_expiry(host):
    """When the kubelet's client certificate expires (an aware datetime), or None when
    there is none we can read."""
    raw = host.read_bytes(KUBELET_CLIENT_CERT)
    if not raw:
        return None
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(raw)
    except ValueError:
        return None
    expiry = getattr(cert, "not_valid_after_utc", None)  # cryptography >= 42
    if expiry is None:
        expiry = cert.not_valid_after.replace(tzinfo=datetime.timezone.utc)
    return expiry


def client_cert_stale(host, ca_pem):
    """Whether the kubelet holds a client certificate that the cluster CA `ca_pem` did not
    sign: the cluster's certificates were rotated under it (steps/cluster_ca.py). False
    when there is no certificate or no CA to judge by."""
    if not ca_pem:
        return False
    return cluster_ca.signed_by_any(host.read_bytes(KUBELET_CLIENT_CERT), ca_pem) is False


def token_needed(host, ca_pem=None):
    """Whether the kubelet needs a bootstrap token: it has no client certificate that
    will last until it renews it itself, or one the cluster CA `ca_pem` (when known) did
    not sign."""
    expiry = client_cert_expiry(host)
    now = datetime.datetime.now(datetime.timezone.utc)
    return expiry is None or (expiry - now).total_seconds() < CERT_MARGIN or client_cert_stale(host, ca_pem)


def _forget_kubelet_credential(ctx):
    """The kubelet's own kubeconfig and the link to its current certificate: with neither,
    it bootstraps again (pkg/kubelet/certificate/bootstrap/bootstrap.go LoadClientCert uses a
    still-valid kubeconfig, else a still-valid kubelet-client-current.pem, before it asks for
    a new certificate). The kubelet's older certificate files stay, as its store keeps them.
    An Arc-mode kubeconfig of ours goes through the ledger instead (plan_files)."""
    if not ctx.ledger.has(Kind.FILE, KUBECONFIG):
        ctx.host.remove(KUBECONFIG)
    ctx.host.remove(KUBELET_CLIENT_CERT)


def node_token(ctx):
    """The node identity's token for the API server, fetched from HIMDS once per run and
    reused while it has TOKEN_MARGIN seconds left."""
    cached = ctx.data.node_token
    if cached is None or cached.expires_on - time.time() < TOKEN_MARGIN:
        cfg = ctx.config
        cached = himds.get_token(cfg.himds_endpoint, himds.AKS_RESOURCE, cfg.himds_key_dir,
                                 root=str(ctx.host.root))
        ctx.data.node_token = cached
    return cached.access_token


def kubelets_token(ctx):
    """The token the kubelet holds now: the cache `aks-flex-node token` keeps for it (read
    only, by its own reader, cached_token.read: a file we wrote, read carefully, its entry
    checked as HIMDS's answer is) while it has TOKEN_MARGIN seconds left, else node_token's. Asking with it asks
    exactly as the kubelet does, and costs no HIMDS exchange (two round trips, each one more
    link in the chain a converged run waits on: issue 30). Only for what a run reads before
    it changes anything: a run that reconnects the Arc agent changes the identity under it."""
    now = time.time()
    found = cached_token.read(cached_token.cache_path(ctx.host.root), himds.AKS_RESOURCE, now)
    if found is not None and found.expires_on - now >= TOKEN_MARGIN:
        return found.access_token
    return node_token(ctx)


def _plan_ca(ctx, plan, step, kubeconfig_path):
    """The cluster CA the kubelet trusts; False (and a plan to write it with `kubeconfig_path`
    later) while the API server is not known yet."""
    if ctx.data.server is None:
        plan.add(f"write {kubeconfig_path} and {CA_PATH}", "the API server is not known yet",
                 owes=restart_kubelet(kubeconfig_path))
        return False
    tracked.plan_file(ctx, plan, step, CA_PATH, ctx.data.ca_pem, 0o644,
                      why="the cluster CA", owes=restart_kubelet(CA_PATH))
    return True


class ExecPlugin:
    """Arc mode: the Arc identity's Entra token, through `aks-flex-node token`."""

    rotates_certificates = False
    kubeconfigs = (KUBECONFIG,)  # where the kubelet's API server is written
    record = {}  # what a node record of ours carries
    kubelet_args = ()
    # Where the kubelet is looked for when it does not become Ready.
    where = " on this machine"

    def plan_files(self, ctx, plan, step):
        """The cluster CA and the exec-plugin kubeconfig."""
        data = ctx.data
        if not _plan_ca(ctx, plan, step, KUBECONFIG):
            return
        tracked.plan_file(ctx, plan, step, KUBECONFIG, kubeconfig(ctx.config, data.server, data.ca_pem, ctx.host.root),
                          0o600, why="the kubelet's credentials come from `aks-flex-node token`",
                          owes=restart_kubelet(KUBECONFIG))

    def has_identity(self, ctx):
        """Whether there is an identity to ask the API server as (a dry run on a new node
        has none)."""
        return bool(ctx.data.principal_id)

    def client(self, ctx):
        return self.client_of(ctx, ctx.data.server, ctx.data.ca_pem)

    def client_of(self, ctx, server, ca_pem):
        """As the node, of the API server `server` (a preflight knows it before ctx.data does)."""
        return kube.KubeClient(server, ca_pem, lambda: node_token(ctx), policy=ctx.http_policy)

    def kubelets_client_of(self, ctx, server, ca_pem):
        """As the kubelet asks now: with the token it holds (kubelets_token)."""
        return kube.KubeClient(server, ca_pem, lambda: kubelets_token(ctx), policy=ctx.http_policy)

    def ready_client(self, ctx):
        """A factory of clients for waiting on Ready: one client serves every attempt."""
        shared = self.client(ctx)
        return lambda: shared


class TlsBootstrap:
    """The agent-pool and bootstrap-token modes: a bootstrap token, then the kubelet's own
    client certificate."""

    rotates_certificates = True
    # The bootstrap kubeconfig first: the kubelet writes its own kubeconfig in YAML.
    kubeconfigs = (BOOTSTRAP_KUBECONFIG, KUBECONFIG)
    record = {"credential": KUBELET_CERT_CREDENTIAL}
    kubelet_args = (f"--bootstrap-kubeconfig={BOOTSTRAP_KUBECONFIG}", f"--cert-dir={CERT_DIR}")
    where = " (TLS bootstrap: its CSR, its certificate)"

    def plan_files(self, ctx, plan, step):
        """The cluster CA, no Arc-mode kubeconfig of ours, and the bootstrap kubeconfig
        while the kubelet needs a token."""
        data = ctx.data
        if not _plan_ca(ctx, plan, step, BOOTSTRAP_KUBECONFIG):
            return
        if ctx.ledger.has(Kind.FILE, KUBECONFIG):
            # Ours from Arc mode (an exec-plugin kubeconfig): the kubelet would use it
            # instead of bootstrapping.
            plan.add(f"remove {KUBECONFIG}", "the Arc mode's kubeconfig; this mode joins by TLS bootstrap",
                     lambda: tracked.forget_file(ctx, KUBECONFIG), owes=restart_kubelet(KUBECONFIG))
        if client_cert_stale(ctx.host, data.ca_pem):
            plan.add(f"remove the kubelet's {KUBECONFIG} and {KUBELET_CLIENT_CERT}",
                     "its client certificate is not signed by the cluster's CA (the cluster's certificates "
                     "were rotated): it joins again by TLS bootstrap",
                     lambda: _forget_kubelet_credential(ctx), owes=restart_kubelet(KUBELET_CLIENT_CERT))
        if not token_needed(ctx.host, data.ca_pem):
            return  # the kubelet has a good certificate and renews it: no token is needed
        if data.bootstrap_token is None:
            plan.add_unknown(f"the kubelet's bootstrap token ({BOOTSTRAP_KUBECONFIG})",
                             "the kubelet has no valid client certificate, and a local pass asks "
                             "the pool for no token: the next full pass does")
            return
        tracked.plan_file(ctx, plan, step, BOOTSTRAP_KUBECONFIG,
                          bootstrap_kubeconfig(ctx.config, data.server, data.ca_pem, data.bootstrap_token), 0o600,
                          why="the kubelet has no client certificate that will last: it joins by TLS bootstrap",
                          owes=restart_kubelet(BOOTSTRAP_KUBECONFIG))

    def has_identity(self, ctx):
        return client_cert_expiry(ctx.host) is not None

    def client(self, ctx):
        """As the kubelet, with its client certificate (TemporaryError until it has one)."""
        return self.client_of(ctx, ctx.data.server, ctx.data.ca_pem)

    def client_of(self, ctx, server, ca_pem):
        """As the kubelet, of the API server `server` (a preflight knows it before ctx.data does)."""
        return kube.KubeClient(server, ca_pem, policy=ctx.http_policy,
                               client_cert=str(ctx.host.path(KUBELET_CLIENT_CERT)))

    kubelets_client_of = client_of  # the kubelet's own certificate, as it asks now

    def ready_client(self, ctx):
        """A client per attempt: the certificate appears (TLS bootstrap) and changes
        (rotation) while we wait."""
        return lambda: self.client(ctx)


EXEC_PLUGIN = ExecPlugin()
TLS_BOOTSTRAP = TlsBootstrap()


def for_mode(mode):
    """The mechanism of join mode `mode` (config/joinmode.py): the one place a mode is
    mapped to how the kubelet authenticates."""
    return TLS_BOOTSTRAP if mode.tls_bootstrap else EXEC_PLUGIN


def for_record(entry):
    """The mechanism a node record of the ledger was made with."""
    return TLS_BOOTSTRAP if entry.get("credential") == KUBELET_CERT_CREDENTIAL else EXEC_PLUGIN


def api_server_of(host, auth):
    """(server URL, CA PEM) from the kubeconfig `auth` has the kubelet use (the bootstrap
    kubeconfig we wrote, else the kubelet's own, which the kubelet writes in YAML);
    TemporaryError when none is there (the API server is then not known on this node)."""
    import yaml

    for path in auth.kubeconfigs:
        raw = host.read_bytes(path)
        if raw is None:
            continue
        try:
            cluster = yaml.safe_load(raw.decode("utf-8"))["clusters"][0]["cluster"]
            return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])
        except (ValueError, KeyError, IndexError, TypeError, yaml.YAMLError) as err:
            raise FlexNodeError(f"{path} is not a kubeconfig with a server and its CA ({err})",
                                remedy="aks-flex-node bootstrap writes it again")
    raise TemporaryError(f"{' and '.join(auth.kubeconfigs)}: gone: the API server is not known")
