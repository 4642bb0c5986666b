"""Kernel and OS settings Kubernetes needs: swap off for good, modules, sysctls."""


from aks_flex_node.engine.step import INSTALL, Plan, Step, Unobserved
from aks_flex_node.host.kernel import Unknown, comment_out_swap
from aks_flex_node.steps import tracked

MODULES_LOAD_PATH = "/etc/modules-load.d/aks-flex-node.conf"
SYSCTL_PATH = "/etc/sysctl.d/90-aks-flex-node.conf"
FSTAB = "/etc/fstab"
MODULES = ("overlay", "br_netfilter")

# The upstream agent's 999-sysctl-aks.conf (Azure/AKSFlexNode
# pkg/components/system_configuration/), plus rp_filter=2 from its v0.0.16 (PR #120).
# kubelet's protectKernelDefaults needs the vm/kernel values below to be set.
SYSCTLS = (
    ("net.bridge.bridge-nf-call-iptables", "1"),
    ("net.bridge.bridge-nf-call-ip6tables", "1"),
    ("net.ipv4.ip_forward", "1"),
    ("net.ipv4.conf.all.rp_filter", "2"),
    ("net.ipv4.conf.default.rp_filter", "2"),
    ("vm.overcommit_memory", "1"),
    ("kernel.panic", "10"),
    ("kernel.panic_on_oops", "1"),
)


def sysctl_file():
    lines = ["# Written by aks-flex-node: kernel settings a Kubernetes node needs."]
    lines += [f"{key} = {value}" for key, value in SYSCTLS]
    return ("\n".join(lines) + "\n").encode()


def modules_file():
    return ("# Written by aks-flex-node: modules containerd and the CNI bridge need at boot.\n"
            + "\n".join(MODULES) + "\n").encode()


def live_sysctl_drift(host):
    """(keys whose live value differs, Unobserved settings): a key the kernel does not show
    here is unknown, with its reason, never "drift" (sysctl --system could not set it)."""
    drift, unknown = [], {}
    for key, wanted in SYSCTLS:
        value = host.kernel.sysctl(key)
        if isinstance(value, Unknown):
            unknown.setdefault(value.reason, []).append(key)
        elif value != wanted:
            drift.append(key)
    return drift, [Unobserved("the sysctls" if len(keys) == len(SYSCTLS) else "sysctl " + ", ".join(keys),
                              reason) for reason, keys in unknown.items()]


class SystemStep(tracked.OwnsPaths, Step):
    # Undo restores /etc/fstab as it was and removes our modules-load.d and sysctl.d files;
    # live kernel values are left alone (other software may rely on ip_forward).
    # A live value this host does not show (a container without /proc/modules) is left
    # alone and reported unknown: the files still apply it at the next boot.
    name = "system"
    help = "swap off (now and in /etc/fstab), overlay and br_netfilter loaded, sysctls set"
    branch = INSTALL
    needs = ("cluster",)

    def check(self, ctx):
        host, plan = ctx.host, Plan()
        kernel = host.kernel
        seen = []  # what was observed and found right, for the no-op reason

        swap = kernel.swap_on()
        if isinstance(swap, Unknown):
            plan.add_unknown("swap", swap.reason)
        elif swap:
            plan.add("turn swap off (swapoff -a)", "the kubelet refuses to run with swap on",
                     kernel.swapoff)
        else:
            seen.append("swap off")
        fstab = host.read_bytes(FSTAB)
        if fstab is not None:
            new_text, changed = comment_out_swap(fstab.decode())
            if changed:
                tracked.plan_file(ctx, plan, self.name, FSTAB, new_text.encode(),
                                  _mode_of(host, FSTAB),
                                  why=f"swap would come back at boot ({len(changed)} swap line(s))")

        tracked.plan_file(ctx, plan, self.name, MODULES_LOAD_PATH, modules_file(), 0o644,
                          why="load the modules at every boot")
        for module in MODULES:
            loaded = kernel.module_loaded(module)
            if isinstance(loaded, Unknown):
                plan.add_unknown(f"kernel module {module}", loaded.reason)
            elif not loaded:
                plan.add(f"load kernel module {module}", "it is not loaded",
                         lambda m=module: kernel.load_module(m))
            else:
                seen.append(f"{module} loaded")

        file_changes = tracked.plan_file(ctx, plan, self.name, SYSCTL_PATH, sysctl_file(), 0o644,
                                         why="kernel settings for Kubernetes networking")
        drift, unknown = live_sysctl_drift(host)
        plan.unknown.extend(unknown)
        if file_changes or drift:
            why = "the settings file changed" if file_changes else f"live values differ: {', '.join(drift)}"
            plan.add("apply sysctl settings (sysctl --system)", why, kernel.apply_sysctl)
        elif not unknown:
            seen.append("sysctls set")
        if not plan.actions:
            plan.noop_reason = ", ".join(seen) if seen else "nothing it can see to change"
        return plan


def _mode_of(host, path):
    return host.mode(path)
