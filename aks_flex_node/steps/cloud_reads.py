"""One shared cloud read per run (issue 30): the reads of a full pass that do not depend on
one another's answers go at once, and each step or check takes the answer instead of reading
again.

Before this, a converged Arc-mode run read the cloud as its steps came: preflight's
arc-identity check read the Arc machine, then the cluster phase the cluster, the permissions
and the user credential, then the arc phase the machine again, then the roles phase the role
assignments, then rbac-propagation and node-ready the Node, each twice-over: twelve round
trips, each waiting on the one before (make bench, the WAN converged re-run). Their real
dependencies are few: a token for ARM (Entra's discovery document, then the token), then
the cluster, both permission reads, the user credential, the machine and the role
assignments of the principal the last join recorded, all at once (start_assignments); and
the Node, as the node, from the kubeconfig the kubelet uses.

So the runner calls each step's `prefetch` once the run set is known (engine/runner.py), and
a step's prefetch starts the reads its check will ask for (`start_*`), each on a thread of
its own; its check then takes the answer (`machine(ctx)` and the like: what was started,
else read now, so a --phase run or a check run on its own reads for itself as before). A
read changes nothing, so starting it before preflight has passed changes nothing either;
what fails is raised where it was before, in the step or check that asks for the answer,
with the same error: a read's error is kept with its answer. A read nobody asks for (the run
stopped in preflight) is left to finish on its own thread, which never holds the process up
(a daemon thread). The answers live in this run's memory only: nothing is written to disk,
and every operator run reads the cluster and the permissions again.

Nothing is started:
- on a node that has not joined yet (the ledger's `joined` is empty): a first join, which
  the agent retries while it is pending, asks Azure nothing until preflight has passed, as
  before; a fleet of pending nodes retrying would otherwise spend ARM's read budget (per
  principal and per subscription: Learn, "Understand how Azure Resource Manager throttles
  requests") on joins that stop in preflight. A join waits far longer on other things;
- in a `--sequential` run (one step at a time, each reading for itself: the upstream
  agent's way, kept for comparison), nor in a local pass (full_pass_only steps, run_if);
- when preflight's proxy check would refuse the run's proxy settings: no request goes
  through a proxy the run refuses (steps/preflight/checks.py check_proxy says why).

The SDK clients are shared by the threads: Azure SDK clients are thread-safe ("Thread
safety" in the Azure SDK for Python design guidelines: "DO ensure that all client methods are
thread-safe", https://azure.github.io/azure-sdk/python_design.html#thread-safety), and
clients.py builds each client once under a lock.
"""

import concurrent.futures
import threading

from aks_flex_node.http_policy import ProxySettingError

ARM_TOKEN, CLUSTER, PERMISSIONS, USER_CREDENTIAL = "arm-token", "cluster", "permissions", "user-credential"
# The SDK clients, each built (its package imported) while the token is on its way
# (_client), one after the other, smallest first: imports on two threads at once only take
# turns at the interpreter's lock, and each client's reads leave as soon as it is built.
HYBRIDCOMPUTE, CONTAINERSERVICE, AUTHORIZATION = "sdk-hybridcompute", "sdk-containerservice", "sdk-authorization"
MACHINE, ASSIGNMENTS, NODE = "arc-machine", "role-assignments", "node"


