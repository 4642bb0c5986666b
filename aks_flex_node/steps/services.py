"""containerd and the kubelet enabled and running; restarted only when what they run changed."""

from aks_flex_node.engine.step import ACTIVATE, Plan, Step

KUBELET_DATA = "/var/lib/kubelet"


class ServicesStep(Step):
    name = "services"
    help = "enable and start containerd and the kubelet (restart only what changed)"
    branch = ACTIVATE
    needs = ("system", "containerd-config", "cni-config", "kubelet", "rbac-propagation")

    def check(self, ctx):
        systemd, facts, plan = ctx.host.systemd, ctx.facts, Plan()
        if facts.get("units_changed"):
            plan.add("reload systemd units", "a unit file changed", systemd.daemon_reload)
        self._plan_unit(ctx, plan, "containerd",
                        facts.get("containerd_config_changed") or facts.get("containerd_changed")
                        or facts.get("runc_changed"))
        self._plan_unit(ctx, plan, "kubelet",
                        facts.get("kubelet_config_changed") or facts.get("kubernetes_changed"))
        if not plan.actions:
            plan.noop_reason = "containerd and kubelet enabled and running"
        return plan

    def _plan_unit(self, ctx, plan, unit, changed):
        systemd = ctx.host.systemd

        def enable():
            systemd.enable(unit)
            ctx.ledger.record(self.name, "unit", unit)

        if not systemd.is_enabled(unit):
            plan.add(f"enable {unit}", "it is not enabled", enable)
        elif not ctx.ledger.has("unit", unit) and ctx.ledger.has(
                "file", f"/etc/systemd/system/{unit}.service"):
            ctx.adopt(self.name, "unit", unit)  # enabled by an earlier run whose record was lost
        if not systemd.is_active(unit):
            plan.add(f"start {unit}", "it is not running", lambda: systemd.start(unit))
        elif changed:
            plan.add(f"restart {unit}", "its binary or configuration changed",
                     lambda: systemd.restart(unit))

    def undo(self, ctx, entries):
        systemd, leftovers = ctx.host.systemd, []
        # kubelet first: it needs containerd to stop its pods cleanly.
        units = [e["id"] for e in entries if e["kind"] == "unit"]
        for unit in sorted(units, key=lambda u: u != "kubelet"):
            try:
                systemd.disable(unit, now=True)
                ctx.ledger.forget("unit", unit)
            except Exception as exc:
                leftovers.append(f"unit {unit}: {getattr(exc, 'message', None) or exc}")
        for top in (KUBELET_DATA, "/run/containerd", "/var/lib/containerd"):
            leftovers += unmount_below(ctx.host, top)
        return leftovers


def unmount_below(host, top):
    """Unmount pod volumes under `top` (deepest first) so removing it never deletes volume
    data; kubeadm reset does the same."""
    raw = host.read_bytes("/proc/self/mountinfo")
    if raw is None:
        return []
    mounts = []
    for line in raw.decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].replace("\\040", " ")
            if point == top or point.startswith(top + "/"):
                mounts.append(point)
    leftovers = []
    for point in sorted(mounts, key=len, reverse=True):
        try:
            host.run_system(["umount", point], timeout=60)
        except Exception as exc:
            leftovers.append(f"mount {point}: {getattr(exc, 'message', None) or exc}")
    return leftovers
