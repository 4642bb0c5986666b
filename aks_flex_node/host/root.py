"""The Host: the one gateway from aks_flex_node to the machine.

A Host has a root. With root "/" it is the live machine. With any other root it is an
image being prepared (or a test's temp dir): files are read and written under the root,
and commands that act on the live system (systemctl, sysctl, modprobe, swapoff) are
skipped, or run from the stand-in directory named by AKS_FLEX_NODE_HOST_BIN in tests.
Callers always speak in node paths ("/etc/kubernetes/..."); the Host adds the root.
"""

import logging
import os
import posixpath
import stat
from pathlib import PurePosixPath

from aks_flex_node.host import careful_read, fs, mounts, observed, originals, run_lock_file, temps, tree
from aks_flex_node.host.kernel import Kernel
from aks_flex_node.host.run import (CommandError, SkippedRun, check_argv, display,
                                    resolve_executable, run_command)
from aks_flex_node.host.staging import StagedFile
from aks_flex_node.host.systemd import Systemd
from aks_flex_node.paths import Paths

log = logging.getLogger(__name__)

# Names a directory of stand-in executables for live-system commands under a root prefix.
HOST_BIN_ENV = "AKS_FLEX_NODE_HOST_BIN"
# Given to stand-ins so they know which root the run is for.
ROOT_ENV = "AKS_FLEX_NODE_ROOT"


