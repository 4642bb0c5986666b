"""The agent-pool and bootstrap-token join modes: where the node's facts and its bootstrap
token come from, the API server check, and the Machine in the pool.

In agent-pool mode the node's own identity (the [auth] credential) asks the pool for its
bootstrap data (AKS preview API 2026-05-02-preview, AgentPools_ListBootstrapData): the
Kubernetes, containerd, runc and CNI versions, the DNS service IP, max pods, labels,
taints, the API server and its CA, and a bootstrap token the kubelet joins with by TLS
bootstrap (kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/).
Keys the operator set in the configuration win over the pool's values (labels and taints
are merged, the operator's winning per key); `config show` says which is which.

In bootstrap-token mode nothing is asked of Azure: the token, the API server and its CA
come from the configuration (the upstream agent's bootstrap-token configs).

A token is minted by every listBootstrapData call, so it is only asked for when the kubelet
needs one (no client certificate, or an expired one) and the token it was given is gone or
no longer accepted by the API server, or when an operator runs bootstrap; the agent's
periodic full passes reuse the facts recorded by the last full run, and a local pass that
finds a token needed fails, so that the agent's next pass is a full one. A token the
operator gave (bootstrap_token_file) is checked against the API server before anything on
the host changes. The token is kept in memory and in the 0600 bootstrap kubeconfig only,
never in the ledger.
"""

from aks_flex_node import kube
from aks_flex_node.config.cluster_ref import parse_cluster_id
from aks_flex_node.config.joinmode import TLS_BOOTSTRAP, JoinMode
from aks_flex_node.engine.step import CREDENTIALS, IDENTITY, Plan, Step
from aks_flex_node.engine.undo import Leftover
from aks_flex_node.errors import AuthError, FlexNodeError, TemporaryError
from aks_flex_node.steps import machine_goal
from aks_flex_node.steps.kinds import Kind, open_ledger
from aks_flex_node.steps.kubelet_auth import bootstrap_token_of, token_needed

ORIGIN_POOL = "listBootstrapData"
CLUSTER_HELP = ("read the target cluster (location, Kubernetes version, Azure RBAC) and check the operator's "
                "permissions; in agent-pool mode, the pool's bootstrap data")
CREDENTIALS_HELP = ("read the cluster's API server URL and CA (no admin credential is fetched or kept); "
                    "in the TLS bootstrap modes, check the API server answers with that CA")


def merge_pairs(pool_items, operator_items, sep):
    """The pool's labels (or taints), the operator's replacing any with the same key."""
    def key(item):
        return item.split(sep, 1)[0].strip()

    operator_keys = {key(i) for i in operator_items}
    return [i for i in pool_items if key(i) not in operator_keys] + list(operator_items)


def overlay(cfg, pool_values):
    """The config keys to take from the pool: those the operator did not set; labels and
    taints merged."""
    values = {}
    for name, value in pool_values.items():
        if name == "node_labels":
            values[name] = merge_pairs(value, cfg.node_labels, "=")
        elif name == "node_taints":
            values[name] = merge_pairs(value, cfg.node_taints, ":")
        elif not cfg.is_set(name):
            values[name] = value
    return values


def join_overlay(cfg, pool_values, goal):
    """(values, origin): the config keys a join takes from its pool: the bootstrap data's,
    under the Machine goal in force (steps/machine_goal.py; the RP's settings for this node),
    each only where the operator set nothing (labels and taints merged)."""
    if goal is None:
        return overlay(cfg, pool_values), ORIGIN_POOL
    return (overlay(cfg, dict(pool_values, **goal.values)),
            f"{ORIGIN_POOL} and machine {cfg.machine_name} (eTag {goal.etag})")


def recorded_overlay(cfg, host):
    """`cfg` with the pool's values the last full run recorded laid over it (agent-pool
    mode; `config show`), or `cfg` itself when there are none."""
    if cfg.mode is not JoinMode.AGENT_POOL:
        return cfg
    try:
        ledger = open_ledger(host)
        values = (ledger.joined.get("facts") or {}).get("pool_values")
        goal = machine_goal.in_force(ledger)
    except FlexNodeError:
        return cfg  # an unreadable ledger: status says so; the configuration stands
    if not values and goal is None:
        return cfg
    values, origin = join_overlay(cfg, values or {}, goal)
    return cfg.overlaid(values, f"{origin} (agent pool {cfg.agent_pool}, last full run)")


