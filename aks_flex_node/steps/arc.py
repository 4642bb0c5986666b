"""Azure Arc: this machine connected as an Arc resource, with a managed identity."""

from aks_flex_node.engine.step import IDENTITY, Plan, Step
from aks_flex_node.errors import FlexNodeError, TemporaryError

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


def machine_id(cfg):
    return (f"/subscriptions/{cfg.subscription_id}/resourceGroups/{cfg.arc_resource_group}"
            f"/providers/Microsoft.HybridCompute/machines/{cfg.machine_name}")


class ArcStep(Step):
    name = "arc"
    help = "connect this machine to Azure Arc (azcmagent) and wait for its managed identity"
    branch = IDENTITY
    needs = ("cluster",)
    cloud = True

    def check(self, ctx):
        from aks_flex_node.azure import arc
        from aks_flex_node.host.azcmagent import Azcmagent

        cfg, plan = ctx.config, Plan()
        agent = Azcmagent(ctx.host, cfg.azcmagent)
        shown = agent.show() or {}
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
            return Plan(noop_reason="the local Arc agent is connected")
        machine = arc.get_machine(ctx.azure.clients, cfg.subscription_id,
                                  cfg.arc_resource_group, cfg.machine_name)
        if connected and machine and machine.principal_id:
            ctx.data.principal_id = machine.principal_id
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
            ctx.ledger.record(self.name, "azcmagent_connection", cfg.machine_name)
            ctx.ledger.record(self.name, "arc_machine", machine_id(cfg),
                              subscription_id=cfg.subscription_id,
                              resource_group=cfg.arc_resource_group, name=cfg.machine_name)
            agent.connect(settings, token)
        machine = arc.wait_for_identity(ctx.azure.clients, cfg.subscription_id,
                                        cfg.arc_resource_group, cfg.machine_name)
        ctx.data.principal_id = machine.principal_id

    def plan_undo(self, ctx, entries):
        plan = Plan()
        for entry in entries:
            if entry["kind"] == "arc_machine":
                plan.add(f"delete Arc machine {entry['id']}", f"connected by the {self.name} phase",
                         lambda e=entry: self._delete_machine(ctx, e))
        for entry in entries:
            if entry["kind"] == "azcmagent_connection":
                # The cloud resource is gone (or deliberately kept): only the local agent state.
                plan.add("disconnect the local Arc agent (local state only)",
                         f"connected by the {self.name} phase",
                         lambda e=entry: self._disconnect(ctx, e))
        return plan

    @staticmethod
    def _delete_machine(ctx, entry):
        from aks_flex_node.azure import arc

        arc.delete_machine(ctx.azure.clients, entry["subscription_id"], entry["resource_group"],
                           entry["name"])
        ctx.ledger.forget("arc_machine", entry["id"])

    @staticmethod
    def _disconnect(ctx, entry):
        from aks_flex_node.host.azcmagent import Azcmagent

        Azcmagent(ctx.host, ctx.config.azcmagent).disconnect()
        ctx.ledger.forget("azcmagent_connection", entry["id"])