class Host:
    def __init__(self, root="/", env=None):
        self.paths = Paths(root)
        self.root = self.paths.root
        # The environment commands inherit (and where proxies and stand-ins are looked up).
        self.env = dict(os.environ if env is None else env)
        self.systemd = Systemd(self)
        self.kernel = Kernel(self)

    def __repr__(self):
        return f"Host(root={str(self.root)!r})"

    @property
    def is_live(self):
        """True when this Host is the running machine itself (root "/")."""
        return self.paths.is_live

    # ---- paths ---------------------------------------------------------------------

    def path(self, p):
        """The real path of node path `p` (absolute, no '..'): root + p."""
        return self.paths.real(p)

    def _writable(self, p):
        """path(p), refusing a node path that a symlink in its parents leads outside
        the root (e.g. an image's absolute /var/run -> /run would write on the build host)."""
        real = self.path(p)
        if self.is_live:
            return real
        parent = os.path.realpath(real.parent)
        root = os.path.realpath(self.root)
        if parent != root and not parent.startswith(root.rstrip("/") + "/"):
            raise fs.HostFileError(
                f"refusing to change {p} under {self.root}: a symlink in its parents leads "
                f"outside the root (to {parent})",
                code="outside-root",
            )
        return real

    # ---- files ---------------------------------------------------------------------

    def write_file(self, path, content, mode=0o644, owner=None):
        """Atomically make `path` hold `content` with `mode` (see fs.write_file).

        `owner` is (uid, gid), "user:group" or "user"; names are looked up in the root's
        /etc/passwd and /etc/group. Returns "created", "content", "mode", "owner",
        "mode+owner" or None.
        """
        target = self._writable(path)
        change = fs.write_file(target, content, mode, self._owner_ids(owner))
        if change:
            log.debug("%s %s (mode %o)", change, path, mode)
        return change

    def stage(self, path):
        """`path` staged (host/staging.py): written beside it in full, renamed over it by
        its commit, removed by its discard."""
        return StagedFile(self._writable(path))

    def remove_temps(self, path, writer):
        """Remove the temp files run `writer` (a pid; a run the caller knows is over) left
        beside `path` while writing or staging it; returns their real paths."""
        return temps.remove_stale_temps(self._writable(path), writer)

    def write_symlink(self, path, target):
        """Atomically make `path` a symlink to the relative `target` (see fs.write_symlink)."""
        change = fs.write_symlink(self._writable(path), target)
        if change:
            log.debug("%s %s -> %s", change, path, target)
        return change

    def read_link(self, path):
        return fs.read_link(self.path(path))

    def ensure_dir(self, path, mode=0o755):
        return fs.ensure_dir(self._writable(path), mode)

    def remove(self, path):
        """Remove a file, symlink or empty directory; False when it was already gone.
        A directory with content raises HostFileError: trees go through remove_tree."""
        if self.path(path) == self.root:
            raise ValueError(f"path = {path!r}: refusing to remove the root")
        return fs.remove(self._writable(path))

    def remove_tree(self, path):
        """Remove node path `path` with everything below it, never crossing a mount point.

        Returns leftovers, one message each; [] when it is gone (or was never there).
        What is mounted below is unmounted first; when a mount stays, or `path` is itself
        a mount point, nothing under it is removed and the messages say what is mounted,
        for the operator to deal with. kubeadm reset stops the same way rather than
        delete into an active mount (kubernetes/kubernetes,
        cmd/kubeadm/app/cmd/phases/reset/unmount_linux.go).
        """
        if self.path(path) == self.root:
            raise ValueError(f"path = {path!r}: refusing to remove the root")
        real = self._writable(path)
        if not fs.exists(real):
            return []
        node = str(PurePosixPath(path))
        top = self._as_mounted(path)
        mounted = self.mounts_below(path)
        on_top = [m for m in mounted if m.point == top]
        if on_top:
            return [f"{node} is a mount point ({on_top[-1].fstype} {on_top[-1].source}): "
                    "not removed"]
        if mounted:  # the common case, nothing mounted, reads the mount table once
            leftovers = self.unmount_below(path)
            if leftovers:
                return leftovers
        leftovers = tree.remove_tree(real, shown=node)
        if not leftovers:
            log.info("removed %s", node)
        return leftovers

    def open_lock(self, path, writable=True):
        """A descriptor of the lock file at node path `path`, made 0600 when missing; a
        symlink, FIFO, device or socket there is refused, never followed or waited on
        (run_lock_file.py). A link in its parents out of the root is refused too."""
        return run_lock_file.open_lock(self._writable(path), str(PurePosixPath(path)), writable)

    def look(self, path):
        """What is at node path `path`, from lstat alone (originals.Found: kind, mode,
        owner, size, a link's text), or None. Nothing is opened or followed."""
        return originals.look(self.path(path))

    def keep_original(self, path, backup):
        """Copy the regular file at node path `path` to node path `backup` (0600), streamed,
        never through a link or from a FIFO (originals.keep)."""
        originals.keep(self.path(path), self._writable(backup))

    def put_back(self, path, kind, *, mode=None, owner=None, link=None):
        """Make node path `path` again the symlink or FIFO that was there (originals.put_back)."""
        originals.put_back(self._writable(path), kind, mode=mode, owner=owner, link=link)

    def read_bytes(self, path):
        return fs.read_bytes(self.path(path))

    def read_text(self, path):
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8")

    def read_carefully(self, path, max_bytes, **how):
        """The bytes of the regular file at node path `path`, read by careful_read.read
        (no FIFO waited on, at most `max_bytes`; `how`: private, owners, follow), or
        careful_read.Unsafe saying why not."""
        return careful_read.read(str(self.path(path)), max_bytes, **how)

    def read_state(self, path, max_bytes):
        """The bytes of a state file of ours at node path `path` by the careful read (no
        link followed, no FIFO waited on, at most `max_bytes`), None when it is not there;
        HostFileError otherwise, its `code` careful_read's (symlink, not-regular, too-large,
        cannot-open) and its message why alone, for the caller to name the file."""
        try:
            return self.read_carefully(path, max_bytes)
        except careful_read.Unsafe as unsafe:
            if unsafe.code == "absent":
                return None
            raise fs.HostFileError(unsafe.why, code=unsafe.code) from None

    def exists(self, path):
        return fs.exists(self.path(path))

    def file_digest(self, path, algorithm="sha256"):
        """The hex digest (hashlib's `algorithm`) of the regular file at node path `path`, read
        in chunks; None when nothing is there or no regular file is (fs.file_digest)."""
        return fs.file_digest(self.path(path), algorithm)

    def replace(self, path, source):
        """Rename node path `source` over node path `path` (one file system: atomic, as
        rename(2) is), then sync the directory; a directory at `path` is refused."""
        target = self._writable(path)
        if self.kind(path) == "dir":
            raise fs.HostFileError(f"cannot write {path}: it is a directory, expected a file",
                                   code="is-a-directory")
        try:
            os.replace(self._writable(source), target)
        except OSError as e:
            raise fs.HostFileError(f"cannot move {source} to {path}: {e.strerror or e}") from e
        fs.sync_dir(os.path.dirname(target), target)

    def is_dir(self, path):
        observed.looked(self.path(path))  # the drift probe's record of a stat-only look (observed.py)
        return os.path.isdir(self.path(path))

    def lstat(self, path):
        """The os.stat_result of node path `path` itself (a link is not followed), or None
        when nothing is there."""
        observed.looked(self.path(path))
        try:
            return os.lstat(self.path(path))
        except FileNotFoundError:
            return None

    def kind(self, path):
        """What is at node path `path`, not following a link: "dir", "file", "link",
        "other" (a FIFO, a socket, a device) or None (nothing)."""
        st = self.lstat(path)
        if st is None:
            return None
        for test, name in ((stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"), (stat.S_ISLNK, "link")):
            if test(st.st_mode):
                return name
        return "other"

    def mode(self, path):
        """The permission bits of node path `path` (a link followed, as a write would)."""
        observed.looked(self.path(path))
        return stat.S_IMODE(os.stat(self.path(path)).st_mode)

    def listdir(self, path):
        """The names in directory `path`, sorted, or None when it is not there."""
        try:
            return sorted(os.listdir(self.path(path)))
        except FileNotFoundError:
            return None

    def remove_empty_dir(self, path):
        """Remove directory `path` if it is empty: True when removed, False when it was not
        there; OSError (ENOTEMPTY, ENOTDIR) when something is in it or it is no directory."""
        try:
            os.rmdir(self._writable(path))
        except FileNotFoundError:
            return False
        return True

    def _owner_ids(self, owner):
        if owner is None:
            return None
        if isinstance(owner, tuple) and len(owner) == 2 \
                and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in owner):
            return owner
        if isinstance(owner, str) and owner:
            user, _, group = owner.partition(":")
            uid, primary_gid = self._lookup_user(user, owner)
            gid = self._lookup_group(group, owner) if group else primary_gid
            return uid, gid
        raise ValueError(f"owner = {owner!r}: expected (uid, gid), 'user:group' or 'user'")

    def _account_entries(self, name):
        text = self.read_text(f"/etc/{name}") or ""
        return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]

    def _lookup_user(self, user, owner):
        for fields in self._account_entries("passwd"):
            if len(fields) >= 4 and fields[0] == user:
                return int(fields[2]), int(fields[3])
        raise ValueError(f"owner = {owner!r}: no user {user!r} in {self.path('/etc/passwd')}")

    def _lookup_group(self, group, owner):
        for fields in self._account_entries("group"):
            if len(fields) >= 3 and fields[0] == group:
                return int(fields[2])
        raise ValueError(f"owner = {owner!r}: no group {group!r} in {self.path('/etc/group')}")

    # ---- mounts --------------------------------------------------------------------

    def _as_mounted(self, p):
        """The real path of node path `p` as the mount table spells it: symlinks in its
        parents resolved (a live /var/run/x is listed as /run/x), `p` itself not followed."""
        real = self.path(p)
        if real.parent == real:
            return str(real)
        return os.path.join(os.path.realpath(real.parent), real.name)

    def mounts_below(self, path, include_self=True):
        """The mounts at (when `include_self`) or strictly below node path `path`, from
        this process's mount table (mounts belong to the running kernel, whatever the root)."""
        try:
            table = mounts.read_mounts()
        except (OSError, mounts.MountinfoError) as e:
            raise fs.HostFileError(f"cannot read the mount table {mounts.MOUNTINFO}: {e}") from e
        return mounts.mounts_below(table, self._as_mounted(path), include_self)

    def unmount_below(self, path):
        """Unmount everything strictly below node path `path`, children before parents;
        returns one message for each mount still there afterwards ([] when none is)."""
        top, node = self._as_mounted(path), str(PurePosixPath(path))
        failures = {}

        def shown(mount):  # the node path of its mount point, for messages
            return posixpath.normpath(posixpath.join(node, os.path.relpath(mount.point, top)))

        for mount in mounts.unmount_order(self.mounts_below(path, include_self=False)):
            try:
                result = self.run_system(["umount", mount.point], timeout=60)
            except CommandError as e:
                failures[mount.point] = e.message
                continue
            if result.skipped:
                failures[mount.point] = "umount skipped under a root prefix"
            else:
                log.info("unmounted %s", shown(mount))
        leftovers = []
        for mount in self.mounts_below(path, include_self=False):
            why = failures.get(mount.point)
            leftovers.append(f"{shown(mount)} is still mounted ({mount.fstype} {mount.source})"
                             + (f": {why}" if why else ""))
        return leftovers

    # ---- commands ------------------------------------------------------------------

    def run(self, argv, timeout=60, ok_codes=(0,), secrets=(), input=None, env=None):
        """Run a command (argv list) and return RunResult(returncode, stdout, stderr).

        `env` adds to (or overrides) the Host's environment. Raises CommandNotFound,
        CommandTimeout (a TemporaryError) or CommandError; see run.run_command.
        """
        full_env = dict(self.env)
        if env:
            full_env.update(env)
        return run_command(argv, env=full_env, timeout=timeout, ok_codes=ok_codes,
                           secrets=secrets, input=input)

    def run_installed(self, path, args=(), **kw):
        """Run the executable installed at node path `path` (below the root) with `args`:
        what a binary we installed says of itself (`kubelet --version`). See run()."""
        return self.run([str(self.path(path)), *args], **kw)

    def run_system(self, argv, **kw):
        """Run a command that acts on the live system (systemctl, sysctl, modprobe, swapoff).

        Under a root prefix it runs only when AKS_FLEX_NODE_HOST_BIN names a directory
        (argv[0] is then looked up there first); otherwise it is skipped, logged, and
        answered with a SkippedRun(0, "", "").
        """
        if self.is_live:
            return self.run(argv, **kw)
        argv = check_argv(argv)
        bin_dir = self.env.get(HOST_BIN_ENV)
        if bin_dir and os.path.isdir(bin_dir):
            stand_in = os.path.join(bin_dir, posixpath.basename(argv[0]))
            if os.path.isfile(stand_in) and os.access(stand_in, os.X_OK):
                argv = [stand_in] + argv[1:]
            env = dict(kw.pop("env", None) or {})
            env.setdefault(ROOT_ENV, str(self.root))
            return self.run(argv, env=env, **kw)
        if bin_dir:
            log.warning("%s=%s is not a directory; not running live-system commands",
                        HOST_BIN_ENV, bin_dir)
        log.info("skipped (root prefix %s): %s", self.root, display(argv, kw.get("secrets", ())))
        return SkippedRun(0, "", "")

    def which(self, command):
        """The executable `command` resolves to (under a root prefix, a stand-in from
        AKS_FLEX_NODE_HOST_BIN first), or None."""
        bin_dir = self.env.get(HOST_BIN_ENV)
        if not self.is_live and bin_dir and os.path.isdir(bin_dir):
            found = resolve_executable(os.path.join(bin_dir, posixpath.basename(command)), None)
            if found:
                return found
        return resolve_executable(command, self.env.get("PATH", os.defpath))