class JoinFactsStep(Step):
    """The cluster phase in the TLS bootstrap modes: the token, the API server and its CA,
    and the configuration's overlay (the pool's values). Every host change waits for this
    phase (steps/workflow.py), so a token the API server refuses fails here, with the host
    untouched. A local pass runs it too: the pool's values, as the last full run recorded
    them, are laid under the configuration."""

    name = "cluster"
    help = CLUSTER_HELP
    branch = CREDENTIALS
    needs = ("preflight",)
    modes = TLS_BOOTSTRAP

    def check(self, ctx):
        cfg, data = ctx.operator_config, ctx.data
        if ctx.mode is JoinMode.AGENT_POOL:
            said = _pool_facts(ctx)
        else:
            data.pool_values = {}
            _configured_server(cfg, data)
            said = "the configuration (bootstrap-token mode)"
        token = cfg.bootstrap_token()
        if token:
            data.bootstrap_token = token
            if token_needed(ctx.host, data.ca_pem):
                _require_accepted(ctx, token)
        # The Machine's settings (the RP's goal for this node) over the pool's bootstrap data;
        # what the operator set still wins (pool_follow.py tells the agent of a pin).
        goal = machine_goal.in_force(ctx.ledger) if ctx.mode is JoinMode.AGENT_POOL else None
        values, origin = join_overlay(cfg, data.pool_values, goal)
        effective = cfg.overlaid(values, origin)  # a pool value we cannot use fails here, naming it
        data.config_overlay = (values, origin)
        data.kubernetes_version = effective.kubernetes_version
        if not data.kubernetes_version:
            raise FlexNodeError("kubernetes_version: no version: the pool gave none and the configuration sets none",
                                remedy="set kubernetes_version in [versions]")
        return Plan(noop_reason=f"{said}: Kubernetes {data.kubernetes_version}, API server {data.server}")


def _pool_facts(ctx):
    """Agent-pool mode: the pool's bootstrap data, asked for (which mints a token) on an
    operator's run, on a first join, or when the kubelet needs a token and the one it was
    given no longer works; else as the last full run recorded it. Returns where it came from."""
    cfg, data = ctx.operator_config, ctx.data
    fetch = not ctx.local_only and (data.pool_values is None or ctx.options.refresh_pool)
    if not fetch:
        if data.pool_values is None:
            raise TemporaryError("no bootstrap data recorded yet: a full run reads it",
                                 remedy="aks-flex-node bootstrap")
        _configured_server(cfg, data)
        if not ctx.local_only and _ca_rotated(ctx):
            fetch = True  # the pool's bootstrap data carries the cluster's new CA (and a token)
        elif token_needed(ctx.host, data.ca_pem) and not cfg.is_set("bootstrap_token_file"):
            data.bootstrap_token = _reusable_token(ctx)
            if data.bootstrap_token is None and ctx.local_only:
                # The agent's next pass after a failure is a full one (agent.py): it asks.
                raise TemporaryError(
                    "the kubelet has no valid client certificate and its bootstrap token is gone or no "
                    "longer accepted: a new one comes from the pool (listBootstrapData)",
                    remedy="aks-flex-node-agent's next full pass asks for it; or run aks-flex-node bootstrap")
            fetch = data.bootstrap_token is None
    if not fetch:
        return f"pool {cfg.agent_pool} of {cfg.cluster.name} (as the last full run read it)"
    # The SDK only for the call: the agent's local pass, a forked child every minute, comes
    # this way too and must not import it to read nothing (make bench: agent CPU per hour).
    from aks_flex_node.azure import agentpool

    fetched = agentpool.list_bootstrap_data(ctx.azure.clients, cfg.cluster, cfg.agent_pool)
    data.pool_values, data.server, data.ca_pem = dict(fetched.values), fetched.server, fetched.ca_pem
    data.bootstrap_token = fetched.token
    _configured_server(cfg, data)
    return f"pool {cfg.agent_pool} of {cfg.cluster.name} (listBootstrapData)"


def _ca_rotated(ctx):
    """Whether the API server's certificate is no longer vouched for by the CA the last full
    run recorded, which came from the pool (not from the operator's cluster_ca_file): after
    `az aks rotate-certs` the cluster has a new CA (Learn, "Certificate rotation in Azure
    Kubernetes Service (AKS)") and the pool's bootstrap data has it. One GET /readyz per full
    pass; an unreachable server is not a rotation (the credentials phase says what it is)."""
    if ctx.operator_config.is_set("cluster_ca_file"):
        return False
    try:
        kube.readyz(ctx.data.server, ctx.data.ca_pem, policy=ctx.http_policy)
    except kube.KubeError as err:
        return err.code == "apiserver-tls-untrusted"
    except TemporaryError:
        return False
    return False