class CloudReads:
    """The reads one run has started: name -> Future of (the answer, or the error it raised)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._started = {}

    def start(self, name, read, after=()):
        """Start `read(*answers of the reads named in after)` on a thread of its own, unless
        `name` was started already; its Future. A read whose `after` failed fails with that
        error (whoever asks for it asks for the one before it first, so it is raised there)."""
        with self._lock:
            future = self._started.get(name)
            if future is not None:
                return future
            future = concurrent.futures.Future()
            self._started[name] = future
            before = [self._started[n] for n in after]

        def run():
            try:
                future.set_result(read(*[b.result() for b in before]))
            except BaseException as err:  # kept with the answer; raised in whoever asks
                future.set_exception(err)

        threading.Thread(target=run, name=f"cloud-read-{name}", daemon=True).start()
        return future

    def started(self, name):
        with self._lock:
            return name in self._started

    def answer(self, name, read):
        """The answer of the read `name` (its error raised here), or `read()` now when it was
        not started."""
        with self._lock:
            future = self._started.get(name)
        return read() if future is None else future.result()


def _reads(ctx):
    """This run's CloudReads, or None when nothing may be started (see the module's docstring)."""
    reads = getattr(ctx, "reads", None)
    if reads is None or ctx.local_only or ctx.ledger is None or not ctx.ledger.joined:
        return None
    try:
        policy = ctx.http_policy
        policy.check_for_azcmagent()
        policy.environment_file(ctx.config.cluster_domain)
    except (ProxySettingError, ValueError):
        return None  # preflight's proxy check refuses it; every step reads for itself (or not at all)
    return reads


# ---- the reads ----------------------------------------------------------------------------------


def _arm_token(ctx):
    from aks_flex_node.azure import auth

    cfg = ctx.config
    # The operator's token first: reads at once would each ask Entra for one. (The Azure
    # CLI credential keeps no token: each client runs `az` once anyway.)
    if cfg.auth_method != "azure-cli":
        auth.arm_token(ctx.azure.credential, cfg.endpoints.arm_scope)


def _client(ctx, name):
    """Build the SDK client(s) of `name` (see HYBRIDCOMPUTE), importing its package: otherwise
    each read's thread builds its own once the token is in, and the reads leave one after the
    other instead of at once. What fails here fails again in the read."""
    cfg = ctx.config
    try:
        clients = ctx.azure.clients
        if name == HYBRIDCOMPUTE:
            clients.hybridcompute(cfg.subscription_id).machines  # noqa: B018 (built on first use)
        elif name == CONTAINERSERVICE:
            clients.containerservice(cfg.cluster.subscription_id).managed_clusters  # noqa: B018
        else:
            clients.authorization(cfg.cluster.subscription_id).permissions  # noqa: B018
            clients.authorization(cfg.subscription_id).permissions  # noqa: B018
    except Exception:
        pass


def _cluster(ctx):
    from aks_flex_node.azure import aks

    return aks.get_cluster(ctx.azure.clients, ctx.config.cluster)


def _permissions(ctx):
    from aks_flex_node.azure import permissions

    cfg = ctx.config
    permissions.require_join_permissions(ctx.azure.clients, cfg.cluster, cfg.subscription_id, cfg.arc_resource_group)


def _user_credential(ctx):
    from aks_flex_node.azure import aks

    return aks.server_and_ca(ctx.azure.clients, ctx.config.cluster)


def _machine(ctx):
    from aks_flex_node.azure import arc

    cfg = ctx.config
    return arc.get_machine(ctx.azure.clients, cfg.subscription_id, cfg.arc_resource_group, cfg.machine_name)


def _assignments(ctx, principal, scopes):
    """(principal, {scope: [Assignment]}): the role assignments of `principal` at each scope."""
    from aks_flex_node.azure import rbac

    return principal, {scope: rbac.assignments_for(ctx.azure.clients, scope, principal) for scope in scopes}


# ---- what the steps start ---------------------------------------------------------------------


def start_token(ctx):
    """The operator's ARM token, first of all: the root of every ARM read. Its credential is
    made here, before the run's first step (the SDK's import is most of it), so that Entra's
    discovery request is the run's first: a check's request that ended before it began would
    be one more link in the chain the run waits on (tests/request_chains.py)."""
    reads = _reads(ctx)
    if reads is not None and not reads.started(ARM_TOKEN):
        try:
            ctx.azure  # noqa: B018 (made now, on this thread: see above)
        except Exception:  # the token's read raises it again, in the step that asks
            pass
        reads.start(ARM_TOKEN, lambda: _arm_token(ctx))
        reads.start(HYBRIDCOMPUTE, lambda: _client(ctx, HYBRIDCOMPUTE))
        reads.start(CONTAINERSERVICE, lambda *_: _client(ctx, CONTAINERSERVICE), after=(HYBRIDCOMPUTE,))
        reads.start(AUTHORIZATION, lambda *_: _client(ctx, AUTHORIZATION), after=(CONTAINERSERVICE,))
    return reads


def start_cluster(ctx):
    """The cluster phase's reads: the cluster, the operator's permissions, the user credential."""
    reads = start_token(ctx)
    if reads is not None:
        reads.start(CLUSTER, lambda *_: _cluster(ctx), after=(ARM_TOKEN, CONTAINERSERVICE))
        reads.start(PERMISSIONS, lambda *_: _permissions(ctx), after=(ARM_TOKEN, AUTHORIZATION))
        reads.start(USER_CREDENTIAL, lambda *_: _user_credential(ctx), after=(ARM_TOKEN, CONTAINERSERVICE))


def start_machine(ctx):
    """The Arc machine of our machine name (preflight's arc-identity check and the arc phase)."""
    reads = start_token(ctx)
    if reads is not None:
        reads.start(MACHINE, lambda *_: _machine(ctx), after=(ARM_TOKEN, HYBRIDCOMPUTE))


def start_assignments(ctx, scopes):
    """The role assignments of the machine's principal at `scopes`: beside the machine's
    read, for the principal the last full run recorded (the ledger's joined facts), else as
    soon as the machine is read (None when it has no identity yet: the roles phase then has
    nothing to read). The recorded principal is the machine's unless its identity was made
    again since; the roles phase compares it with the machine's (`assignments`) and reads
    again for the machine's when they differ. So a converged run waits on one ARM answer
    after its token, not two (make bench: 60 ms of the WAN profile's converged re-run)."""
    start_machine(ctx)
    reads = _reads(ctx)
    if reads is not None:
        scopes = tuple(sorted(set(scopes)))
        recorded = (ctx.ledger.joined.get("facts") or {}).get("principal_id")
        if recorded:
            reads.start(ASSIGNMENTS, lambda *_: _assignments(ctx, recorded, scopes), after=(ARM_TOKEN, AUTHORIZATION))
        else:
            reads.start(ASSIGNMENTS, lambda machine: _assignments(ctx, machine.principal_id, scopes)
                        if machine is not None and machine.principal_id else None, after=(MACHINE,))


def start_node(ctx, read):
    """The Node as the node (`read()`: steps/node.py), from the kubeconfig the kubelet uses."""
    reads = _reads(ctx)
    if reads is not None:
        reads.start(NODE, read)


# ---- what the checks ask --------------------------------------------------------------------


def _answer(ctx, name, read):
    reads = getattr(ctx, "reads", None)
    return read() if reads is None else reads.answer(name, read)


def started(ctx, name):
    """Whether this run's shared read has started `name`."""
    reads = getattr(ctx, "reads", None)
    return reads is not None and reads.started(name)


def cluster(ctx):
    return _answer(ctx, CLUSTER, lambda: _cluster(ctx))


def permissions(ctx):
    return _answer(ctx, PERMISSIONS, lambda: _permissions(ctx))


def user_credential(ctx):
    return _answer(ctx, USER_CREDENTIAL, lambda: _user_credential(ctx))


def machine(ctx):
    return _answer(ctx, MACHINE, lambda: _machine(ctx))


def assignments(ctx, principal, scope):
    """The role assignments of `principal` at `scope`: the started read's when it read them
    for that principal, else read now."""
    reads = getattr(ctx, "reads", None)
    if reads is not None and reads.started(ASSIGNMENTS):
        found = reads.answer(ASSIGNMENTS, lambda: None)
        if found is not None and found[0] == principal and scope in found[1]:
            return found[1][scope]
    return _assignments(ctx, principal, (scope,))[1][scope]


def node(ctx):
    """The started Node read's answer, or None when none was started (the caller reads)."""
    return _answer(ctx, NODE, lambda: None) if started(ctx, NODE) else None
