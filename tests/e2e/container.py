"""A booted systemd container for the end-to-end tests: a cached Debian root per release
(bookworm, trixie), an overlay per container, systemd-nspawn to boot it, nsenter to run
commands in it.

    base = BaseRoot("trixie").ensure()       # builds .cache/e2e/base-trixie-<key>/ once (mmdebstrap)
    with Container(base, run_dir) as c:      # overlay mount + boot + wait for systemd
        c.run(["systemctl", "is-active", "dbus"])
    # powered off, killed if it would not, unmounted, its directories removed

Why this shape:
- The bootstrap (mmdebstrap, ~2 min) runs once; the tarball and its unpacked tree are kept
  under .cache/e2e (git-ignored). Each container is an overlay on the unpacked tree, so a
  boot costs seconds and a test can never change the cache.
- `systemd-nspawn --boot --register=no --keep-unit` needs neither machined nor a systemd on
  the test host. By default the container shares the host's network namespace: the
  emulator on the host's 127.0.0.1 is reachable from inside, and himdsd inside listens on
  the host's 127.0.0.1:40342, so one such node runs at a time. With private_network=True
  it gets a namespace of its own (tests/e2e/netns.py): its own loopback, the emulator's
  ports forwarded in, its ports (sshd) exposed on the host's loopback; several run at once.
- SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1: the node's preflight wants cgroup v2, which the
  container gets even on a host that mounts the hybrid hierarchy.
- SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 and CAP_NET_ADMIN: /proc/sys is writable inside, so
  the package's `sysctl --system` works as on a machine, from the postinst and from the
  agent service alike. The kernel is the host's: the values the node
  sets are read before boot and put back after teardown (HOST_SYSCTLS).
- Kernel modules cannot be loaded from a container. When the host kernel has no module
  support at all (no /proc/modules: everything is built in), the container gets the
  modules.builtin a kernel package would ship, so `modprobe overlay` succeeds as it does
  for a built-in module. When the host has loadable modules, the harness loads overlay and
  br_netfilter on the host before boot (and leaves them loaded).
- Every container records its nspawn pid in its run directory: `make e2e-clean` finds and
  ends exactly those, unmounts and removes what a killed test run left.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import socket
import subprocess
import time

from tests.deb.debtools import SYSPATH, system_env  # Debian's tools, in a clean environment
from tests.e2e.netns import NetNamespace, NetNamespaceError
from tests.e2e.netns import leftover as netns_leftover

REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("AKS_FLEX_NODE_E2E_CACHE", REPO / ".cache" / "e2e"))
# The releases a node can boot (Debian 12 and 13): each has a base root of its own, made from
# that release's archive, so the node runs its own systemd, Python, SDK and containerd.
RELEASES = {"bookworm": "12", "trixie": "13"}
DEFAULT_RELEASE = "trixie"  # Debian's stable release: what `make demo` boots unless told
RELEASES_ENV = "AKS_FLEX_NODE_E2E_RELEASES"
MIRROR = os.environ.get("AKS_FLEX_NODE_E2E_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get("AKS_FLEX_NODE_E2E_SECURITY_MIRROR", "http://deb.debian.org/debian-security")

# What a node has before our package comes: systemd, and the package's dependencies (the
# tests install from the local repository only, never from Debian's archive). debconf-utils
# for preseeding, kmod/procps for modprobe and sysctl, perl for debconf's readline frontend.
BASE_PACKAGES = (
    # mount: Priority required, yet not in mmdebstrap's apt variant, and trixie's systemd no
    # longer pulls it in (the node's preflight and the agent call mount and umount).
    "mount", "systemd", "systemd-sysv", "dbus", "ca-certificates", "procps", "kmod", "iproute2",
    "python3", "python3-azure", "python3-configobj", "python3-debian", "python3-debconf", "python3-yaml",
    "ucf", "debconf-utils", "perl", "libterm-readline-gnu-perl",
    # What fleet engines need on a machine (issue 10): cloud-init and sshd are off in the
    # base (BASE_HOOKS), turned on by the scenarios that use them; Ansible's apt modules
    # import python3-apt on the node (they would install it from the node's sources, here
    # only our repository).
    "cloud-init", "openssh-server", "python3-apt",
    # needrestart and unattended-upgrades, as Ubuntu's server images have them (docs/ubuntu.md):
    # needrestart's apt hook is off in the base (BASE_HOOKS), the scenarios that meet it turn
    # it on (node.enable_needrestart); unattended-upgrades runs only when a scenario runs it.
    "needrestart", "unattended-upgrades",
    # The Ansible scenario's controller: the release's own ansible-core, run from this root
    # (tests/e2e/test_ansible.py), so each release's Ansible drives that release's nodes.
    "ansible-core",
    # Debian's node exporter, which serves the agent's textfile metrics over HTTP as a real
    # Prometheus scrape would read them (issue 27; tests/e2e/test_health.py). Its own
    # collectors' extra package (Recommends) stays out: mmdebstrap installs no Recommends.
    "prometheus-node-exporter",
)
# A release's own additions: Debian packages kubectl from 13 on (12 has none), and the
# health scenario reads the Node with it inside a trixie node (tests/e2e/test_cloud_init.py).
RELEASE_PACKAGES = {"trixie": ("kubectl",)}
# Run in the bootstrapped root (mmdebstrap --customize-hook). cloud-init.disabled: its
# systemd generator then leaves cloud-init out of the boot (cloud-init's docs, "How to
# disable cloud-init"). ssh masked: an sshd sharing the host's network would listen on the
# host's port 22. The host keys its postinst made stay: every node has the same ones,
# which is harmless for throwaway test machines (the tests keep their own known_hosts).
# needrestart's apt hook off: it runs `test -x /usr/lib/needrestart/apt-pinvoke && ...`
# (/etc/apt/apt.conf.d/99needrestart), so the script loses its execute bit; its files stay
# as the package shipped them, which piuparts' debsums check requires.
BASE_HOOKS = (
    'touch "$1"/etc/cloud/cloud-init.disabled',
    'ln -sf /dev/null "$1"/etc/systemd/system/ssh.service',
    'ln -sf /dev/null "$1"/etc/systemd/system/ssh.socket',
    'chmod a-x "$1"/usr/lib/needrestart/apt-pinvoke',
    # apt's daily timers (apt.systemd.daily: list updates, unattended-upgrade) masked: they
    # catch up at boot (Persistent=true) and would take dpkg's lock under a scenario's apt-get.
    'ln -sf /dev/null "$1"/etc/systemd/system/apt-daily.timer',
    'ln -sf /dev/null "$1"/etc/systemd/system/apt-daily-upgrade.timer',
)
# Debian's containerd, runc and CNI plugins: repacked as release tarballs (tests/e2e/mirror.py)
# so the node runs the real containerd under systemd.
RUNTIME_PACKAGES = ("containerd", "runc", "containernetworking-plugins")

# The kernel settings the node's system phase writes (aks_flex_node/steps/system.py):
# snapshotted on the host before a boot, restored after teardown.
HOST_SYSCTLS = (
    "net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.ipv4.ip_forward",
    "net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter", "vm.overcommit_memory",
    "kernel.panic", "kernel.panic_on_oops",
)
NODE_MODULES = ("overlay", "br_netfilter")
BOOT_TIMEOUT = 90
STOP_TIMEOUT = 30


class E2EError(Exception):
    pass


def check_release(release):
    """`release` when it is one the harness can boot, else an error naming the known ones."""
    if release not in RELEASES:
        raise E2EError(f"unknown Debian release {release!r}: the e2e harness boots "
                       f"{', '.join(f'{name} (Debian {version})' for name, version in RELEASES.items())}")
    return release


def selected_releases(environ=os.environ):
    """The releases the e2e scenarios run on: $AKS_FLEX_NODE_E2E_RELEASES (comma-separated),
    by default every one of RELEASES."""
    given = environ.get(RELEASES_ENV, "").strip()
    if not given:
        return tuple(RELEASES)
    chosen = [name.strip() for name in given.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in RELEASES]
    if unknown or not chosen:
        raise E2EError(f"{RELEASES_ENV}={given!r}: unknown release(s) {unknown or [given]}; "
                       f"known: {', '.join(RELEASES)}")
    return tuple(dict.fromkeys(chosen))


def _run(argv, timeout=600, check=True, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=kw.pop("env", system_env()),
                          **kw)
    if check and proc.returncode != 0:
        raise E2EError(f"{' '.join(map(str, argv))} exited {proc.returncode}\n"
                       f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


# ---- the cached base root ---------------------------------------------------------------

class BaseRoot:
    """The bootstrapped tree of one release (`suite`): .cache/e2e/base-<suite>-<key>.tar.zst,
    its unpacked copy, and the runtime .debs of the same suite (base-<suite>-<key>-runtime/,
    see runtime_debs).

    The key is a hash of the suite, the mirrors and the package lists, so a change of any of
    them builds a new one (and `make e2e-clean` drops old ones)."""

    def __init__(self, suite=DEFAULT_RELEASE, cache=CACHE, packages=BASE_PACKAGES):
        self.suite = check_release(suite)
        self.cache = pathlib.Path(cache)
        self.packages = tuple(packages) + RELEASE_PACKAGES.get(self.suite, ())
        key = hashlib.sha256(json.dumps([self.suite, MIRROR, SECURITY_MIRROR, self.packages,
                                         RUNTIME_PACKAGES, BASE_HOOKS]).encode()).hexdigest()[:12]
        self.tarball = self.cache / f"base-{self.suite}-{key}.tar.zst"
        self.tree = self.cache / f"base-{self.suite}-{key}"
        self.runtime = self.cache / f"base-{self.suite}-{key}-runtime"
        self.stamp = self.tree / ".unpacked"

    def ensure(self):
        if self.stamp.exists():
            return self.tree
        self.cache.mkdir(parents=True, exist_ok=True)
        # Several test workers start at once: one builds, the others wait for it.
        with open(self.cache / f"base-{self.suite}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.stamp.exists():
                return self.tree
            if not self.tarball.exists() or not self._runtime_found():
                self._bootstrap()
            if self.tree.exists():
                shutil.rmtree(self.tree)
            self.tree.mkdir()
            _run(["tar", "-C", str(self.tree), "--zstd", "-xpf", str(self.tarball)], timeout=900)
            self.stamp.write_text(str(self.tarball) + "\n")
        return self.tree

    def runtime_debs(self):
        """{package: .deb} of RUNTIME_PACKAGES as the base's own apt downloaded them: the
        suite's builds, whatever the host runs (a trixie or Ubuntu host's containerd would
        not run on bookworm's libc; trixie's containerd is 1.7, bookworm's 1.6)."""
        self.ensure()
        found = self._runtime_found()
        if not found:
            raise E2EError(f"no runtime .debs in {self.runtime}: run `make e2e-clean`, then again")
        return found

    def _runtime_found(self):
        found = {name: sorted(self.runtime.glob(f"{name}_*.deb")) for name in RUNTIME_PACKAGES}
        return {name: paths[-1] for name, paths in found.items()} if all(found.values()) else None

    def _bootstrap(self):
        partial = self.cache / (self.tarball.name.replace(".tar.zst", ".partial.tar.zst"))
        sources = [f"deb {MIRROR} {self.suite} main", f"deb {MIRROR} {self.suite}-updates main",
                   f"deb {SECURITY_MIRROR} {self.suite}-security main"]
        shutil.rmtree(self.runtime, ignore_errors=True)
        self.runtime.mkdir(parents=True)
        # The runtime .debs are downloaded (not installed) by the root's own apt and copied
        # out (mmdebstrap's sync-out). The tests must never reach Debian's archive: the
        # node's only source is the local repository each test adds, so sources.list goes.
        _run(["mmdebstrap", "--mode=root", "--variant=apt", "--include=" + ",".join(self.packages),
              "--customize-hook=mkdir \"$1\"/tmp/runtime-debs && chroot \"$1\" sh -c "
              "'cd /tmp/runtime-debs && apt-get -q download " + " ".join(RUNTIME_PACKAGES) + "'",
              f"--customize-hook=sync-out /tmp/runtime-debs {self.runtime}",
              "--customize-hook=rm -rf \"$1\"/tmp/runtime-debs \"$1\"/etc/apt/sources.list",
              "--customize-hook=echo e2e-node > \"$1\"/etc/hostname",
              *(f"--customize-hook={hook}" for hook in BASE_HOOKS),
              self.suite, str(partial), *sources], timeout=1800)
        os.replace(partial, self.tarball)


