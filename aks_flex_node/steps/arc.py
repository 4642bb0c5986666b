"""Azure Arc: this machine connected as an Arc resource, with a managed identity.

The agent gets the run's proxy as its own settings (`azcmagent config set proxy.url` and
`proxy.bypass`, Learn "Manage and maintain the Azure Connected Machine agent") before it
connects; what we set is in the ledger (`azcmagent_config`, with the value it replaced),
so removing the proxy from our config, or unbootstrap, puts the agent's setting back.
"""

from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.engine.step import IDENTITY, Plan, Step
from aks_flex_node.errors import FlexNodeError, TemporaryError
from aks_flex_node.host.azcmagent import Azcmagent
from aks_flex_node.http_policy import ProxySettingError, redact
from aks_flex_node.steps import cloud_reads
from aks_flex_node.steps.kinds import Kind

CONFIG_KIND = Kind.AZCMAGENT_CONFIG

# azcmagent's --cloud names for the clouds we know (a custom cloud is not one of them).
AZCMAGENT_CLOUDS = {
    "AzurePublicCloud": "AzureCloud",
    "AzureUSGovernment": "AzureUSGovernment",
    "AzureChinaCloud": "AzureChinaCloud",
}


def connect_settings(cfg, location):
    settings = {
        "tenant-id": cfg.tenant_id,
        "subscription-id": cfg.subscription_id,
        "resource-group": cfg.arc_resource_group,
        "location": location,
        "resource-name": cfg.machine_name,
    }
    if cfg.arc_tags:
        settings["tags"] = ",".join(cfg.arc_tags)
    cloud = AZCMAGENT_CLOUDS.get(cfg.endpoints.name)
    if cloud:
        settings["cloud"] = cloud
    return settings


def _normalized(prop, value):
    """Compare settings as the agent means them: proxy.bypass is a set of service names."""
    value = (value or "").strip()
    if prop == "proxy.bypass":
        return ",".join(sorted({v.strip().lower() for v in value.split(",") if v.strip()}))
    return value.rstrip("/")


def plan_agent_proxy(ctx, plan, step, agent):
    """Actions that give the Arc agent the run's proxy settings, or put back what we changed
    once the config has no proxy any more. Without a proxy and nothing of ours recorded,
    the agent is not even asked."""
    try:
        url, bypass = ctx.http_policy.azcmagent_proxy(ctx.config.endpoints)
    except ProxySettingError as err:
        raise FlexNodeError(str(err), remedy="change https_proxy in the config") from None
    wanted = {"proxy.url": url or "", "proxy.bypass": ",".join(bypass)}
    for prop in ("proxy.url", "proxy.bypass"):
        ours = ctx.ledger.get(CONFIG_KIND, prop)
        if not wanted[prop] and ours is None:
            continue  # not ours to manage: an operator's own setting stays
        current = agent.config_get(prop)
        if _normalized(prop, current) == _normalized(prop, wanted[prop]):
            continue
        shown = ctx.http_policy.shown_proxy if prop == "proxy.url" else wanted[prop]
        if wanted[prop]:
            plan.add(f"set the Arc agent's {prop} to {shown}",
                     f"https_proxy/no_proxy in the config; the agent has {redact(current) or 'none'}",
                     lambda p=prop, v=wanted[prop], c=current: _set_config(ctx, step, agent, p, v, c))
        else:
            _plan_restore(plan, ours, "the config has no proxy any more; aks-flex-node had set it",
                          lambda e=ours: _restore_config(ctx, agent, e))


def _plan_restore(plan, entry, why, run):
    previous = entry.get("previous") or ""
    plan.add(f"put the Arc agent's {entry['id']} back to {redact(previous) or 'unset'}", why, run)


def _set_config(ctx, step, agent, prop, value, current):
    # Record before acting, with what it replaces, so undo can put that back.
    if not ctx.ledger.has(CONFIG_KIND, prop):
        ctx.ledger.record(step, CONFIG_KIND, prop, previous=current or "")
    agent.config_set(prop, value)


def _restore_config(ctx, agent, entry):
    previous = entry.get("previous") or ""
    if previous:
        agent.config_set(entry["id"], previous)
    else:
        agent.config_clear(entry["id"])
    ctx.ledger.forget(CONFIG_KIND, entry["id"])
    return []


def machine_id(cfg):
    return (f"/subscriptions/{cfg.subscription_id}/resourceGroups/{cfg.arc_resource_group}"
            f"/providers/Microsoft.HybridCompute/machines/{cfg.machine_name}")


class ArcModeOnly:
    """A step of Arc mode alone (the arc, roles and rbac-propagation phases)."""

    modes = (JoinMode.ARC,)
    not_in_mode = "not used in {mode} mode (the kubelet joins by TLS bootstrap)"


