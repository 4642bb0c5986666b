"""The library side of the Debian maintainer scripts (debian/postinst, debian/prerm).

The shell scripts stay thin and call, with /usr/bin/python3:

    python3 -m aks_flex_node.maintscript render-config OUTPUT   (postinst, before ucf)
    python3 -m aks_flex_node.maintscript join ACTION [VERSION]  (postinst, after ucf)
    python3 -m aks_flex_node.maintscript unjoin ACTION          (prerm remove|deconfigure)

render-config and join speak debconf's protocol (through python3-debconf's client) on the
standard input and output they inherit from the postinst (which sourced confmodule), so
stdout is debconf's: everything else this process or its children print goes to stderr
(debconf-devel(7)).

Paths are node paths under $DPKG_ROOT (dpkg sets it, empty for "/"); the debconf frontend
and the shell scripts honour it too.
"""

import logging
import os
import shutil
import sys
import threading
import time

from aks_flex_node import config
from aks_flex_node.errors import ConfigError, ExitCode, FlexNodeError

log = logging.getLogger("aks_flex_node.maintscript")

QUESTION_PREFIX = "aks-flex-node/"
# debconf question -> configuration key (docs/preseed.md; debian/config reads the same).
QUESTION_KEYS = {
    "subscription_id": "subscription_id",
    "tenant_id": "tenant_id",
    "cloud": "cloud",
    "cluster_resource_id": "cluster_resource_id",
    "resource_group": "arc_resource_group",
    "location": "arc_location",
    "machine_name": "machine_name",
    "tags": "arc_tags",
    "auth_method": "auth_method",
    "sp_client_id": "sp_client_id",
    "kubernetes_version": "kubernetes_version",
    "role_preset": "role_preset",
}
KEY_QUESTIONS = {key: question for question, key in QUESTION_KEYS.items()}
SECRET_QUESTION = "sp_client_secret"
SECRET_PATH = "/etc/aks-flex-node/sp-client-secret"  # the CLI's `config import` default too
SHIPPED_DEFAULT = "/usr/share/aks-flex-node/aks-flex-node.conf"
AGENT_UNIT = "aks-flex-node-agent.service"
# The Azure Connected Machine agent's package (Microsoft's repository; ours Recommends it).
ARC_AGENT_PACKAGE = "azcmagent"
RETRY, FAIL = "retry-in-background", "fail-install"

# Bounds, so a hung Azure call never holds the dpkg lock for good (debian-packaging.md §2.2).
JOIN_TIMEOUT_ENV = "AKS_FLEX_NODE_JOIN_TIMEOUT"
UNJOIN_TIMEOUT_ENV = "AKS_FLEX_NODE_UNJOIN_TIMEOUT"
# prerm escape hatch: "local" keeps the cloud resources, "skip" leaves the node joined.
UNJOIN_ENV = "AKS_FLEX_NODE_UNJOIN"


class DebconfError(FlexNodeError):
    pass


class Debconf:
    """debconf's own Python client (python3-debconf: debconf.Debconf, which says VERSION 2
    and CAPB on attaching) on the channel the postinst inherited, with our errors, one
    command at a time (progress comes from the runner's worker threads), and no value that
    would break the line-based protocol."""

    def __init__(self, read, write):
        import debconf  # python3-debconf: only the maintainer scripts need it

        self._errors = debconf.DebconfError
        self._lock = threading.Lock()
        try:
            self._client = debconf.Debconf(read=read, write=write)
        except (ValueError, debconf.DebconfError) as err:  # no frontend answers
            raise DebconfError(f"debconf did not answer VERSION 2 on the channel: {err}")

    def _call(self, command, *words):
        if any("\n" in str(word) for word in words):
            raise DebconfError(f"debconf {command.upper()}: a value cannot span lines")
        with self._lock:
            try:
                return getattr(self._client, command)(*words)
            except ValueError as err:  # an empty reply: the frontend is gone
                raise DebconfError(f"debconf closed the channel (after {command.upper()}): {err}")

    def get(self, question):
        try:
            return self._call("get", question)
        except self._errors as err:
            code, text = (list(err.args) + ["", ""])[:2]
            raise DebconfError(f"debconf GET {question}: {text} (code {code})",
                               remedy="reinstall the package so its templates are loaded")

    def set(self, question, value):
        self._call("set", question, value)

    def fset(self, question, flag, value):
        self._call("fset", question, flag, value)

    def subst(self, question, key, value):
        self._call("subst", question, key, value)

    def progress(self, *words):
        # PROGRESS is debconf's extension (Debconf/ConfModule.pm); failures only cost the bar.
        try:
            self._call("progress", *words)
        except (self._errors, DebconfError, OSError, ValueError):
            log.debug("debconf PROGRESS %s failed", words, exc_info=True)


