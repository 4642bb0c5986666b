"""The join lifecycle: join (leaving a former cluster first), leave, and the pending mark.

One owner for what the CLI, the agent and the Debian maintainer scripts all do:
maintainer/maintscript.py only turns debconf answers into calls here, and the agent finishes what
`mark_pending` leaves. Everything printed here goes to `out` (stderr in a maintainer
script, whose stdout is debconf's channel).
"""

import logging
import os
import shutil
import sys
import threading
import time

from aks_flex_node import config, paths
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.engine.lock import writing_state
from aks_flex_node.engine.status import INTERRUPTED, PENDING, RUNNING, StatusFile
from aks_flex_node.errors import ExitCode, FlexNodeError, TemporaryError
from aks_flex_node.host import HOST_BIN_ENV
from aks_flex_node.host.fs import HostFileError
from aks_flex_node.steps.kinds import open_ledger

log = logging.getLogger(__name__)

# What a failed join does to the package's configuration (docs/preseed.md, on_join_failure).
RETRY, FAIL = "retry-in-background", "fail-install"
AGENT_UNIT = "aks-flex-node-agent.service"
# The Azure Connected Machine agent's package (Microsoft's repository; ours Recommends it).
ARC_AGENT_PACKAGE = "azcmagent"
MAX_LEAVING = 4096  # the leave mark holds a reason, one line
# What identifies the join the ledger records (so a leave can name the former cluster).
JOINED_KEYS = ("cluster_resource_id", "machine_name", "subscription_id", "arc_resource_group")


# ---- the pending mark -----------------------------------------------------------------


def is_pending(host):
    """A join is wanted and has not succeeded yet: the agent keeps trying it."""
    return host.read_bytes(paths.PENDING) is not None


def mark_pending(host):
    with writing_state(host.path(paths.PENDING)):
        host.ensure_dir(paths.STATE_DIR, 0o700)
        host.write_file(paths.PENDING, b"", 0o600)


def clear_pending(host):
    """Cancel a pending join; True when one was pending."""
    with writing_state(host.path(paths.PENDING)):
        return host.remove(paths.PENDING)


def _leaving_write(host):
    return writing_state(host.path(paths.LEAVING))  # the mark's real path, for the error's remedy


def mark_leaving(host, reason):
    """The pool asked this node to leave (why: `reason`): written before the leave begins, so
    that a leave cut short is finished by the agent's next pass, never taken for a node to
    converge (its kubelet's credential may be gone already)."""
    with _leaving_write(host):
        host.ensure_dir(paths.STATE_DIR, 0o700)
        host.write_file(paths.LEAVING, reason.encode("utf-8", "replace")[:MAX_LEAVING], 0o600)


def leaving(host):
    """Why the pool asked this node to leave, while that leave is not finished; else None."""
    try:
        raw = host.read_state(paths.LEAVING, MAX_LEAVING)
    except HostFileError as err:  # not a file of ours: a leave is still owed, say so
        return f"{paths.LEAVING}: {err.message}"
    return None if raw is None else (raw.decode("utf-8", "replace") or "the pool asked")


def clear_leaving(host):
    with _leaving_write(host):
        return host.remove(paths.LEAVING)


def joined(host):
    """What the ledger says the node is joined to ({} when nothing), and whether anything
    the join made is still recorded."""
    ledger = open_ledger(host)
    return ledger.joined, bool(ledger.entries())


# ---- when a join can run ----------------------------------------------------------------


def live_system_blocker(host):
    """Why no join can run on this system now (image build, chroot, no systemd), or None."""
    if not host.is_live:
        if os.environ.get(HOST_BIN_ENV):
            return None  # tests: stand-ins for the live-system commands
        return f"the package is being installed into {host.root} (DPKG_ROOT), not on a running system"
    result = host.run(["ischroot"], ok_codes=(0, 1, 2)) if host.which("ischroot") else None
    if result is not None and result.returncode == 0:
        return "the package is being installed in a chroot"
    if not host.is_dir("/run/systemd/system"):
        return "systemd is not running (a container or an image build)"
    return None