# ---- the host's kernel -------------------------------------------------------------------

def read_sysctls(keys=HOST_SYSCTLS):
    values = {}
    for key in keys:
        path = pathlib.Path("/proc/sys") / key.replace(".", "/")
        with contextlib.suppress(OSError):
            values[key] = path.read_text().strip()
    return values


def restore_sysctls(values):
    """Put the host's values back; returns the keys that could not be written."""
    failed = []
    for key, value in values.items():
        path = pathlib.Path("/proc/sys") / key.replace(".", "/")
        try:
            if path.read_text().strip() != value:
                path.write_text(value + "\n")
        except OSError:
            failed.append(key)
    return failed


# Containers that run at once (the fleet scenarios, `make e2e` with several workers) share
# the host's kernel: the snapshot is taken by the first one to boot and put back by the
# last one to go, recorded in SYSCTL_HOLDERS with the run directories holding it (under a
# lock, since workers are separate processes). A holder whose run directory is gone was
# ended by `make e2e-clean` and no longer counts.
SYSCTL_HOLDERS = CACHE / "host-sysctls.json"


@contextlib.contextmanager
def _holders_locked():
    SYSCTL_HOLDERS.parent.mkdir(parents=True, exist_ok=True)
    with open(SYSCTL_HOLDERS.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            record = json.loads(SYSCTL_HOLDERS.read_text())
        except (OSError, ValueError):
            record = {"values": None, "holders": []}
        record["holders"] = [h for h in record["holders"] if os.path.isdir(h)]
        yield record
        if record["holders"]:
            SYSCTL_HOLDERS.write_text(json.dumps(record))
        else:
            SYSCTL_HOLDERS.unlink(missing_ok=True)


def hold_host_sysctls(run_dir):
    """The host's values from before any running container changed them (read now when
    none runs); run_dir is counted as a holder until release_host_sysctls."""
    with _holders_locked() as record:
        if not record["holders"]:
            record["values"] = read_sysctls()
        record["holders"].append(str(run_dir))
        return dict(record["values"])


def release_host_sysctls(run_dir, values=None):
    """Drop run_dir as a holder; the last holder puts the values back. Returns the keys
    that could not be written."""
    with _holders_locked() as record:
        record["holders"] = [h for h in record["holders"] if h != str(run_dir)]
        if record["holders"]:
            return []
        return restore_sysctls(record["values"] or values or {})


def prepare_kernel_modules(root):
    """Make the node's modules loadable (see the module docstring); returns what was done."""
    release = platform.release()
    if os.path.exists("/proc/modules"):
        loaded = pathlib.Path("/proc/modules").read_text()
        for module in NODE_MODULES:
            if f"{module} " not in loaded:
                _run(["modprobe", module], check=False)
        host_modules = pathlib.Path("/lib/modules") / release
        return f"host modules loaded ({host_modules})"
    target = pathlib.Path(root) / "lib/modules" / release
    target.mkdir(parents=True, exist_ok=True)
    (target / "modules.builtin").write_text(
        "kernel/fs/overlayfs/overlay.ko\nkernel/net/bridge/br_netfilter.ko\n")
    (target / "modules.order").write_text("")
    return f"built-in modules listed in {target}/modules.builtin"


# ---- mounts and processes ----------------------------------------------------------------

def mounts_under(path):
    """Mount points at or below `path`, read with the library's mountinfo parser (every
    octal escape decoded), deepest last."""
    from aks_flex_node.host import mounts

    return [m.point for m in mounts.mounts_below(mounts.read_mounts(), os.path.realpath(path))]


def mount_overlay(lower, directory):
    """`lower` seen writable at directory/merged (its changes in directory/upper), the tree
    itself never written; returns the merged path. unmount_all(merged) undoes it."""
    directory = pathlib.Path(directory)
    for sub in ("upper", "work", "merged"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    merged = directory / "merged"
    _run(["mount", "-t", "overlay", "overlay", "-o",
          f"lowerdir={lower},upperdir={directory / 'upper'},workdir={directory / 'work'}", str(merged)])
    return merged


def own_cgroup(run_dir):
    """A cgroup v2 directory of one container's own, under this process's cgroup: the
    container's nspawn moves into it before it starts. `systemd-nspawn --keep-unit` puts the
    container's systemd in payload/ under the cgroup it runs in (systemd-nspawn(1), --keep-unit;
    nspawn-cgroup.c), so two containers started from one cgroup shared payload/: each one's
    systemd managed the other's units' processes, which it cannot see (cgroup.procs lists them
    as 0): `systemctl kill` failed with EIO and a unit's stop waited TimeoutStopSec for
    "processes still around after SIGKILL". The path, recorded in RUN_DIR/cgroup; None where
    there is no writable unified hierarchy (the containers then share it, as before)."""
    try:
        with open("/proc/self/cgroup") as f:
            own = next((line[3:].strip() for line in f if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            # mountinfo(5): "... mount-point ... - fstype source options"; the whole hierarchy only
            mounts = [line.split() for line in f]
        mount = next((fields[4] for fields in mounts if "-" in fields
                      and fields[fields.index("-") + 1] == "cgroup2" and fields[3] == "/"), None)
        if own is None or mount is None:
            return None
        path = os.path.join(mount, own.lstrip("/"), f"aks-e2e-{pathlib.Path(run_dir).name}")
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    (pathlib.Path(run_dir) / "cgroup").write_text(path + "\n")
    return path


def remove_cgroup(run_dir):
    """Remove the container's cgroup (own_cgroup) and what nspawn made in it, deepest first;
    a cgroup that still holds a process stays (rmdir(2) refuses it)."""
    with contextlib.suppress(OSError):
        path = (pathlib.Path(run_dir) / "cgroup").read_text().strip()
        for directory, _dirs, _files in os.walk(path, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def unmount_all(path):
    """Unmount everything under path, deepest first (lazily when a plain umount fails).
    Returns (the mount points unmounted, those still mounted)."""
    unmounted = []
    for mount_point in sorted(mounts_under(path), key=lambda p: p.count("/"), reverse=True):
        if _run(["umount", mount_point], check=False).returncode != 0:
            _run(["umount", "-l", mount_point], check=False)
        unmounted.append(mount_point)
    return unmounted, mounts_under(path)


def port_in_use(port, host="127.0.0.1"):
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) == 0


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def netns_name(run_dir):
    """The network namespace of the container in run_dir: named after it (unique per run)."""
    return "aks-" + re.sub(r"[^A-Za-z0-9_.-]", "_", pathlib.Path(run_dir).name)[-40:]


def nsenter_argv(leader, argv, env=None):
    """The host argv that runs `argv` in the container whose systemd is `leader`, as root
    with a clean environment (`env` added)."""
    base_env = {"PATH": SYSPATH, "LANG": "C.UTF-8", "HOME": "/root", "TERM": "dumb"}
    base_env.update(env or {})
    return ["nsenter", "-t", str(leader), "-a", "--", "/usr/bin/env", "-i",
            *(f"{k}={v}" for k, v in base_env.items()), *argv]


class Container:
    """One booted container on an overlay of `base`, living in `run_dir`.

    `binds` are (host path, container path, read_only) triples given to nspawn.
    private_network: a network namespace of its own (see the module docstring), into which
    each host port of `forward_ports` is forwarded; expose() reaches its ports from the host.
    before_boot(container) runs once the overlay is mounted, before systemd starts (files a
    first boot reads: a cloud-init seed, an unmasked unit).
    system_calls: system calls (or @groups) nspawn's seccomp filter is to let through besides
    its default allow list (systemd-nspawn(1), --system-call-filter), for a node that runs
    containers (runc: @keyring, bpf)."""

    def __init__(self, base, run_dir, name="aks-e2e", binds=(), hostname="e2e-node", private_network=False,
                 forward_ports=(), before_boot=None, system_calls=()):
        self.base = pathlib.Path(base)
        self.run_dir = pathlib.Path(run_dir)
        self.name = name
        self.binds = tuple(binds)
        self.hostname = hostname
        self.netns = NetNamespace(netns_name(self.run_dir)) if private_network else None
        self.forward_ports = tuple(forward_ports)
        self.before_boot = before_boot
        self.system_calls = tuple(system_calls)
        self.root = self.run_dir / "merged"
        self.log_path = self.run_dir / "nspawn.log"
        self.process = None
        self.leader = None
        self.sysctls = {}
        self.notes = []

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc):
        self.destroy()

    def start(self):
        self._mount()
        (self.root / "etc/hostname").write_text(self.hostname + "\n")
        # What the installer writes on a real machine (mmdebstrap writes no /etc/hosts, and
        # without it "localhost", which HIMDS clients use, does not resolve).
        (self.root / "etc/hosts").write_text(
            f"127.0.0.1\tlocalhost\n127.0.1.1\t{self.hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
        self.notes.append(prepare_kernel_modules(self.root))
        if self.before_boot:
            self.before_boot(self)
        self.sysctls = hold_host_sysctls(self.run_dir)
        (self.run_dir / "sysctls.json").write_text(json.dumps(self.sysctls))
        if self.netns:
            (self.run_dir / "netns").write_text(self.netns.name + "\n")  # for clean_run_dir
            self.netns.create()
            for port in self.forward_ports:
                self.netns.forward_in(port)
        return self._boot()

    def reboot(self, timeout=STOP_TIMEOUT, boot_timeout=BOOT_TIMEOUT):
        """Power off and boot the same overlay again, as a machine reboots: what is on its
        disk (the overlay's upper layer) stays, everything that ran is gone. The network
        namespace and its forwarded ports stay, as a machine's network does."""
        self.poweroff(timeout)
        _unmounted, left = unmount_all(self.root)
        if left:
            raise E2EError(f"cannot reboot: still mounted after the poweroff: {left}")
        self.process = self.leader = None
        self._mount()
        return self._boot(boot_timeout)

    def _mount(self):
        mount_overlay(self.base, self.run_dir)

    def _boot(self, boot_timeout=BOOT_TIMEOUT):
        # CAP_NET_ADMIN: nspawn keeps it only with a private network, and a machine's root
        # (so the agent service, which applies the node's net.* sysctls) has it.
        argv = ["systemd-nspawn", "-D", str(self.root), "--boot", "--register=no", "--keep-unit",
                f"--machine={self.name}", "--console=passive", "--capability=CAP_NET_ADMIN",
                *([f"--system-call-filter={' '.join(self.system_calls)}"] if self.system_calls else [])]
        for host_path, container_path, read_only in self.binds:
            argv.append(f"--bind{'-ro' if read_only else ''}={host_path}:{container_path}")
        if self.netns:
            argv.append(f"--network-namespace-path={self.netns.path}")
        env = system_env(SYSTEMD_NSPAWN_UNIFIED_HIERARCHY="1", SYSTEMD_NSPAWN_API_VFS_WRITABLE="1")
        cgroup = own_cgroup(self.run_dir)
        if cgroup:
            # The shell becomes nspawn (exec: the same pid) once it is in the container's own cgroup.
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" || echo "aks-e2e: not moved into $0" >&2; exec "$@"',
                    os.path.join(cgroup, "cgroup.procs"), *argv]
        with open(self.log_path, "ab") as log:
            # Its own session: a ^C in the terminal reaches pytest, which tears down in order.
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                            start_new_session=True)
        (self.run_dir / "nspawn.pid").write_text(f"{self.process.pid}\n")
        self.leader = self._wait_leader()
        (self.run_dir / "leader.pid").write_text(f"{self.leader}\n")
        try:
            state = self.run(["systemctl", "is-system-running", "--wait"], check=False, timeout=boot_timeout)
        except subprocess.TimeoutExpired:
            # Say what the boot waits for: systemd's pending jobs.
            jobs = self.run(["systemctl", "list-jobs", "--no-pager"], check=False, timeout=30)
            raise E2EError(f"the container did not boot in {boot_timeout} s; systemd's jobs:\n"
                           f"{jobs.stdout[-3000:]}{jobs.stderr[-1000:]}\n{self.log_tail()}") from None
        # "degraded" is fine: a unit a container cannot run (e.g. a kernel feature) failed.
        if state.stdout.strip() not in ("running", "degraded"):
            raise E2EError(f"the container did not boot: systemctl is-system-running says "
                           f"{state.stdout.strip() or state.stderr.strip()!r}\n{self.log_tail()}")
        if self.path(f"/lib/modules/{platform.release()}/modules.builtin").exists():
            # kmod reads the binary index depmod makes of modules.builtin.
            self.run(["depmod", platform.release()])
        return self

    def _wait_leader(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise E2EError(f"systemd-nspawn exited {self.process.returncode}:\n{self.log_tail()}")
            kids = children(self.process.pid)
            if kids and self._is_booted_systemd(kids[0]):
                return kids[0]
            time.sleep(0.1)
        raise E2EError(f"no systemd in the container after 30 s:\n{self.log_tail()}")

    @staticmethod
    def _is_booted_systemd(pid):
        try:
            # systemd re-execs itself from nspawn's child: wait until it has, and its socket is up.
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            return False
        return exe.endswith("/systemd") and os.path.exists(f"/proc/{pid}/root/run/systemd/private")

    def log_tail(self, lines=30):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def poweroff(self, timeout=STOP_TIMEOUT):
        """systemctl poweroff and wait for nspawn to exit; SIGKILL the container's init if
        it does not (its PID namespace, and every process in it, goes with it)."""
        if self.process is None or self.process.poll() is not None:
            return
        if self.leader and pid_alive(self.leader):
            self.run(["systemctl", "poweroff", "--no-block"], check=False, timeout=30)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            if self.leader and pid_alive(self.leader):
                os.kill(self.leader, signal.SIGKILL)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def destroy(self):
        """Power off, unmount, remove the run directory, restore the host's sysctls: each
        step runs even if an earlier one failed."""
        problems = []
        with contextlib.suppress(Exception):
            self.poweroff()
        remove_cgroup(self.run_dir)
        if self.netns:
            try:
                self.netns.delete()
            except NetNamespaceError as e:
                problems.append(str(e))
        _unmounted, left = unmount_all(self.run_dir)
        if left:
            problems.append(f"still mounted: {left}")
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        failed = release_host_sysctls(self.run_dir, self.sysctls) if self.sysctls else []
        if failed:
            problems.append(f"host sysctls not restored: {failed}")
        if problems:
            raise E2EError("; ".join(problems))

    def expose(self, port):
        """A port on the host's 127.0.0.1 that reaches 127.0.0.1:port in the container (a
        private network's only way in)."""
        if not self.netns:
            raise E2EError("expose() needs private_network=True: the container shares the host's ports")
        return self.netns.expose(port)

    # -- inside ---------------------------------------------------------------------------

    def command(self, argv, env=None):
        return nsenter_argv(self.leader, argv, env)

    def run(self, argv, check=True, timeout=300, input=None, env=None):
        """Run argv (a list, or a string for sh -c) in the container; a CompletedProcess."""
        if isinstance(argv, str):
            argv = ["/bin/sh", "-c", argv]
        proc = subprocess.run(self.command(argv, env), capture_output=True, text=True, timeout=timeout,
                              input=input, env=system_env())
        if check and proc.returncode != 0:
            raise E2EError(f"in the container: {' '.join(argv)} exited {proc.returncode}\n"
                           f"stdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}")
        return proc

    def path(self, node_path):
        """The host path of a node path (the overlay's merged view)."""
        return self.root / node_path.lstrip("/")

    def write(self, node_path, data, mode=0o644):
        path = self.path(node_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode)

    def copy_in(self, host_path, node_path, mode=None):
        data = pathlib.Path(host_path).read_bytes()
        self.write(node_path, data, mode if mode is not None else os.stat(host_path).st_mode & 0o777)

    def read(self, node_path):
        path = self.path(node_path)
        return path.read_bytes() if path.exists() else None

    def is_active(self, unit):
        return self.run(["systemctl", "is-active", unit], check=False).stdout.strip()

    def is_enabled(self, unit):
        return self.run(["systemctl", "is-enabled", unit], check=False).stdout.strip()

    def processes(self):
        """The pids in the container's PID namespace, as the host sees them."""
        try:
            ns = os.readlink(f"/proc/{self.leader}/ns/pid")
        except OSError:
            return []
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                        out.append(int(entry))
        return out


def _recorded_pid(run_dir, name, comms):
    """The pid in run_dir/name when it is alive and still one of `comms` (pids get reused)."""
    try:
        pid = int((pathlib.Path(run_dir) / name).read_text())
        comm = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if comm in comms and pid_alive(pid) else None


def power_off_recorded(run_dir, timeout=STOP_TIMEOUT):
    """Power off the container that run_dir records, booted by another process (`make demo`),
    and wait for its systemd-nspawn to exit. True when it did (or nothing was running)."""
    leader = _recorded_pid(run_dir, "leader.pid", ("systemd",))
    nspawn = _recorded_pid(run_dir, "nspawn.pid", ("systemd-nspawn",))
    if leader:
        _run(["nsenter", "-t", str(leader), "-a", "--", "systemctl", "poweroff", "--no-block"], check=False,
             timeout=30)
    deadline = time.monotonic() + timeout
    while nspawn and pid_alive(nspawn) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not (nspawn and pid_alive(nspawn))


def clean_run_dir(run_dir):
    """End what a run directory records: its nspawn and systemd (SIGKILL, by pid, only when
    still those programs), its mounts, its directory; put the host's sysctls back.
    Returns what was done."""
    run_dir = pathlib.Path(run_dir)
    report = []
    for name, comms in (("leader.pid", ("systemd",)), ("nspawn.pid", ("systemd-nspawn",))):
        pid = _recorded_pid(run_dir, name, comms)
        if pid:
            os.kill(pid, signal.SIGKILL)
            report.append(f"killed {comms[0]} {pid}")
    if report:
        time.sleep(0.5)
    remove_cgroup(run_dir)
    unmounted, left = unmount_all(run_dir)
    report += [f"unmounted {mount_point}" for mount_point in unmounted]
    with contextlib.suppress(OSError):
        if netns_leftover((run_dir / "netns").read_text().strip()):
            report.append(f"deleted network namespace {netns_name(run_dir)}")
    with contextlib.suppress(OSError, ValueError):
        release_host_sysctls(run_dir, json.loads((run_dir / "sysctls.json").read_text()))
    if left:
        # Never remove through a mount: the bind mounts are host directories.
        raise E2EError(f"still mounted under {run_dir}: {left}")
    shutil.rmtree(run_dir, ignore_errors=True)
    report.append(f"removed {run_dir}")
    return report


def clean_leftovers(run_base):
    """clean_run_dir for every run directory under run_base: what killed test runs left."""
    run_base = pathlib.Path(run_base)
    report = []
    if run_base.exists():
        for run_dir in sorted(p for p in run_base.iterdir() if p.is_dir()):
            report += clean_run_dir(run_dir)
    return report
