"""One cell's world: its own emulator, a scratch root configured against it, the stand-ins,
and what the fault matrix looks at on that root (snapshots, normalized for comparison with
another cell's, and runs of the CLI that can be watched phase by phase and killed).

Every cell has its own emulator (fault rules are global to an emulator, so cells sharing
one would fault each other) and its own root, so cells run in parallel.
"""

import base64
import hashlib
import json
import os
import pathlib
import pty
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

from tests import harness
from tests.emulator import constants as C
from tests.emulator_fixtures import FakeHost, start_emulator, stop_fake_units

CLI_TIMEOUT = 180
# Run state of ours whose content changes from run to run (timestamps, pids): compared by
# "is it whole" (JSON parses), never by content.
VOLATILE = ("/var/lib/aks-flex-node/ledger.json", "/var/lib/aks-flex-node/status.json",
            "/var/lib/aks-flex-node/provision.complete", "/var/lib/aks-flex-node/lock",
            "/var/lib/aks-flex-node/token-cache.json", "/var/lib/aks-flex-node/join-pending",
            # issue 27: what the runs reported (counters, times, the conditions' digest)
            "/var/lib/aks-flex-node/metrics.json", "/var/lib/aks-flex-node/node-report.json",
            # agent-pool mode: the bootstrap token is minted per call (JSON: checked whole).
            "/var/lib/kubelet/bootstrap-kubeconfig")
# The kubelet's own client certificates (agent-pool mode): a new key, serial and dated file
# name each run, the kubelet's to write (tests/fakes/kubelet.py), not ours.
VOLATILE_DIRS = ("/run/aks-flex-node/", "/var/lib/kubelet/pki/")
# What an unbootstrap keeps on purpose: the run's outcome for `status` and the lock.
KEPT_AFTER_UNBOOTSTRAP = {"/var/lib/aks-flex-node", "/var/lib/aks-flex-node/status.json",
                          "/var/lib/aks-flex-node/provision.complete", "/var/lib/aks-flex-node/lock"}
# The kernel's and the test's, not the node's files.
NOT_THE_NODES = ("/proc/", "/sys/")
# A write in progress: host/fs.py's atomic-write temp file, host/download.py's partial download.
TEMP_FILE = re.compile(r"^\.(download-.*\.part|.+\.tmp)$")
FILLER = ".faults-filler"  # what an ENOSPC cell fills a tmpfs with (not the node's)
# host/download.py names a cached checksum file after a hash of its URL, which holds this
# cell's emulator port: the same file in every cell once that part is masked.
CHECKSUM_NAME = re.compile(r"/checksums-[0-9a-f]{16}-")


def scratch_node(base, emu, himds_key_dir=None, config=None, env=None):
    """A scratch root under `base` configured against `emu`, with the stand-ins: a
    tests.harness.Node (its `.fake` is the FakeHost, `.wrapper` the exec-plugin wrapper).
    The root's /var/opt/azcmagent/tokens is the HIMDS key directory (`himds_key_dir`, by
    default the emulator's single-host one); `config` overrides config keys, `env` adds to
    the CLI's environment. Shared with the fleet simulation (tests/fleet)."""
    base = pathlib.Path(base)
    fake = FakeHost(emu, base / "host")
    root = str(fake.root)
    harness.prepare_root(root)
    keys = os.path.join(root, "var/opt/azcmagent/tokens")
    os.makedirs(os.path.dirname(keys), exist_ok=True)
    os.symlink(himds_key_dir or emu.himds_key_dir, keys)
    wrapper = harness.exec_plugin_wrapper(str(base))
    harness.write_config(root, emu, wrapper, extra=config)
    fake.env.update(env or {})
    node = harness.Node(root, str(fake.state_dir), emu, fake.env)
    node.fake, node.wrapper = fake, wrapper
    return node


# Agent-pool mode with the harness's operator credential (Owner on the cluster's group): it
# may call deleteMachines, so an unbootstrap leaves nothing of ours in Azure and the cells
# can be judged like Arc mode's. The least-privileged node identity is
# tests/integration/test_agent_pool.py's.
AGENT_POOL_CONFIG = {"join_mode": "agent-pool", "agent_pool": C.FLEX_POOL, "arc_tags": "", "himds_endpoint": ""}
# The cells' modes whose node joins an agent pool (tests/faults/pool_cells.py: its pool's upgrade).
AGENT_POOL_MODES = ("agent-pool", "pool-follow")