class ArcStep(ArcModeOnly, Step):
    name = "arc"
    help = "connect this machine to Azure Arc (azcmagent) and wait for its managed identity"
    branch = IDENTITY
    needs = ("cluster",)
    cloud = True

    def check(self, ctx):
        cfg, plan = ctx.config, Plan()
        agent = Azcmagent(ctx.host, cfg.azcmagent)
        leftovers = agent.leftover_config_files()
        if leftovers:
            plan.add(f"remove {len(leftovers)} leftover azcmagent token file(s) from {agent.run_dir}",
                     "a run killed while azcmagent ran left them (they hold an ARM access token)",
                     agent.remove_leftover_config_files)
        plan_agent_proxy(ctx, plan, self.name, agent)
        # Preflight's reading, when it made one: nothing of this run has touched the agent since.
        shown = ctx.data.azcmagent_shown or agent.show() or {}
        location = ctx.data.arc_location or cfg.arc_location
        settings = connect_settings(cfg, location)
        connected = agent.is_connected(settings, shown)
        if not connected and shown.get("status", "").lower() == "connected":
            raise FlexNodeError(
                f"this machine is already connected to Azure Arc as {shown.get('resourceName')!r} "
                f"in resource group {shown.get('resourceGroup')!r}, not as {cfg.machine_name!r} in "
                f"{cfg.arc_resource_group!r}",
                remedy="set machine_name and arc_resource_group to match it, or disconnect it "
                "first (azcmagent disconnect)")
        if ctx.local_only:
            if not connected:
                raise TemporaryError("the Azure Arc agent is not connected",
                                     remedy="the next full pass reconnects it")
            if not plan.actions:
                plan.noop_reason = "the local Arc agent is connected"
            return plan
        # The run's shared read (steps/cloud_reads.py): preflight's arc-identity check asked
        # for the same machine.
        machine = cloud_reads.machine(ctx)
        if connected and machine and machine.principal_id:
            ctx.data.principal_id = machine.principal_id
            if not plan.actions:
                plan.noop_reason = f"connected as {machine.id}"
            return plan
        why = ("the local agent is not connected" if not connected
               else "the Arc resource has no managed identity yet")
        plan.add(f"connect to Azure Arc as {cfg.machine_name} in {cfg.arc_resource_group} "
                 f"({location})", why, lambda: self._connect(ctx, agent, settings, connected))
        return plan

    def _connect(self, ctx, agent, settings, connected):
        from aks_flex_node.azure import arc, auth

        cfg = ctx.config
        if not connected:
            token = auth.arm_token(ctx.azure.credential, cfg.endpoints.arm_scope)
            # Record before acting: if connect half-succeeds, unbootstrap still cleans up.
            ctx.ledger.record(self.name, Kind.AZCMAGENT_CONNECTION, cfg.machine_name)
            ctx.ledger.record(self.name, Kind.ARC_MACHINE, machine_id(cfg),
                              subscription_id=cfg.subscription_id,
                              resource_group=cfg.arc_resource_group, name=cfg.machine_name)
            agent.connect(settings, token)
        machine = arc.wait_for_identity(ctx.azure.clients, cfg.subscription_id,
                                        cfg.arc_resource_group, cfg.machine_name)
        ctx.data.principal_id = machine.principal_id

    def plan_undo(self, ctx, entries):
        plan = Plan()
        for entry in entries:
            if entry["kind"] == Kind.ARC_MACHINE:
                plan.add(f"delete Arc machine {entry['id']}", f"connected by the {self.name} phase",
                         lambda e=entry: self._delete_machine(ctx, e))
        for entry in entries:
            if entry["kind"] == Kind.AZCMAGENT_CONNECTION:
                # The cloud resource is gone (or deliberately kept): only the local agent state.
                plan.add("disconnect the local Arc agent (local state only)",
                         f"connected by the {self.name} phase",
                         lambda e=entry: self._disconnect(ctx, e))
        for entry in entries:
            if entry["kind"] == CONFIG_KIND:
                _plan_restore(plan, entry, f"set by the {self.name} phase",
                              lambda e=entry: self._restore(ctx, e))
        return plan

    @staticmethod
    def _restore(ctx, entry):
        return _restore_config(ctx, Azcmagent(ctx.host, ctx.config.azcmagent), entry)

    @staticmethod
    def _delete_machine(ctx, entry):
        from aks_flex_node.azure import arc

        arc.delete_machine(ctx.azure.clients, entry["subscription_id"], entry["resource_group"],
                           entry["name"])
        ctx.ledger.forget(Kind.ARC_MACHINE, entry["id"])

    @staticmethod
    def _disconnect(ctx, entry):
        Azcmagent(ctx.host, ctx.config.azcmagent).disconnect()
        ctx.ledger.forget(Kind.AZCMAGENT_CONNECTION, entry["id"])
