"""Kernel settings: modules, sysctl, swap.

Reading is done from files under the Host's root (/proc/modules, /proc/swaps); changing
goes through Host.run_system, so under a root prefix it is skipped unless stand-ins are
configured. `comment_out_swap` is a pure function of the fstab text.
"""

import logging
import re

log = logging.getLogger(__name__)

# modprobe(8) module names: letters, digits, "_" and "-" (which modprobe treats alike).
_MODULE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


def _module_key(name):
    # /proc/modules always spells names with "_"; modprobe accepts either.
    return name.replace("-", "_")


class Kernel:
    def __init__(self, host):
        self.host = host

    def load_module(self, name):
        if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
            raise ValueError(
                f"module name = {name!r}: expected letters, digits, '_' or '-', "
                "not starting with '-'"
            )
        self.host.run_system(["modprobe", name])

    def modules_loaded(self):
        """Names of the loaded modules (from /proc/modules; empty when it is absent).

        Built-in modules are not listed there: check /sys/module/<name> for those.
        """
        text = self.host.read_bytes("/proc/modules")
        if not text:
            return set()
        return {line.split()[0] for line in text.decode("utf-8", "replace").splitlines()
                if line.strip()}

    def is_module_loaded(self, name):
        return _module_key(name) in {_module_key(m) for m in self.modules_loaded()}

    def apply_sysctl(self):
        """Load every sysctl.d file again (`sysctl --system`)."""
        self.host.run_system(["sysctl", "--system"])

    def swap_active(self):
        """True when /proc/swaps lists any swap area (the first line is a header)."""
        text = self.host.read_bytes("/proc/swaps")
        if not text:
            return False
        lines = text.decode("utf-8", "replace").splitlines()[1:]
        return any(line.strip() for line in lines)

    def swapoff(self):
        """Turn off every swap area now (`swapoff -a`); /etc/fstab is comment_out_swap's."""
        self.host.run_system(["swapoff", "-a"])


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
