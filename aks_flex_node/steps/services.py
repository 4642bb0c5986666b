"""containerd and the kubelet enabled and running, and what earlier phases owe them paid.

A phase that changes what a unit reads writes down a restart (or a systemd reload) in the
ledger before the change (engine/step.py, Obligation). This phase reads what is owed, and
for each unit: starts it when it is not running, else restarts it when a restart is owed;
then it clears what it paid. A restart owed by a run that stopped half-way (--phase, a
crash, kill -9) is still in the ledger, so the next run pays it.
"""

from aks_flex_node.engine.step import ACTIVATE, RELOAD, RESTART, Plan, Step
from aks_flex_node.engine.undo import Leftover
from aks_flex_node.steps.kinds import Kind

UNITS = ("containerd", "kubelet")  # in start order: the kubelet needs containerd
CONTAINERD_RUNTIME_DIR = "/run/containerd"


def _reasons(owed, kind, unit):
    return "; ".join(dict.fromkeys(o.reason for o in owed if o.kind == kind and o.unit == unit))


class ServicesStep(Step):
    name = "services"
    help = "enable and start containerd and the kubelet (restart only what a change calls for)"
    branch = ACTIVATE
    # The Machine is registered before the kubelet starts (agent-pool mode), as upstream does.
    # The registries' mirrors are in place before containerd starts and pulls the pause image.
    needs = ("system", "containerd-config", "registry-mirrors", "cni-config", "kubelet", "rbac-propagation",
             "machine")

    def check(self, ctx):
        systemd, plan, owed = ctx.host.systemd, Plan(), ctx.obligations()
        reload_why = _reasons(owed, RELOAD, "systemd")
        if reload_why:
            plan.add("reload systemd units", reload_why,
                     lambda: self._pay(ctx, RELOAD, "systemd", systemd.daemon_reload))
        states = ctx.host.systemd.states(UNITS)
        for unit in UNITS:
            self._plan_unit(ctx, plan, unit, states[unit], _reasons(owed, RESTART, unit))
        if not plan.actions:
            plan.noop_reason = "containerd and kubelet enabled and running; no restart owed"
        return plan

    def _plan_unit(self, ctx, plan, unit, state, restart_why):
        systemd = ctx.host.systemd
        enabled, active = state

        def enable():
            systemd.enable(unit)
            ctx.ledger.record(self.name, Kind.UNIT, unit)

        if not enabled:
            plan.add(f"enable {unit}", "it is not enabled", enable)
        elif not ctx.ledger.has(Kind.UNIT, unit) and ctx.ledger.has(
                Kind.FILE, f"/etc/systemd/system/{unit}.service"):
            ctx.adopt(self.name, Kind.UNIT, unit)  # enabled by an earlier run whose record was lost
        if not active:
            # A start reads everything afresh: it pays any restart owed too.
            plan.add(f"start {unit}", "it is not running",
                     lambda: self._pay(ctx, RESTART, unit, lambda: systemd.start(unit)))
        elif restart_why:
            plan.add(f"restart {unit}", restart_why,
                     lambda: self._pay(ctx, RESTART, unit, lambda: systemd.restart(unit)))

    @staticmethod
    def _pay(ctx, kind, unit, act):
        act()
        ctx.ledger.settle(kind, unit)

    def plan_undo(self, ctx, entries):
        systemd, plan = ctx.host.systemd, Plan()
        units = [e["id"] for e in entries if e["kind"] == Kind.UNIT]
        # kubelet first: it needs containerd to stop its pods cleanly.
        for unit in sorted(units, key=lambda u: u != "kubelet"):
            plan.add(f"stop and disable {unit}", f"enabled by the {self.name} phase",
                     lambda u=unit: self._disable(ctx, systemd, u))
        if "containerd" in units:
            # Sandboxes' shm mounts: gone with containerd, or they would outlive it.
            plan.add(f"unmount what containerd left mounted under {CONTAINERD_RUNTIME_DIR}",
                     "containerd is stopped", lambda: self._unmount(ctx))
        return plan

    def _disable(self, ctx, systemd, unit):
        systemd.disable(unit, now=True)
        ctx.ledger.forget(Kind.UNIT, unit)

    @staticmethod
    def _unmount(ctx):
        return [Leftover(CONTAINERD_RUNTIME_DIR, why)
                for why in ctx.host.unmount_below(CONTAINERD_RUNTIME_DIR)]
