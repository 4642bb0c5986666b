"""The node's own view of the cluster: its identity authorized, then its Node Ready.

Both checks use the kubelet's credential path (a HIMDS token for the Arc identity), never an
admin credential: what we check is exactly what the kubelet will be able to do.
"""

import base64
import json
import time

from aks_flex_node.engine.step import ACTIVATE, IDENTITY, Plan, Step
from aks_flex_node.errors import TemporaryError
from aks_flex_node.steps.cluster import LOCAL_PASS
from aks_flex_node.steps.kubelet import KUBECONFIG

# Learn, "Troubleshoot Azure RBAC": role assignment changes can take up to 10 minutes.
RBAC_PROPAGATION_TIMEOUT = 600


def node_token(ctx):
    """The node identity's token for the API server, fetched from HIMDS once per run and
    reused while it has five minutes left (each fetch is a challenge round trip)."""
    from aks_flex_node.azure import himds

    cached = ctx.facts.get("node_token")
    if cached is None or cached.expires_on - time.time() < 300:
        cfg = ctx.config
        cached = himds.get_token(cfg.himds_endpoint, himds.AKS_RESOURCE, cfg.himds_key_dir,
                                 root=str(ctx.host.root))
        ctx.facts.set("node_token", cached)
    return cached.access_token


def kube_client(ctx):
    from aks_flex_node import kube

    return kube.KubeClient(ctx.facts.get("server"), ctx.facts.get("ca_pem"),
                           lambda: node_token(ctx), proxy=ctx.config.https_proxy or None)


def identity_authorized(client, node_name):
    """True when the API server accepts the identity (a 404 for our Node counts), False on 401/403."""
    from aks_flex_node import kube

    try:
        client.get_node(node_name)
        return True
    except (kube.Unauthorized, kube.Forbidden):
        return False


class PropagationStep(Step):
    name = "rbac-propagation"
    help = "wait until the API server accepts the Arc identity (checked, not slept)"
    branch = IDENTITY
    needs = ("roles", "credentials")
    cloud = True

    def check(self, ctx):
        plan = Plan()
        if ctx.local_only:
            return Plan(noop_reason=LOCAL_PASS)
        if not ctx.facts.get("principal_id"):
            plan.add("wait for the role assignments to take effect", "the identity is new",
                     lambda: self._wait(ctx))
            return plan
        client = kube_client(ctx)
        if identity_authorized(client, ctx.config.machine_name):
            plan.noop_reason = "the API server authorizes the node's identity"
            return plan
        plan.add("wait for the role assignments to take effect",
                 "the API server does not authorize the identity yet", lambda: self._wait(ctx))
        return plan

    def _wait(self, ctx, timeout=RBAC_PROPAGATION_TIMEOUT):
        client = kube_client(ctx)
        deadline = time.monotonic() + timeout
        delay = 0.5
        while not identity_authorized(client, ctx.config.machine_name):
            if time.monotonic() >= deadline:
                raise TemporaryError(
                    f"the API server still refuses the node's identity after {timeout} s",
                    remedy="role assignments can take up to 10 minutes; `aks-flex-node "
                    "bootstrap` again resumes here")
            time.sleep(delay)
            delay = min(delay * 2, 10)


class NodeReadyStep(Step):
    name = "node-ready"
    help = "wait until this node is registered and Ready"
    branch = ACTIVATE
    needs = ("services",)
    cloud = True  # its undo deletes the Node object from the cluster

    def check(self, ctx):
        plan = Plan()
        name = ctx.config.machine_name
        # Without an identity (a dry run on a new node) there is nobody to ask as.
        if ctx.facts.get("server") and ctx.facts.get("principal_id"):
            node = kube_client(ctx).get_node(name)
            if node is not None:
                ctx.adopt(self.name, "node", name)
                if _ready(node):
                    plan.noop_reason = f"node {name} is Ready"
                    return plan
        plan.add(f"wait up to {ctx.config.node_ready_timeout} s for node {name} to be Ready",
                 "it is not Ready yet", lambda: self._wait(ctx))
        return plan

    def _wait(self, ctx):
        name = ctx.config.machine_name
        kube_client(ctx).wait_node_ready(name, timeout=ctx.config.node_ready_timeout, interval=1)
        ctx.ledger.record(self.name, "node", name)

    def undo(self, ctx, entries):
        """Delete our Node object, with the node's own identity, while it still has its roles."""
        leftovers = []
        for entry in entries:
            if entry["kind"] != "node":
                continue
            try:
                server, ca_pem = _server_from_kubeconfig(ctx, KUBECONFIG)
                ctx.facts.set("server", server)
                ctx.facts.set("ca_pem", ca_pem)
                kube_client(ctx).delete_node(entry["id"])
                ctx.ledger.forget("node", entry["id"])
            except Exception as exc:
                leftovers.append(f"Kubernetes node {entry['id']}: "
                                 f"{getattr(exc, 'message', None) or exc}")
        return leftovers


def _ready(node):
    for cond in node.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _server_from_kubeconfig(ctx, path):
    raw = ctx.host.read_bytes(path)
    if raw is None:
        raise TemporaryError(f"{path} is gone: the API server is not known")
    doc = json.loads(raw.decode())
    cluster = doc["clusters"][0]["cluster"]
    return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])
