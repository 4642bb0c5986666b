"""The node's own view of the cluster: its identity authorized, then its Node Ready.

Both checks use the kubelet's credential path (steps/kubelet_auth.py: a HIMDS token for the
Arc identity, the kubelet's own certificate in the TLS bootstrap modes), never an admin
credential: what we check is exactly what the kubelet will be able to do.
"""

import dataclasses
from typing import Optional

from aks_flex_node import kube
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.engine.step import ACTIVATE, IDENTITY, Plan, Step, restart
from aks_flex_node.engine.undo import Leftover
from aks_flex_node.errors import FlexNodeError, TemporaryError
from aks_flex_node.kube import drain
from aks_flex_node.steps import cloud_reads, kubelet_auth, kubernetes
from aks_flex_node.steps.arc import ArcModeOnly
from aks_flex_node.steps.kinds import Kind

# Learn, "Troubleshoot Azure RBAC": role assignment changes can take up to 10 minutes.
RBAC_PROPAGATION_TIMEOUT = 600


def kube_client(ctx):
    """A client as the node, as its join mode's kubelet authenticates (steps/kubelet_auth.py)."""
    return kubelet_auth.for_mode(ctx.mode).client(ctx)


def identity_authorized(client, node_name):
    """True when the API server accepts the identity (a 404 for our Node counts), False on 401/403."""
    try:
        client.get_node(node_name)
        return True
    except (kube.Unauthorized, kube.Forbidden):
        return False


@dataclasses.dataclass(frozen=True)
class NodeSeen:
    """The Node as the node read it at the start of a full pass (steps/cloud_reads.py): from
    the API server `server` its kubelet's kubeconfig names, trusting `ca_pem`; `refused`
    when the API server refused the identity (401/403: `error`), `error` too when the read
    failed otherwise."""

    server: str
    ca_pem: bytes
    node: Optional[dict]
    refused: bool = False
    error: Optional[FlexNodeError] = None


def read_node_seen(ctx):
    """NodeSeen, or None when this node has no kubeconfig yet (a first join)."""
    auth = kubelet_auth.for_mode(ctx.mode)
    try:
        server, ca_pem = kubelet_auth.api_server_of(ctx.host, auth)
    except FlexNodeError:
        return None
    try:
        client = auth.kubelets_client_of(ctx, server, ca_pem)  # as the kubelet asks (its token, or certificate)
        return NodeSeen(server, ca_pem, client.get_node(ctx.config.machine_name))
    except (kube.Unauthorized, kube.Forbidden) as err:
        return NodeSeen(server, ca_pem, None, refused=True, error=err)
    except FlexNodeError as err:
        return NodeSeen(server, ca_pem, None, error=err)


def node_seen(ctx):
    """The run's shared Node read when nothing has changed since it was made (ctx.applied: an
    arc phase that reconnected would have changed the identity under it) and it asked the API
    server and CA the credentials phase found (ctx.data.server, ca_pem); else None: the
    caller reads for itself."""
    if ctx.applied or ctx.data.server is None:
        return None
    seen = cloud_reads.node(ctx)
    if seen is None or (seen.server, seen.ca_pem) != (ctx.data.server, ctx.data.ca_pem):
        return None
    return seen


def start_node_read(ctx):
    cloud_reads.start_node(ctx, lambda: read_node_seen(ctx))


class PropagationStep(ArcModeOnly, Step):
    name = "rbac-propagation"
    help = "wait until the API server accepts the Arc identity (checked, not slept)"
    branch = IDENTITY
    needs = ("roles", "credentials")
    full_pass_only = True

    def prefetch(self, ctx):
        start_node_read(ctx)

    def check(self, ctx):
        plan = Plan()
        if not ctx.data.principal_id:
            plan.add("wait for the role assignments to take effect", "the identity is new",
                     lambda: self._wait(ctx))
            return plan
        seen = node_seen(ctx)  # the run's shared read of the Node, as the node
        if seen is not None and seen.error is not None and not seen.refused:
            raise seen.error
        authorized = (not seen.refused) if seen is not None else identity_authorized(
            kube_client(ctx), ctx.config.machine_name)
        if authorized:
            plan.noop_reason = "the API server authorizes the node's identity"
            return plan
        plan.add("wait for the role assignments to take effect",
                 "the API server does not authorize the identity yet", lambda: self._wait(ctx))
        return plan

    def _wait(self, ctx, timeout=RBAC_PROPAGATION_TIMEOUT):
        # Every 0.25 s for the first 5 s (an assignment that takes effect at once is seen
        # within a quarter second: this wait is on the join's critical path), then from 1 s
        # doubling to 10 s: a fleet of nodes waiting minutes asks the API server little.
        client = kube_client(ctx)
        kube.poll_fast_then_slow(
            lambda: (identity_authorized(client, ctx.config.machine_name), None), timeout,
            give_up=lambda _: TemporaryError(
                f"the API server still refuses the node's identity after {timeout} s",
                remedy="role assignments can take up to 10 minutes; `aks-flex-node "
                "bootstrap` again resumes here"),
            fast_delay=0.25, fast_for=5.0, slow_delay=1.0, slow_max=10.0)