def attach_debconf():
    """Take over the debconf channel on fds 0/1 and send anything else printed to stderr."""
    if not os.environ.get("DEBIAN_HAS_FRONTEND"):
        raise DebconfError("no debconf frontend: this command runs from the package's postinst",
                           remedy="run dpkg-reconfigure aks-flex-node")
    # confmodule moves the channel's write end to fd 3 and points stdout at stderr
    # (DEBCONF_REDIR); replies always come on stdin.
    write_fd = 3 if os.environ.get("DEBCONF_REDIR") else 1
    read = os.fdopen(os.dup(0), "r", encoding="utf-8", newline="\n")
    write = os.fdopen(os.dup(write_fd), "w", encoding="utf-8", newline="\n")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    if write_fd == 3:
        os.close(3)
    sys.stdout = sys.stderr
    return Debconf(read, write)


def q(name):
    return QUESTION_PREFIX + name


def dpkg_root():
    return os.environ.get("DPKG_ROOT") or "/"


def _host(root):
    from aks_flex_node.host import Host

    return Host(root)


def _file_value(text, key):
    """The value of `key` in a configuration text, read as sh reads it (last one wins)."""
    value = None
    for line in text.splitlines():
        name, sep, rest = line.partition("=")
        if sep and name.strip() == key and not name.lstrip().startswith(("#", "[")):
            value = rest.strip()
    return value


# ---- render-config --------------------------------------------------------------------


def render_config(channel, output, root):
    """Write the configuration built from the debconf answers into `output` (0600), on top
    of the current file (its other keys, comments and hand edits stay) or the shipped
    default; move a new client secret into its own 0600 file and out of debconf."""
    host = _host(root)
    # An empty or missing file starts again from the shipped default, with every key.
    base = host.read_bytes(config.DEFAULT_PATH) or host.read_bytes(SHIPPED_DEFAULT) or \
        config.render_default().encode("utf-8")
    text = base.decode("utf-8")
    values = {key: channel.get(q(question)) for question, key in QUESTION_KEYS.items()}
    values.update(_auth_values(channel, host, values["auth_method"], text))

    # `output` is a path on this filesystem (the postinst's mktemp under DPKG_ROOT), so it
    # goes to config.write with root "/".
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(base)
    os.chmod(output, 0o600)
    try:
        config.write(output, values, root="/")
    except ConfigError as err:
        # A value that cannot even be written (a '#', quotes): keep the file's, say which.
        bad = {p.key for p in err.problems}
        for problem in err.problems:
            log.error("%s: %s", _question_of(problem.key), problem)
        try:
            config.write(output, {k: v for k, v in values.items() if k not in bad}, root="/")
        except ConfigError:
            # The file itself does not parse (a hand edit gone wrong): leave it as it is;
            # the join step reports it again and does not join.
            log.error("%s is left as it is: fix it, then run dpkg-reconfigure aks-flex-node",
                      config.DEFAULT_PATH)


def _auth_values(channel, host, method, text):
    """The auth keys that go with the chosen method; the secret is consumed here."""
    secret = channel.get(q(SECRET_QUESTION))
    # debconf-devel(7) on passwords: clear the value out of the database as soon as possible.
    channel.set(q(SECRET_QUESTION), "")
    channel.fset(q(SECRET_QUESTION), "seen", "false")
    out = {}
    if method != "managed-identity":
        out["managed_identity_client_id"] = ""
    if method != "service-principal":
        out.update(sp_client_id="", sp_client_secret_file="", sp_certificate_file="")
        if host.remove(SECRET_PATH):
            log.info("removed %s: auth_method is %s", SECRET_PATH, method)
        return out
    if secret:
        host.ensure_dir("/etc/aks-flex-node", 0o755)
        host.write_file(SECRET_PATH, secret.encode("utf-8") + b"\n", 0o600)
        out.update(sp_client_secret_file=SECRET_PATH, sp_certificate_file="")
    elif not _file_value(text, "sp_client_secret_file") and not _file_value(text, "sp_certificate_file") \
            and host.read_bytes(SECRET_PATH) is not None:
        out["sp_client_secret_file"] = SECRET_PATH
    return out


def _question_of(key):
    question = KEY_QUESTIONS.get(key)
    if key == "sp_client_secret_file":
        question = SECRET_QUESTION
    where = f"{key} in {config.DEFAULT_PATH}"
    return f"{q(question)} ({where})" if question else where


# ---- join -----------------------------------------------------------------------------


