"""The `managed_dir` check: a directory aks-flex-node writes into and cleans up itself
(cache_dir), which must never be a location of the system's or of another program's.

`aks-flex-node unbootstrap` empties and removes such a directory, so `cache_dir = /etc`
must be refused before anything runs. Refused, by name alone (whether or not the
directory exists): the root, the top-level directories of the Filesystem Hierarchy
Standard (https://refspecs.linuxfoundation.org/FHS_3.0/fhs/index.html, hier(7)) and their
well-known second level, everything inside the trees the system owns (/etc, /usr outside
/usr/local, /boot, the kernel's /proc, /sys and /dev, ...), and anything inside or above a
directory aks-flex-node or the services it installs keep their state in. An existing
directory that aks-flex-node did not create is refused by `semantic` (it reads the host).
"""

from aks_flex_node import paths
from aks_flex_node.config.checks import Invalid

_PROGRAMS = "the system's programs and libraries"
# Refused with everything inside them.
SYSTEM_TREES = {
    "/bin": _PROGRAMS, "/sbin": _PROGRAMS, "/lib": _PROGRAMS, "/lib32": _PROGRAMS,
    "/lib64": _PROGRAMS, "/libx32": _PROGRAMS,
    "/usr": "the system's programs and data, installed by dpkg",
    "/etc": "the system's configuration",
    "/boot": "the kernel and the boot loader",
    "/proc": "the kernel's process information",
    "/sys": "the kernel's device and driver interface",
    "/dev": "the device files",
    "/run/systemd": "systemd's runtime state",
}
# Refused themselves (a directory inside them may be chosen).
SYSTEM_DIRS = {
    "/": "the filesystem root",
    "/home": "the users' home directories",
    "/root": "root's home directory",
    "/media": "the mount points of removable media",
    "/mnt": "the mount point of temporarily mounted file systems",
    "/opt": "the add-on software packages",
    "/run": "the system's runtime state",
    "/srv": "the data this system serves",
    "/tmp": "the temporary files",
    "/var": "the system's variable data",
    "/lost+found": "fsck's recovered files",
    "/usr/local": "the locally installed software",
    "/var/lib": "the programs' state",
    "/var/cache": "the applications' caches",
    "/var/log": "the logs",
    "/var/tmp": "the temporary files kept across reboots",
    "/var/opt": "the add-on software's variable data",
    "/var/spool": "the queues of printers, mail and cron",
    "/var/mail": "the users' mailboxes",
    "/var/backups": "the system's backups",
    "/var/local": "the variable data of locally installed software",
    "/var/run": "the system's runtime state (a link to /run)",
    "/var/lock": "the lock files (a link to /run/lock)",
}
# Directories aks-flex-node, the node's services and the Arc agent keep their state in:
# refused themselves, with everything inside and every directory above them.
OWNED_DIRS = {
    paths.STATE_DIR: "aks-flex-node's state (the record unbootstrap undoes)",
    paths.RUN_DIR: "aks-flex-node's runtime files",
    paths.CONFIG_DIR: "aks-flex-node's configuration",
    "/var/lib/kubelet": "the kubelet's state",
    "/etc/kubernetes": "the kubelet's configuration",
    "/var/lib/containerd": "containerd's state",
    "/run/containerd": "containerd's runtime state",
    "/etc/containerd": "containerd's configuration",
    "/opt/containerd": "containerd's plugins",
    "/opt/cni": "the CNI plugins aks-flex-node installs",
    "/etc/cni": "the CNI network configuration",
    "/var/lib/cni": "the CNI plugins' state",
    "/opt/azcmagent": "the Azure Connected Machine agent",
    "/var/opt/azcmagent": "the Azure Connected Machine agent's state",
    "/var/lib/GuestConfig": "the Azure Connected Machine agent's guest configuration",
}
_OWN = "a directory of aks-flex-node's own"
_SYSTEM = _OWN + ", not a system location: "
_APART = _OWN + ", apart from the node's state and software: "


def _inside(path, tree):
    return tree == "/" or path.startswith(tree + "/")


def normalized(value):
    """`value` without repeated slashes, '.' parts and a trailing slash."""
    return "/" + "/".join(part for part in value.split("/") if part not in ("", "."))


def refusal(value):
    """What is expected instead of `value` (a node path), or None when it may be used."""
    if not value.startswith("/") or "\0" in value:
        return "an absolute path, starting with /"
    path = normalized(value)
    if ".." in path.split("/"):
        return _OWN + f", named without '..' ({value})"
    if path in SYSTEM_DIRS:
        return _SYSTEM + f"{path} is {SYSTEM_DIRS[path]}"
    for tree, what in SYSTEM_TREES.items():
        if path == tree:
            return _SYSTEM + f"{path} is {what}"
        if _inside(path, tree) and not _inside(path, "/usr/local"):
            return _SYSTEM + f"{path} is inside {tree}, {what}"
    if path.count("/") == 3 and _inside(path, "/usr/local"):
        return _SYSTEM + f"{path} is part of {SYSTEM_DIRS['/usr/local']}"
    for owned, what in OWNED_DIRS.items():
        if path == owned:
            return _APART + f"{path} holds {what}"
        if _inside(path, owned):
            return _APART + f"{path} is inside {owned}, which holds {what}"
        if _inside(owned, path):
            return _APART + f"{path} holds {owned}, {what}"
    return None


def check_managed_dir(value):
    """A directory aks-flex-node may create, fill and remove (see this module's docstring);
    the typed value is the path without a trailing slash."""
    expected = refusal(value)
    if expected:
        raise Invalid(value, expected)
    return normalized(value)