def _configured_server(cfg, data):
    """The API server and its CA as the operator configured them, over the pool's."""
    if cfg.is_set("api_server"):
        data.server = cfg.api_server_url
    if cfg.is_set("cluster_ca_file"):
        data.ca_pem = cfg.cluster_ca().encode()
    if not data.server or not data.ca_pem:
        raise FlexNodeError("the API server or its CA is not known",
                            remedy="set api_server and cluster_ca_file (bootstrap-token mode)")


def token_accepted(ctx, token):
    """Whether the API server authenticates the bootstrap token `token` (unknown, expired or
    deleted: it does not)."""
    return kube.KubeClient(ctx.data.server, ctx.data.ca_pem, token_provider=lambda: token,
                           policy=ctx.http_policy).authenticates()


def _reusable_token(ctx):
    """The token of the bootstrap kubeconfig we wrote, while the API server still accepts
    it (a kubelet that lost its certificate bootstraps again with it: no new token is
    minted), else None."""
    token = bootstrap_token_of(ctx.host)
    return token if token and token_accepted(ctx, token) else None


def _require_accepted(ctx, token):
    """The operator's token (bootstrap_token_file), which the kubelet is about to need: an
    AuthError naming the file and what to do when the API server refuses it."""
    if token_accepted(ctx, token):
        return
    cfg = ctx.operator_config
    where = (f"bootstrap_token_file = {cfg.bootstrap_token_file!r}" if cfg.bootstrap_token_file
             else "the bootstrap token of the imported config.json (azure.bootstrapToken)")
    raise AuthError(
        f"{where}: the API server {ctx.data.server} does not accept this bootstrap token (401): it has "
        "expired, was deleted, or belongs to another cluster; nothing was changed on this host",
        remedy="put a valid token (one line, <6 chars>.<16 chars>) in bootstrap_token_file: a cluster admin "
        "makes one (kubeadm token create, or listBootstrapData of a FlexNodes agent pool); then run "
        "aks-flex-node bootstrap again")


class ApiServerStep(Step):
    """The credentials phase in the TLS bootstrap modes: the API server answers /readyz over
    TLS verified with the CA we were given (the upstream agent's preflight_api_server.go)."""

    name = "credentials"
    help = CREDENTIALS_HELP
    branch = CREDENTIALS
    needs = ("cluster",)
    full_pass_only = True
    modes = TLS_BOOTSTRAP

    def check(self, ctx):
        kube.readyz(ctx.data.server, ctx.data.ca_pem, policy=ctx.http_policy)
        return Plan(noop_reason=f"API server {ctx.data.server} is ready (verified with the cluster CA)")


# The Machine's spec fields and the config keys they carry (agentpool.machine_body).
SPEC_KEYS = {"orchestratorVersion": "kubernetes_version", "maxPods": "max_pods",
             "nodeLabels": "node_labels", "nodeTaints": "node_taints"}