def arc_agent_unconfigured(host):
    """Why the join must wait for the Arc agent's package, or None.

    apt installs a Recommends in the same run, but dpkg need not configure it first: when
    it configures us before azcmagent, himdsd is not running yet and a join would fail at
    the first token. dpkg-query reads dpkg's database with its journal of this run (the
    status file alone lags behind); db:Status-Abbrev's second letter is U (unpacked),
    F (half-configured) or H (half-installed) until the package's postinst has run
    (dpkg-query(1))."""
    if not shutil.which("dpkg-query"):
        return None
    admindir = host.path("/var/lib/dpkg")
    result = host.run(["dpkg-query", f"--admindir={admindir}", "-W", "-f=${db:Status-Abbrev}",
                       ARC_AGENT_PACKAGE], ok_codes=(0, 1, 2))
    state = result.stdout.strip()
    if result.returncode == 0 and len(state) >= 2 and state[1] in "UFH":
        return (f"the Arc agent's package ({ARC_AGENT_PACKAGE}) is unpacked but not configured yet: "
                "dpkg configures it after this package, in this same run")
    return None


def deferral(host):
    """Why a join asked for now must be left to the agent service, or None."""
    return live_system_blocker(host) or arc_agent_unconfigured(host)


# ---- join and leave ---------------------------------------------------------------------


def joined_elsewhere(former, cfg):
    """The cluster the ledger's join record `former` names when `cfg` asks for another join
    (another cluster, machine name or join mode), else None. A new join mode is a new join
    too: the kubelet's credentials, the Arc machine or the pool's Machine all change."""
    old_cluster = former.get("cluster_resource_id")
    if old_cluster and (old_cluster.lower() != cfg.cluster.resource_id.lower()
                        or former.get("machine_name", cfg.machine_name) != cfg.machine_name
                        or former.get("join_mode", JoinMode.ARC) != cfg.mode):
        return old_cluster
    return None


def leave_then_join(cfg, host, progress=None, on_leave=None, lock_wait=60.0):
    """Join `cfg`'s cluster; when the node is joined to another cluster (or under another
    name), leave that one first with the identity the ledger recorded. Returns the
    bootstrap's RunResult."""
    from aks_flex_node import operations  # `status` reads this module, and needs no step

    former, _ = joined(host)
    old_cluster = joined_elsewhere(former, cfg)
    if old_cluster:
        if on_leave:
            on_leave(old_cluster)
        log.info("leaving %s first (the node is joined there)", old_cluster)
        old = config.load(root=cfg.root, overrides={k: former[k] for k in JOINED_KEYS if former.get(k)})
        result, _summary = operations.unbootstrap(old, host, lock_wait=lock_wait, progress=progress)
        for item in result.leftovers:
            log.warning("left behind from %s, to clean by hand: %s", old_cluster, item)
    result, _summary = operations.bootstrap(cfg, host, lock_wait=lock_wait, progress=progress)
    return result


def leave(host, keep_cloud=False, progress=None, lock_wait=60.0):
    """Take the node out of the cluster the ledger names. Returns (UndoResult, summary),
    or None when nothing is joined. The config's own cluster and name give way to the
    ledger's: a hand edit must not make us undo another node's join."""
    from aks_flex_node import operations  # as in leave_then_join

    # Best effort, as all of a leave (kubeadm reset): a mark that cannot be removed (a
    # directory with content in its place) must not keep the node joined.
    try:
        if clear_pending(host):
            log.info("the pending join is cancelled")
    except FlexNodeError as err:
        log.warning("the pending join is not cancelled: %s; remove %s by hand (the leave goes on)",
                    err.message, paths.PENDING)
    former, recorded = joined(host)
    if not former and not recorded:
        return None
    cfg = config.load(root=str(host.root), overrides={
        k: former[k] for k in ("cluster_resource_id", "machine_name") if former.get(k)})
    return operations.unbootstrap(cfg, host, keep_cloud_resources=keep_cloud,
                                  lock_wait=lock_wait, progress=progress)


def bounded(function, timeout, what):
    """Run function() in a thread; (True, value) or (True, exception) when it ended within
    `timeout` seconds, (False, None) when it did not (the thread is left behind: the caller
    exits with os._exit, and the run lock goes with the process)."""
    box = {}

    def target():
        try:
            box["value"] = function()
        except BaseException as exc:  # reported by the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=what, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return False, None
    return True, box.get("error", box.get("value"))


def start_agent(host):
    # deb-systemd-invoke honours policy-rc.d and does nothing without systemd.
    try:
        host.run_system(["deb-systemd-invoke", "start", AGENT_UNIT], timeout=60, ok_codes=(0, 1, 101))
    except FlexNodeError as err:
        log.warning("could not start %s: %s", AGENT_UNIT, err.message)