def join_reason(action, since_version, pending):
    """Why the postinst joins now, or None: a fresh install, a reconfigure or a pending
    join; never a plain upgrade (debian-packaging.md §2)."""
    if action == "reconfigure" or os.environ.get("DEBCONF_RECONFIGURE"):
        return "reconfigure"
    if not since_version:
        return "first install"
    if pending:
        return "a join is pending"
    return None


def arc_agent_unconfigured(host):
    """Why the join must wait for the Arc agent's package, or None.

    apt installs a Recommends in the same run, but dpkg need not configure it first: when
    it configures us before azcmagent, himdsd is not running yet and a join would fail at
    the first token. dpkg-query reads dpkg's database with its journal of this run (the
    status file alone lags behind); db:Status-Abbrev's second letter is U (unpacked),
    F (half-configured) or H (half-installed) until the package's postinst has run."""
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


def live_system_blocker(host):
    """Why no join can run on this system now (image build, chroot, no systemd), or None."""
    from aks_flex_node.host import HOST_BIN_ENV

    if not host.is_live:
        if os.environ.get(HOST_BIN_ENV):
            return None  # tests: stand-ins for the live-system commands
        return f"the package is being installed into {host.root} (DPKG_ROOT), not on a running system"
    result = host.run(["ischroot"], ok_codes=(0, 1, 2)) if shutil.which("ischroot") else None
    if result is not None and result.returncode == 0:
        return "the package is being installed in a chroot"
    if not os.path.isdir("/run/systemd/system"):
        return "systemd is not running (a container or an image build)"
    return None


class DebconfProgress:
    """The runner's progress callback shown as debconf's progress bar, and on stderr."""

    def __init__(self, channel, stream=None):
        self.channel = channel
        self.stream = stream or sys.stderr
        self.total = None

    def start(self, total):
        self.total = total
        self.channel.progress("START", "0", str(total), q("progress/title"))

    def info(self, template, **subst):
        for key, value in subst.items():
            self.channel.subst(q(template), key, str(value))
        self.channel.progress("INFO", q(template))

    def __call__(self, event, result, index, total):
        if total != self.total:  # the phases are known now (or a new operation began)
            self.stop()
            self.start(total)
        if event == "start":
            self.info("progress/phase", index=index, total=total, phase=result.name)
            return
        line = f"aks-flex-node: [{index:2d}/{total}] {result.name:<18} {result.status} {result.message}"
        self.stream.write(line.rstrip() + "\n")
        self.stream.flush()
        self.channel.progress("SET", str(index))

    def stop(self):
        self.channel.progress("STOP")


def _bounded(function, timeout, what):
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


def _timeout(env_name, default):
    text = os.environ.get(env_name, "")
    if not text:
        return default
    try:
        value = float(text)
        if value > 0:
            return value
    except ValueError:
        pass
    raise FlexNodeError(f"{env_name} = {text!r}: expected a number of seconds greater than 0")


def join(channel, action, since_version, root):
    """postinst configure: join when asked and when it is time. Returns the exit code."""
    from aks_flex_node import operations

    host = _host(root)
    mode = channel.get(q("on_join_failure")) or RETRY
    pending = host.read_bytes(operations.PENDING_MARKER) is not None
    if channel.get(q("join")) != "true":
        if pending:
            host.remove(operations.PENDING_MARKER)
            log.warning("join is false: the pending join is cancelled")
        log.info("join is false: not joining (dpkg-reconfigure aks-flex-node joins later)")
        return ExitCode.OK
    reason = join_reason(action, since_version, pending)
    if reason is None:
        log.info("upgrade from %s: the node keeps its state, no join", since_version)
        return ExitCode.OK
    progress = DebconfProgress(channel)
    progress.start(1)
    progress.info("progress/check")
    try:
        # First, wherever we are: a bad answer is reported now, not left as a pending join.
        cfg = config.load(root=root)
    except ConfigError as err:
        progress.stop()
        return _config_failed(err, mode, host)
    blocker = live_system_blocker(host)
    if blocker:
        progress.stop()
        _mark_pending(host)
        log.warning("not joining now: %s. The join is pending: the aks-flex-node-agent service "
                    "joins when the machine runs (or run dpkg-reconfigure aks-flex-node)", blocker)
        return ExitCode.OK

    waiting = arc_agent_unconfigured(host)
    if waiting:
        progress.stop()
        _mark_pending(host)
        sys.stderr.write(f"aks-flex-node: not joining yet: {waiting}. The join is pending: "
                         "aks-flex-node-agent runs it once himdsd answers (aks-flex-node status --wait)\n")
        _start_agent(host)
        return ExitCode.OK

    if mode == RETRY:  # the mark survives a crash or the time limit: the agent takes over
        _mark_pending(host)
    budget = _timeout(JOIN_TIMEOUT_ENV, 900.0)
    log.info("joining %s as %s (%s)", cfg.cluster.resource_id, cfg.machine_name, reason)
    finished, outcome = _bounded(lambda: _leave_then_join(cfg, host, progress), budget, "join")
    progress.stop()
    if not finished:
        error = FlexNodeError(f"the join did not finish within {budget:.0f} s")
    elif isinstance(outcome, BaseException):
        error = outcome
    else:
        error = outcome.error
    code = _after_join(host, error, mode)
    if not finished:
        sys.stderr.flush()
        os._exit(int(code))
    return code