class MachineStep(Step):
    """The node's Machine in its FlexNodes pool (Machines_Get / Machines_CreateOrUpdate),
    registered before the kubelet starts, as the upstream agent does (Azure/AKSFlexNode
    pkg/aksmachine/ensure.go): absent, it is created; with another spec, PUT again on an
    operator's run (bootstrap, reconfigure, upgrade) or before the node has applied a goal.
    After that the Machine is the RP's goal state: the agent never writes its own settings over
    it, it follows it (pool_follow.py). The settings the node runs are recorded as applied
    (steps/machine_goal.py) when the Machine matches them."""

    name = "machine"
    help = "register this node as a Machine of its FlexNodes agent pool (agent-pool mode)"
    branch = IDENTITY
    needs = ("cluster",)
    cloud = True
    full_pass_only = True
    modes = (JoinMode.AGENT_POOL,)
    not_in_mode = "no agent pool in {mode} mode"

    def check(self, ctx):
        from aks_flex_node.azure import agentpool

        cfg, plan = ctx.config, Plan()
        name = cfg.machine_name
        wanted = agentpool.machine_body(cfg)
        seen = ctx.options.machine_seen  # read by the agent for this pass's decision (pool_follow.py)
        machine = seen[0] if seen is not None else agentpool.get_machine(ctx.azure.clients, cfg.cluster,
                                                                          cfg.agent_pool, name)
        following = machine_goal.applied(ctx.ledger) is not None
        if machine is None and following and ctx.options.agent:
            # Gone after the join: the pool deletes a Machine to take the node out; the agent
            # never registers it again behind the pool's back (pool_follow.py decides).
            plan.noop_reason = f"machine {name} is gone from agent pool {cfg.agent_pool}: the pool decides"
            return plan
        if machine is None:
            plan.add(f"register machine {name} in agent pool {cfg.agent_pool}", "it is not registered",
                     lambda: self._put(ctx, wanted, created=True))
            return plan
        if machine.spec != wanted["properties"]["kubernetes"]:
            differs = sorted(k for k, v in wanted["properties"]["kubernetes"].items() if machine.spec.get(k) != v)
            # Once the node follows its Machine, only what the operator set in the file (a pin,
            # their labels) is written to it, and only by an operator's run; the rest is the
            # pool's to decide (pool_follow.py).
            if following and (ctx.options.agent or not any(cfg.is_set(SPEC_KEYS[k]) for k in differs)):
                plan.noop_reason = (f"machine {name} asks for other settings ({', '.join(differs)}; eTag "
                                    f"{machine.etag}): applied when the pool's operation releases the node")
                return plan
            plan.add(f"update machine {name} in agent pool {cfg.agent_pool}",
                     f"its {', '.join(differs)} differ(s) from this node's", lambda: self._put(ctx, wanted))
            return plan
        if ctx.options.machine_goal is None and not ctx.dry_run:
            self._applied(ctx, machine)
        plan.noop_reason = f"machine {name} registered in agent pool {cfg.agent_pool} (eTag {machine.etag})"
        return plan

    def _applied(self, ctx, machine):
        """The Machine matches this node's settings: that goal is the node's (a Machine whose
        settings cannot be read as a goal is reported, not recorded)."""
        goal = machine_goal.goal_of(machine, f"ARM machines GET {ctx.config.agent_pool}/{machine.name}")
        current = machine_goal.applied(ctx.ledger)
        if current != goal:
            machine_goal.set_applied(ctx.ledger, goal)

    def _put(self, ctx, body, created=False):
        from aks_flex_node.azure import agentpool

        cfg = ctx.config
        if created:  # written down before the call: a kill mid-way still leaves it to undo
            ctx.ledger.record(self.name, Kind.AGENTPOOL_MACHINE,
                              agentpool.machine_path(cfg.cluster, cfg.agent_pool, cfg.machine_name),
                              pool=cfg.agent_pool, machine=cfg.machine_name,
                              cluster=cfg.cluster.resource_id)
        machine = agentpool.put_machine(ctx.azure.clients, cfg.cluster, cfg.agent_pool, cfg.machine_name, body)
        if ctx.options.machine_goal is None:
            self._applied(ctx, machine)

    def plan_undo(self, ctx, entries):
        plan = Plan()
        for entry in entries:
            if entry["kind"] == Kind.AGENTPOOL_MACHINE:
                plan.add(f"delete machine {entry['machine']} of agent pool {entry['pool']}",
                         f"registered by the {self.name} phase", lambda e=entry: self._delete(ctx, e))
            elif entry["kind"] == Kind.MACHINE_GOAL:
                plan.add("forget the Machine settings this node applied", "the node is leaving",
                         lambda: machine_goal.forget(ctx.ledger))
        return plan

    def _delete(self, ctx, entry):
        """deleteMachines when this identity may call it; the Flex Node Agent Role does not
        grant it, so usually the operator must: say exactly what to run. A Machine already
        gone (the pool's delete-machines, which is how a reset reaches the node) is done."""
        from aks_flex_node.azure import agentpool, permissions

        ref = parse_cluster_id(entry["cluster"])
        pool, name = entry["pool"], entry["machine"]
        if agentpool.get_machine(ctx.azure.clients, ref, pool, name) is None:
            ctx.ledger.forget(Kind.AGENTPOOL_MACHINE, entry["id"])
            return []
        if permissions.may_delete_machines(ctx.azure.clients, ref, pool):
            agentpool.delete_machines(ctx.azure.clients, ref, pool, [name])
            ctx.ledger.forget(Kind.AGENTPOOL_MACHINE, entry["id"])
            return []
        ctx.ledger.forget(Kind.AGENTPOOL_MACHINE, entry["id"])  # nothing more this node can do
        return [Leftover(
            f"machine {name} of agent pool {pool}",
            "kept: this node's identity may not delete it (the Flex Node Agent Role has no "
            f"deleteMachines); an operator runs: az aks nodepool delete-machines --resource-group "
            f"{ref.resource_group} --cluster-name {ref.name} --nodepool-name {pool} --machine-names {name}",
            kept=True)]
