"""Kernel settings: modules, sysctl, swap.

Reading is done from files under the Host's root (/proc/modules, /proc/swaps, /proc/sys);
changing goes through Host.run_system, so under a root prefix it is skipped unless
stand-ins are configured. `comment_out_swap` is a pure function of the fstab text.

A read that cannot observe (a container without /proc/modules, an image build with no
/proc at all, a /proc/sys key the kernel does not show) returns `Unknown` with the reason,
never "absent" or "off": a step must not repair, and report repaired, what it cannot see.
"""

import dataclasses
import logging
import os
import re

log = logging.getLogger(__name__)

# modprobe(8) module names: letters, digits, "_" and "-" (which modprobe treats alike).
_MODULE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
# sysctl(8) keys: dot-separated names (sysctl also accepts "/" for ".").
_SYSCTL_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def _module_key(name):
    # /proc/modules always spells names with "_"; modprobe accepts either.
    return name.replace("-", "_")


@dataclasses.dataclass(frozen=True)
class Unknown:
    """What a read returns when this host does not show the value, and why. It is neither
    true nor false: testing it as a bool is a TypeError, so no caller takes it for "no"."""

    reason: str

    def __bool__(self):
        raise TypeError(f"an unknown value is neither true nor false ({self.reason}); "
                        "test isinstance(value, Unknown) first")


class Kernel:
    def __init__(self, host):
        self.host = host

    def load_module(self, name):
        _check_module_name(name)
        self.host.run_system(["modprobe", name])

    def loaded_modules(self):
        """Names of the loaded modules (from /proc/modules), or Unknown when there is no
        /proc/modules to read. Built-in modules are not listed there: see module_loaded."""
        text = self.host.read_bytes("/proc/modules")
        if text is None:
            return Unknown("/proc/modules is absent (a container or an image build)")
        return {line.split()[0] for line in text.decode("utf-8", "replace").splitlines()
                if line.strip()}

    def module_loaded(self, name):
        """True when `name` is loaded or built in, False when it is not, Unknown when this
        host does not show it. /proc/modules lists loadable modules only; a built-in one
        has /sys/module/<name> only when it has a parameter or a version (the kernel's
        Documentation/ABI/stable/sysfs-module), so modules.builtin is asked too."""
        _check_module_name(name)
        key = _module_key(name)
        if self.host.exists(f"/sys/module/{key}") or key in self.builtin_modules():
            return True
        loaded = self.loaded_modules()
        if isinstance(loaded, Unknown):
            return Unknown(f"{loaded.reason}, and so is /sys/module/{key}")
        return key in {_module_key(m) for m in loaded}

    def builtin_modules(self):
        """Modules built into the running kernel, from /lib/modules/<release>/modules.builtin
        (the kernel's Documentation/kbuild/kbuild.rst); empty when the file is not there."""
        text = self.host.read_bytes(f"/lib/modules/{os.uname().release}/modules.builtin")
        return {_module_key(line.strip().rsplit("/", 1)[-1].split(".ko")[0])
                for line in (text or b"").decode("utf-8", "replace").splitlines() if line.strip()}

    def sysctl(self, key):
        """The live value of sysctl `key` (from /proc/sys, stripped), or Unknown when the
        kernel does not show it here (proc(5), /proc/sys)."""
        if not isinstance(key, str) or not _SYSCTL_KEY.fullmatch(key):
            raise ValueError(f"sysctl key = {key!r}: expected dot-separated names")
        path = "/proc/sys/" + key.replace(".", "/")
        raw = self.host.read_bytes(path)
        if raw is not None:
            return raw.decode("utf-8", "replace").strip()
        if not self.host.exists("/proc/sys"):
            return Unknown("/proc/sys is absent (an image build, or /proc is not mounted)")
        return Unknown(f"{path} does not exist: the running kernel does not show {key} here "
                       "(a module it belongs to is not loaded, or a container's namespace hides it)")

    def apply_sysctl(self):
        """Load every sysctl.d file again (`sysctl --system`)."""
        self.host.run_system(["sysctl", "--system"])

    def swap_on(self):
        """True when /proc/swaps lists any swap area (the first line is a header), False
        when it lists none, Unknown when there is no /proc/swaps (proc(5))."""
        text = self.host.read_bytes("/proc/swaps")
        if text is None:
            return Unknown("/proc/swaps is absent (a container or an image build)")
        lines = text.decode("utf-8", "replace").splitlines()[1:]
        return any(line.strip() for line in lines)

    def swapoff(self):
        """Turn off every swap area now (`swapoff -a`); /etc/fstab is comment_out_swap's."""
        self.host.run_system(["swapoff", "-a"])


def _check_module_name(name):
    if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
        raise ValueError(
            f"module name = {name!r}: expected letters, digits, '_' or '-', "
            "not starting with '-'"
        )


def comment_out_swap(fstab_text):
    """Comment out the swap entries of an fstab, leaving every other byte as it was.

    Returns (new_text, changed_lines) where changed_lines are the original entries that
    were commented out (without their line ending). An entry is a swap entry when its
    third field (fs_vfstype, fstab(5)) is "swap"; it gets a leading "#", so removing that
    character restores it exactly. Already commented lines are left alone, which makes
    the function idempotent.
    """
    if not isinstance(fstab_text, str):
        raise TypeError(f"fstab_text is a {type(fstab_text).__name__}: expected str")
    out = []
    changed = []
    # Split on "\n" only (not str.splitlines, which also breaks at form feeds and other
    # separators that fstab does not treat as line ends); a "\r" stays part of its line.
    for line in fstab_text.split("\n"):
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap":
            out.append("#" + line)
            changed.append(line.rstrip("\r"))
        else:
            out.append(line)
    return "\n".join(out), changed