def report_config_error(err, host, mode, name_of=None, out=None):
    """A configuration that does not load: say every problem; never leave a join pending
    (retrying a bad configuration cannot succeed). Returns the exit code for `mode`."""
    out = out or sys.stderr
    name_of = name_of or (lambda key: f"{key} in {paths.CONFIG}")
    out.write(f"aks-flex-node: not joining: the configuration is not valid "
              f"({len(err.problems)} problem(s)):\n")
    for problem in err.problems:
        out.write(f"  {name_of(problem.key)}: {problem.value!r}: expected {problem.expected}\n")
    out.write(f"aks-flex-node: fix {paths.CONFIG} (or preseed the questions again), then run "
              "dpkg-reconfigure aks-flex-node\n")
    clear_pending(host)
    return ExitCode.USAGE if mode == FAIL else ExitCode.OK


def report_join(host, error, mode, out=None):
    """The outcome of a join attempt, for the operator, and what happens next: the agent
    takes over (retry mode) or the package stays unconfigured (fail-install)."""
    out = out or sys.stderr
    if error is None:
        out.write("aks-flex-node: joined; aks-flex-node-agent keeps the node converged\n")
        start_agent(host)
        return ExitCode.OK
    message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
    out.write(f"aks-flex-node: the join failed: {message}\n")
    if getattr(error, "remedy", None):
        out.write(f"aks-flex-node: what to do: {error.remedy}\n")
    if mode == FAIL:
        clear_pending(host)
        out.write("aks-flex-node: on_join_failure is fail-install: the package stays unconfigured; "
                  "dpkg --configure -a tries again\n")
        return int(getattr(error, "exit_code", ExitCode.FAILED)) or int(ExitCode.FAILED)
    out.write("aks-flex-node: the join is pending: aks-flex-node-agent retries it in the background "
              "(journalctl -u aks-flex-node-agent, aks-flex-node status); "
              "dpkg-reconfigure aks-flex-node retries it now\n")
    start_agent(host)
    return ExitCode.OK


def report_leave(outcome, out=None):
    """What a leave (prerm) did, on `out`: kept cloud resources, leftovers, or done."""
    out = out or sys.stderr
    result, summary = outcome
    for item in summary.get("kept", []):
        out.write(f"aks-flex-node: kept: {item}\n")
    if result.leftovers:
        out.write("aks-flex-node: left the cluster with leftovers to clean up by hand:\n")
        for item in result.leftovers:
            out.write(f"  - {item}\n")
    else:
        cluster = str(summary.get("cluster_resource_id") or "").rsplit("/", 1)[-1]
        out.write(f"aks-flex-node: node {summary.get('machine_name')} left {cluster}\n")


# ---- the outcome, for `status` --------------------------------------------------------


def last_status(host):
    """status.json as it stands (a killed run's "running" reads as "interrupted"), or what
    an untouched node says."""
    return StatusFile(host).current() or {"state": "unjoined", "message": "no bootstrap has run on this node"}


def wait_for_outcome(host, timeout, poll=0.5):
    """Wait until a run has completed and no join is pending (a pending join's failed
    attempts are retried by the agent, so they are not the end); the status then. A run
    that was interrupted (killed: its record says "running" but nobody holds the run lock)
    is an outcome too, returned at once: waiting would only wait out `timeout`.
    TemporaryError when `timeout` seconds pass first, with the last attempt's error."""
    status_file = StatusFile(host)
    deadline = time.monotonic() + timeout
    while True:
        status = status_file.current() or {}
        if status.get("state") == INTERRUPTED:
            return status
        # A run says "running" just before it drops the last run's marker: not over yet.
        if status_file.is_complete() and status.get("state") not in (PENDING, RUNNING):
            break
        if time.monotonic() >= deadline:
            if not is_pending(host):
                raise TemporaryError(f"no run completed within {timeout:.0f} s", code="no-outcome")
            last_error = (status.get("error") or {}).get("message")
            raise TemporaryError(f"the join is still pending after {timeout:.0f} s"
                                 + (f"; the last attempt: {last_error}" if last_error else
                                    "; an attempt is running"), code="join-pending")
        time.sleep(poll)
    return last_status(host)