def _leave_then_join(cfg, host, progress):
    from aks_flex_node import operations
    from aks_flex_node.engine.ledger import Ledger

    joined = Ledger(host).joined
    old_cluster = joined.get("cluster_resource_id")
    if old_cluster and (old_cluster.lower() != cfg.cluster.resource_id.lower()
                        or joined.get("machine_name", cfg.machine_name) != cfg.machine_name):
        progress.info("progress/leave", cluster=old_cluster)
        log.info("leaving %s first (the node is joined there)", old_cluster)
        old = config.load(root=cfg.root, overrides={
            k: joined[k] for k in ("cluster_resource_id", "machine_name", "subscription_id",
                                   "arc_resource_group") if joined.get(k)})
        leftovers, _summary = operations.unbootstrap(old, host, lock_wait=60.0, progress=progress)
        for item in leftovers:
            log.warning("left behind from %s, to clean by hand: %s", old_cluster, item)
    result, _summary = operations.bootstrap(cfg, host, lock_wait=60.0, progress=progress)
    return result


def _mark_pending(host):
    from aks_flex_node import operations
    from aks_flex_node.engine.ledger import STATE_DIR

    host.ensure_dir(STATE_DIR, 0o700)
    host.write_file(operations.PENDING_MARKER, b"", 0o600)


def _config_failed(err, mode, host):
    from aks_flex_node import operations

    sys.stderr.write(f"aks-flex-node: not joining: the configuration is not valid "
                     f"({len(err.problems)} problem(s)):\n")
    for problem in err.problems:
        sys.stderr.write(f"  {_question_of(problem.key)}: {problem.value!r}: expected {problem.expected}\n")
    sys.stderr.write(f"aks-flex-node: fix {config.DEFAULT_PATH} (or preseed the questions again), then run "
                     "dpkg-reconfigure aks-flex-node\n")
    host.remove(operations.PENDING_MARKER)  # retrying a bad configuration cannot succeed
    return ExitCode.USAGE if mode == FAIL else ExitCode.OK


def _after_join(host, error, mode):
    from aks_flex_node import operations

    if error is None:
        sys.stderr.write("aks-flex-node: joined; aks-flex-node-agent keeps the node converged\n")
        _start_agent(host)
        return ExitCode.OK
    message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
    remedy = getattr(error, "remedy", None)
    sys.stderr.write(f"aks-flex-node: the join failed: {message}\n")
    if remedy:
        sys.stderr.write(f"aks-flex-node: what to do: {remedy}\n")
    if mode == FAIL:
        host.remove(operations.PENDING_MARKER)
        sys.stderr.write("aks-flex-node: on_join_failure is fail-install: the package stays unconfigured; "
                         "dpkg --configure -a tries again\n")
        return int(getattr(error, "exit_code", ExitCode.FAILED)) or int(ExitCode.FAILED)
    sys.stderr.write("aks-flex-node: the join is pending: aks-flex-node-agent retries it in the background "
                     "(journalctl -u aks-flex-node-agent, aks-flex-node status); "
                     "dpkg-reconfigure aks-flex-node retries it now\n")
    _start_agent(host)
    return ExitCode.OK


def _start_agent(host):
    # deb-systemd-invoke honours policy-rc.d and does nothing without systemd.
    try:
        host.run_system(["deb-systemd-invoke", "start", AGENT_UNIT], timeout=60, ok_codes=(0, 1, 101))
    except FlexNodeError as err:
        log.warning("could not start %s: %s", AGENT_UNIT, err.message)


# ---- unjoin ---------------------------------------------------------------------------


