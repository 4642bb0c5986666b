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
import sys

from aks_flex_node import config, lifecycle, paths
from aks_flex_node.debconf_answers import question_of, render_config
from aks_flex_node.debconf_channel import DebconfProgress, attach_debconf, q
from aks_flex_node.errors import ConfigError, ExitCode, FlexNodeError

log = logging.getLogger("aks_flex_node.maintscript")

# Bounds, so a hung Azure call never holds the dpkg lock for good: dpkg holds its lock for
# the whole run, so a maintainer script that hangs wedges apt (Debian Policy 6.1, 6.8).
JOIN_TIMEOUT_ENV = "AKS_FLEX_NODE_JOIN_TIMEOUT"
UNJOIN_TIMEOUT_ENV = "AKS_FLEX_NODE_UNJOIN_TIMEOUT"
# prerm escape hatch: "local" keeps the cloud resources, "skip" leaves the node joined.
UNJOIN_ENV = "AKS_FLEX_NODE_UNJOIN"


def dpkg_root():
    return os.environ.get("DPKG_ROOT") or "/"


def _host(root):
    from aks_flex_node.host import Host

    return Host(root)


# ---- join -----------------------------------------------------------------------------


def join_reason(action, since_version, pending):
    """Why the postinst joins now, or None: a fresh install, a reconfigure or a pending
    join; never a plain upgrade (the node stays joined across upgrades)."""
    if action == "reconfigure" or os.environ.get("DEBCONF_RECONFIGURE"):
        return "reconfigure"
    if not since_version:
        return "first install"
    if pending:
        return "a join is pending"
    return None


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
    host = _host(root)
    mode = channel.get(q("on_join_failure")) or lifecycle.RETRY
    pending = lifecycle.is_pending(host)
    if channel.get(q("join")) != "true":
        if lifecycle.clear_pending(host):
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
        return lifecycle.report_config_error(err, host, mode, name_of=question_of)
    waiting = lifecycle.deferral(host)
    if waiting:
        progress.stop()
        lifecycle.mark_pending(host)
        sys.stderr.write(f"aks-flex-node: not joining now: {waiting}. The join is pending: "
                         "aks-flex-node-agent runs it when it can (aks-flex-node status --wait)\n")
        lifecycle.start_agent(host)
        return ExitCode.OK
    if mode == lifecycle.RETRY:  # the mark survives a crash or the time limit: the agent takes over
        lifecycle.mark_pending(host)
    budget = _timeout(JOIN_TIMEOUT_ENV, 900.0)
    log.info("joining %s as %s (%s)", cfg.cluster.resource_id, cfg.machine_name, reason)
    finished, outcome = lifecycle.bounded(lambda: lifecycle.leave_then_join(
        cfg, host, progress, on_leave=lambda old: progress.info("progress/leave", cluster=old)),
        budget, "join")
    progress.stop()
    if not finished:
        error = FlexNodeError(f"the join did not finish within {budget:.0f} s")
    else:
        error = outcome if isinstance(outcome, BaseException) else outcome.error
    code = lifecycle.report_join(host, error, mode)
    if not finished:
        sys.stderr.flush()
        os._exit(int(code))
    return code


# ---- unjoin ---------------------------------------------------------------------------


def unjoin(root):
    """prerm remove|deconfigure: take the node out, best effort; never fails the removal."""
    host = _host(root)
    choice = os.environ.get(UNJOIN_ENV, "")
    if choice == "skip":
        lifecycle.clear_pending(host)
        sys.stderr.write(f"aks-flex-node: {UNJOIN_ENV}=skip: the node stays joined; the ledger "
                         f"{host.path(paths.LEDGER)} lists what was created\n")
        return ExitCode.OK
    if choice not in ("", "local"):
        sys.stderr.write(f"aks-flex-node: {UNJOIN_ENV} = {choice!r}: expected local or skip; "
                         "unjoining fully\n")
    budget = _timeout(UNJOIN_TIMEOUT_ENV, 300.0)

    def progress(event, result, index, total):
        if event == "finish":
            sys.stderr.write(f"aks-flex-node: [{index:2d}/{total}] undo {result.name} {result.status}\n")

    finished, outcome = lifecycle.bounded(
        lambda: lifecycle.leave(host, keep_cloud=choice == "local", progress=progress),
        budget, "unjoin")
    if not finished:
        sys.stderr.write(f"aks-flex-node: the unjoin did not finish within {budget:.0f} s; the "
                         "removal goes on. Run aks-flex-node unbootstrap when Azure is reachable\n")
        sys.stderr.flush()
        os._exit(0)
    if isinstance(outcome, ConfigError):
        sys.stderr.write(f"aks-flex-node: cannot unjoin: {outcome.message}\n"
                         "aks-flex-node: fix the configuration and run aks-flex-node unbootstrap; "
                         f"until then {host.path(paths.LEDGER)} lists what is left\n")
    elif isinstance(outcome, BaseException):
        sys.stderr.write(f"aks-flex-node: the unjoin failed: {getattr(outcome, 'message', outcome)}\n")
    elif outcome is None:
        log.info("the node is not joined: nothing to undo")
    else:
        lifecycle.report_leave(outcome)
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
                return int(lifecycle.report_join(_host(root), exc, _safe_get(channel, q("on_join_failure"))))
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
    sys.stderr.write(f"{USAGE}\n(got: {' '.join(argv) or 'no arguments'})\n")
    return int(ExitCode.USAGE)


def _safe_get(channel, question):
    try:
        return channel.get(question)
    except (FlexNodeError, OSError, ValueError):
        return lifecycle.RETRY


if __name__ == "__main__":
    sys.exit(main())