class CellNode:
    """A scratch node of its own: `emu`, `node` (tests.harness.Node), `base` (its directory),
    `mode` (its join mode)."""

    def __init__(self, base, mode="arc"):
        self.base = pathlib.Path(base)
        self.mode = mode
        self.emu = start_emulator(self.base / "emulator")
        self.node = scratch_node(self.base, self.emu, config=AGENT_POOL_CONFIG if mode in AGENT_POOL_MODES else None)
        self.root = self.node.root
        self.wrapper = self.node.wrapper
        self.fake = self.node.fake
        self.mounts = []
        with open(self.emu.ca_bundle, "rb") as f:
            ca = f.read()
        # Longest first: a URL's host:port must not be half-replaced by a shorter match.
        pairs = [(self.emu.arm.encode(), b"https://EMULATOR"),
                 # host:port alone: the pause image's registry (harness.write_config's pause_image)
                 (self.emu.arm.split("://", 1)[1].encode(), b"EMULATOR"),
                 (self.emu.himds.rsplit("/metadata", 1)[0].encode(), b"http://HIMDS"),
                 (str(self.base).encode(), b"/CELL"),
                 (ca, b"EMULATOR-CA-PEM"), (base64.b64encode(ca), b"EMULATOR-CA-B64")]
        pairs += [(url.encode(), b"https://APISERVER") for url in self.emu.apiservers.values()]
        self._replacements = sorted(pairs, key=lambda p: -len(p[0]))

    # -- the CLI ---------------------------------------------------------------------------

    def cli(self, *args, timeout=CLI_TIMEOUT):
        """(exit code, summary dict or None, stderr, seconds) of a `--json` run."""
        started = time.monotonic()
        try:
            proc = self.node.cli(*args, "--json", timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, None, f"timed out after {timeout}s", time.monotonic() - started
        try:
            summary = json.loads(proc.stdout)
        except ValueError:
            summary = None
        return proc.returncode, summary, proc.stderr, time.monotonic() - started

    def watched(self, *args):
        return WatchedRun(self, *args)

    # -- what is on the root ---------------------------------------------------------------

    def normalize(self, data):
        for old, new in self._replacements:
            data = data.replace(old, new)
        return data

    def snapshot(self, raw=False):
        """{node path: ("file", sha256, mode) | ("dir", mode) | ("link", target)} of the root,
        file contents normalized (this cell's ports, paths and CA replaced) unless `raw`."""
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                path = "/" + os.path.relpath(full, self.root)
                if not raw:
                    path = CHECKSUM_NAME.sub("/checksums-URLHASH-", path)
                if path.startswith(NOT_THE_NODES) or name == FILLER or name == "lost+found":
                    continue
                st = os.lstat(full)
                if os.path.islink(full):
                    target = os.readlink(full)
                    out[path] = ("link", target if raw else self.normalize(target.encode()).decode())
                elif os.path.isdir(full):
                    out[path] = ("dir", st.st_mode & 0o7777)
                elif not stat.S_ISREG(st.st_mode):  # a FIFO a cell planted: never opened (it would wait)
                    out[path] = ("special", stat.S_IFMT(st.st_mode), st.st_mode & 0o7777)
                else:
                    with open(full, "rb") as f:
                        data = f.read()
                    if not raw:
                        data = self.normalize(data)
                    out[path] = ("file", hashlib.sha256(data).hexdigest(), st.st_mode & 0o7777, len(data))
        return out

    def json_is_whole(self, path):
        try:
            with open(self.node.path(path), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return True
        if path.endswith(".json"):
            try:
                json.loads(data)
            except ValueError:
                return False
        return True

    # -- tmpfs for the ENOSPC cells --------------------------------------------------------

    def mount_tmpfs(self, node_path, size):
        """A `size`-byte tmpfs at node_path in the root, holding what was there before."""
        target = self.node.path(node_path)
        os.makedirs(target, exist_ok=True)
        keep = self.base / ("before-mount" + node_path.replace("/", "_"))
        shutil.copytree(target, keep, symlinks=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", target], check=True)
        self.mounts.append(target)
        shutil.copytree(keep, target, symlinks=True, dirs_exist_ok=True)
        return target

    def fill(self, target, leave):
        """Fill the tmpfs at `target` until `leave` bytes are free; returns the filler's path."""
        st = os.statvfs(target)
        free = st.f_bavail * st.f_frsize
        filler = os.path.join(target, FILLER)
        with open(filler, "wb") as f:
            f.write(b"\0" * max(0, free - leave))
        return filler

    def close(self, keep=False):
        stop_fake_units(self.node.state_dir)
        for target in reversed(self.mounts):
            if subprocess.run(["umount", target], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", target], capture_output=True)
        self.mounts = []
        self.emu.stop()
        if not keep:
            shutil.rmtree(self.base, ignore_errors=True)


def new_cell_node(name, parent=None, mode="arc"):
    base = tempfile.mkdtemp(prefix=f"faults-{re.sub(r'[^A-Za-z0-9]+', '-', name)}-", dir=parent)
    return CellNode(base, mode)


class WatchedRun:
    """A CLI run watched as it goes: stdout on a pty, so the phase printer announces each
    phase as it starts (`[ 3/16] arc ...`); stderr (-v: each action as it is applied) to a
    file. In its own process group, so kill -9 takes the stand-ins it runs with it."""

    def __init__(self, cell, *args):
        self.cell = cell
        master, slave = pty.openpty()
        self.master = master
        self.stderr_path = cell.base / f"stderr-{time.monotonic_ns()}.log"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "aks_flex_node", *args, "-v", "--root", cell.root],
                env=cell.node.env, cwd=harness.REPO, stdin=subprocess.DEVNULL, stdout=slave,
                stderr=err, start_new_session=True)
        os.close(slave)
        self.out = b""
        self.started = time.monotonic()

    def pump(self, wait=0.05):
        if self.master is None:
            time.sleep(wait)
            return
        ready, _, _ = select.select([self.master], [], [], wait)
        if ready:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the child closed the pty
                chunk = b""
            if not chunk:
                os.close(self.master)
                self.master = None
            self.out += chunk

    def phase_started(self, phase):
        return re.search(rb"\] " + re.escape(phase.encode()) + rb" +\.\.\.", self.out) is not None

    def actions_logged(self, phase):
        with open(self.stderr_path, "rb") as f:
            return len(re.findall(rb"engine\.runner: " + re.escape(phase.encode()) + rb": ", f.read()))

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        """kill -9 of the run and whatever it started in its group; its exit code."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.wait()

    def wait(self, timeout=CLI_TIMEOUT):
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
        while self.master is not None:
            self.pump(0)
        return code