class NodeReadyStep(Step):
    name = "node-ready"
    help = "wait until this node is registered and Ready"
    branch = ACTIVATE
    # After a kubelet upgrade (which itself waits for Ready at the new version, or switches back).
    needs = ("services", "kubelet-upgrade")
    cloud = True  # its undo deletes the Node object from the cluster

    def prefetch(self, ctx):
        start_node_read(ctx)

    def check(self, ctx):
        plan = Plan()
        name = ctx.config.machine_name
        auth = kubelet_auth.for_mode(ctx.mode)
        # Without an identity (a dry run on a new node) there is nobody to ask as.
        if ctx.data.server and auth.has_identity(ctx):
            # Read at the start of the run with rbac-propagation's (steps/cloud_reads.py) when
            # nothing has changed since; else now.
            seen = node_seen(ctx)
            if seen is not None and seen.error is not None:
                raise seen.error
            node = seen.node if seen is not None else auth.client(ctx).get_node(name)
            ctx.data.node_read = node
            if node is not None:
                ctx.adopt(self.name, Kind.NODE, name, **auth.record)
                if kube.is_ready(node):
                    plan.noop_reason = f"node {name} is Ready"
                    return plan
            elif ctx.options.released and kubernetes.node_registered(ctx):
                # The pool's operation deleted the Node; a kubelet registers its Node once, at
                # start (kubernetes/kubernetes pkg/kubelet/kubelet_node_status.go
                # registerWithAPIServer): one that had nothing else to change is restarted.
                plan.add(f"restart the kubelet so that it registers node {name} again, then wait up to "
                         f"{ctx.config.node_ready_timeout} s for it to be Ready",
                         "the pool's operation deleted the Node", lambda: self._register_again(ctx))
                return plan
            elif ctx.mode is JoinMode.AGENT_POOL and ctx.options.agent and kubernetes.node_registered(ctx):
                # Deleted while this pass ran: in a pool, that is how the pool's operation
                # releases a node (pool_follow.py). Waiting here would hold the release for
                # node_ready_timeout; the agent's next pass reads the Machine and acts.
                plan.noop_reason = (f"node {name} is not registered (deleted by the cluster: a pool's operation "
                                    "releases a node so); the agent's next pass reads its Machine")
                return plan
        plan.add(f"wait up to {ctx.config.node_ready_timeout} s for node {name} to be Ready",
                 "it is not Ready yet", lambda: self._wait(ctx))
        return plan

    def _wait(self, ctx):
        name, timeout = ctx.config.machine_name, ctx.config.node_ready_timeout
        auth = kubelet_auth.for_mode(ctx.mode)
        ctx.data.node_read = _wait_ready(ctx, name, timeout, auth)
        ctx.ledger.record(self.name, Kind.NODE, name, **auth.record)

    def _register_again(self, ctx):
        ctx.ledger.owe([restart("kubelet", "its Node was deleted by the pool's operation")])
        ctx.host.systemd.restart("kubelet")
        ctx.ledger.settle("restart", "kubelet")
        self._wait(ctx)

    def plan_undo(self, ctx, entries):
        plan = Plan()
        for entry in entries:
            if entry["kind"] == Kind.NODE:
                drain_timeout = ctx.options.drain_timeout
                first = ("" if drain_timeout is None else
                         f"cordon and drain (up to {drain_timeout:g} s), then ")
                plan.add(f"{first}delete Kubernetes node {entry['id']}",
                         f"registered by this node; the {self.name} phase recorded it",
                         lambda e=entry: self._delete(ctx, e))
        return plan

    @staticmethod
    def _delete(ctx, entry):
        """With the node's own identity: in Arc mode while it still has its roles (the roles
        phase is undone after this one); in the TLS bootstrap modes with the kubelet's client
        certificate, which a cluster may refuse: the Node authorizer's rules have not let a
        kubelet delete Node objects since Kubernetes 1.13 (kubernetes/kubernetes#71021;
        kubernetes.io/docs/reference/access-authn-authz/node/). Then the Node is left to the
        cluster, and the report says so and what an admin runs."""
        name, auth = entry["id"], kubelet_auth.for_record(entry)
        ctx.data.server, ctx.data.ca_pem = kubelet_auth.api_server_of(ctx.host, auth)
        client = auth.client(ctx)
        if ctx.options.drain_timeout is not None:
            # Before the delete: a deleted Node's pods go by garbage collection, asking no
            # PodDisruptionBudget (kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/).
            # A drain that cannot finish raises, and the Node stays (a leftover saying why).
            # The node's own identity may: the Node authorizer lets a node patch its Node and
            # evict the pods bound to it (pods/eviction is in its rules).
            drain.cordon_and_drain(client, name, timeout=ctx.options.drain_timeout)
        try:
            client.delete_node(name)
        except kube.Forbidden:
            if auth is not kubelet_auth.TLS_BOOTSTRAP:
                raise
            ctx.ledger.forget(Kind.NODE, name)  # nothing more this node can do
            return [Leftover(
                f"Kubernetes node {name}",
                "left to the cluster: its kubelet may not delete its own Node (the Node authorizer "
                "refused, 403); the Node turns NotReady once the kubelet stops, and a cluster admin "
                f"removes it: kubectl delete node {name}", kept=True)]
        ctx.ledger.forget(Kind.NODE, name)
        return []


def _wait_ready(ctx, name, timeout, auth):
    """Wait for the Node to be Ready, asking as `auth` says the node does."""
    return kube.wait_node_ready(auth.ready_client(ctx), name, timeout,
                                remedy=f"check `journalctl -u kubelet`{auth.where} and `aks-flex-node status`")
