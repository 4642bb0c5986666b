"""Kernel and OS settings Kubernetes needs: swap off for good, modules, sysctls."""

import os
import stat

from aks_flex_node.engine.step import INSTALL, Plan, Step
from aks_flex_node.host.kernel import comment_out_swap
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
    """Keys whose live value (under /proc/sys) differs; keys the kernel does not show are skipped."""
    drift = []
    for key, wanted in SYSCTLS:
        raw = host.read_bytes("/proc/sys/" + key.replace(".", "/"))
        if raw is not None and raw.decode().strip() != wanted:
            drift.append(key)
    return drift


class SystemStep(tracked.OwnsPaths, Step):
    # Undo restores /etc/fstab as it was and removes our modules-load.d and sysctl.d files;
    # live kernel values are left alone (other software may rely on ip_forward).
    name = "system"
    help = "swap off (now and in /etc/fstab), overlay and br_netfilter loaded, sysctls set"
    branch = INSTALL
    needs = ("cluster",)

    def check(self, ctx):
        host, plan = ctx.host, Plan()
        kernel = host.kernel

        if kernel.swap_active():
            plan.add("turn swap off (swapoff -a)", "the kubelet refuses to run with swap on",
                     kernel.swapoff)
        fstab = host.read_bytes(FSTAB)
        if fstab is not None:
            new_text, changed = comment_out_swap(fstab.decode())
            if changed:
                tracked.plan_file(ctx, plan, self.name, FSTAB, new_text.encode(),
                                  _mode_of(host, FSTAB),
                                  why=f"swap would come back at boot ({len(changed)} swap line(s))")

        tracked.plan_file(ctx, plan, self.name, MODULES_LOAD_PATH, modules_file(), 0o644,
                          why="load the modules at every boot")
        loaded = kernel.modules_loaded()
        for module in MODULES:
            # /proc/modules lists loadable modules only; a built-in one shows in /sys/module.
            if module not in loaded and not host.exists(f"/sys/module/{module}"):
                plan.add(f"load kernel module {module}", "it is not loaded",
                         lambda m=module: kernel.load_module(m))

        file_changes = tracked.plan_file(ctx, plan, self.name, SYSCTL_PATH, sysctl_file(), 0o644,
                                         why="kernel settings for Kubernetes networking")
        drift = live_sysctl_drift(host)
        if file_changes or drift:
            why = "the settings file changed" if file_changes else f"live values differ: {', '.join(drift)}"
            plan.add("apply sysctl settings (sysctl --system)", why, kernel.apply_sysctl)
        if not plan.actions:
            plan.noop_reason = "swap off, modules loaded, sysctls set"
        return plan


def _mode_of(host, path):
    return stat.S_IMODE(os.stat(host.path(path)).st_mode)