def unjoin(root):
    """prerm remove|deconfigure: take the node out, best effort; never fails the removal."""
    from aks_flex_node import operations
    from aks_flex_node.engine.ledger import Ledger

    host = _host(root)
    if host.remove(operations.PENDING_MARKER):
        log.info("the pending join is cancelled")
    ledger = Ledger(host)
    if not ledger.joined and not ledger.entries():
        log.info("the node is not joined: nothing to undo")
        return ExitCode.OK
    choice = os.environ.get(UNJOIN_ENV, "")
    if choice == "skip":
        sys.stderr.write(f"aks-flex-node: {UNJOIN_ENV}=skip: the node stays joined; the ledger "
                         f"{host.path('/var/lib/aks-flex-node/ledger.json')} lists what was created\n")
        return ExitCode.OK
    if choice not in ("", "local"):
        sys.stderr.write(f"aks-flex-node: {UNJOIN_ENV} = {choice!r}: expected local or skip; "
                         "unjoining fully\n")
    joined = ledger.joined
    try:
        cfg = config.load(root=root, overrides={
            k: joined[k] for k in ("cluster_resource_id", "machine_name") if joined.get(k)})
    except ConfigError as err:
        sys.stderr.write(f"aks-flex-node: cannot unjoin: {err.message}\n"
                         "aks-flex-node: fix the configuration and run aks-flex-node unbootstrap; "
                         f"until then {host.path('/var/lib/aks-flex-node/ledger.json')} lists what is left\n")
        return ExitCode.OK
    budget = _timeout(UNJOIN_TIMEOUT_ENV, 300.0)

    def progress(event, result, index, total):
        if event == "finish":
            sys.stderr.write(f"aks-flex-node: [{index:2d}/{total}] undo {result.name}\n")

    finished, outcome = _bounded(
        lambda: operations.unbootstrap(cfg, host, keep_cloud_resources=choice == "local",
                                       lock_wait=60.0, progress=progress), budget, "unjoin")
    if not finished:
        sys.stderr.write(f"aks-flex-node: the unjoin did not finish within {budget:.0f} s; the "
                         "removal goes on. Run aks-flex-node unbootstrap when Azure is reachable\n")
        sys.stderr.flush()
        os._exit(0)
    if isinstance(outcome, BaseException):
        sys.stderr.write(f"aks-flex-node: the unjoin failed: {getattr(outcome, 'message', outcome)}\n")
        return ExitCode.OK
    leftovers, summary = outcome
    for item in summary.get("kept", []):
        sys.stderr.write(f"aks-flex-node: kept ({UNJOIN_ENV}=local): {item}\n")
    if leftovers:
        sys.stderr.write("aks-flex-node: left the cluster with leftovers to clean up by hand:\n")
        for item in leftovers:
            sys.stderr.write(f"  - {item}\n")
    else:
        sys.stderr.write(f"aks-flex-node: node {cfg.machine_name} left {cfg.cluster.name}\n")
    return ExitCode.OK


# ---- entry point ----------------------------------------------------------------------

USAGE = ("usage: python3 -m aks_flex_node.maintscript render-config OUTPUT | "
         "join configure|reconfigure [VERSION] | unjoin remove|deconfigure")


def _setup_logging():
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("aks-flex-node: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("azure", "msal", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    _setup_logging()
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    root = dpkg_root()
    started = time.monotonic()
    try:
        if command == "render-config" and len(args) == 1:
            render_config(attach_debconf(), args[0], root)
            return int(ExitCode.OK)
        if command == "join" and 1 <= len(args) <= 2 and args[0] in ("configure", "reconfigure"):
            channel = attach_debconf()
            try:
                return int(join(channel, args[0], args[1] if len(args) == 2 else "", root))
            except Exception as exc:  # a bug must not wedge apt in the retry mode
                log.debug("join crashed", exc_info=True)
                mode = _safe_get(channel, q("on_join_failure"))
                return int(_after_join(_host(root), exc, mode))
        if command == "unjoin" and len(args) == 1 and args[0] in ("remove", "deconfigure"):
            try:
                return int(unjoin(root))
            except Exception as exc:  # prerm never blocks a removal
                sys.stderr.write(f"aks-flex-node: the unjoin failed: {type(exc).__name__}: {exc}\n")
                return int(ExitCode.OK)
    except FlexNodeError as err:
        sys.stderr.write(f"aks-flex-node: {err.message}\n")
        if err.remedy:
            sys.stderr.write(f"aks-flex-node: what to do: {err.remedy}\n")
        return int(err.exit_code)
    finally:
        log.debug("%s took %.1f s", command, time.monotonic() - started)
    sys.stderr.write(f"{USAGE}\n(got: {' '.join(argv) or 'no arguments'})\n")
    return int(ExitCode.USAGE)


def _safe_get(channel, question):
    try:
        return channel.get(question)
    except (FlexNodeError, OSError, ValueError):
        return RETRY


if __name__ == "__main__":
    sys.exit(main())
