"""The library side of the Debian maintainer scripts (debian/postinst, debian/prerm).

The shell scripts stay thin and call, with /usr/bin/python3:

    python3 -m aks_flex_node.maintainer.maintscript render-config OUTPUT   (postinst, before ucf)
    python3 -m aks_flex_node.maintainer.maintscript join ACTION [VERSION]  (postinst, after ucf)
    python3 -m aks_flex_node.maintainer.maintscript unjoin ACTION          (prerm remove|deconfigure)

Before using a file, each command inspects it (node_files): one that cannot be used ends in a debconf note naming it and what to do, never in
a traceback, and the client secret leaves debconf's database first whatever happens.

render-config and join speak debconf's protocol (through python3-debconf's client) on the
standard input and output they inherit from the postinst (which sourced confmodule), so
stdout is debconf's: everything else this process or its children print goes to stderr
(debconf-devel(7)).

Paths are node paths under $DPKG_ROOT (dpkg sets it, empty for "/"); the debconf frontend
and the shell scripts honour it too.
"""

import logging
import os
import re
import sys

from aks_flex_node import config, lifecycle, output, paths
from aks_flex_node.errors import ConfigError, ConfigProblem, ExitCode, FlexNodeError
from aks_flex_node.host import Host
from aks_flex_node.maintainer import node_files
from aks_flex_node.maintainer.debconf_answers import (answer_problems, question_of, render_config, store_secret,
                                                      take_secret)
from aks_flex_node.maintainer.debconf_channel import DebconfProgress, attach_debconf, q, show_note

log = logging.getLogger("aks_flex_node.maintainer.maintscript")

# Bounds, so a hung Azure call never holds the dpkg lock for good: dpkg holds its lock for
# the whole run, so a maintainer script that hangs wedges apt (Debian Policy 6.1, 6.8).
JOIN_TIMEOUT_ENV = "AKS_FLEX_NODE_JOIN_TIMEOUT"
UNJOIN_TIMEOUT_ENV = "AKS_FLEX_NODE_UNJOIN_TIMEOUT"
# prerm escape hatch: "local" keeps the cloud resources, "skip" leaves the node joined.
UNJOIN_ENV = "AKS_FLEX_NODE_UNJOIN"
# Seconds as ASCII digits with an optional fraction: float() also takes "inf", "nan",
# "1e9" and the digits of other scripts ("\u0666\u0660"), none of which is meant here.
_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")
# More than a day holding the dpkg lock is a typo, not a budget.
MAX_TIMEOUT = 86400


def dpkg_root():
    return os.environ.get("DPKG_ROOT") or "/"


def _host(root):
    return Host(root)


def report_bad_files(channel, host, bad, mode, joining):
    """Every unusable file: on stderr and as a debconf note. A join that was due is left
    pending for the agent, which finishes it once the files are fixed (or, with
    fail-install, the package stays unconfigured). Returns the exit code."""
    for item in bad:
        sys.stderr.write(f"aks-flex-node: {item.message}\naks-flex-node: what to do: {item.remedy}\n")
        show_note(channel, "bad_file", file=item.path, problem=item.problem, remedy=item.remedy)
    if not joining:
        return ExitCode.OK
    if mode == lifecycle.FAIL:
        _best_effort(lifecycle.clear_pending, host)
        sys.stderr.write("aks-flex-node: on_join_failure is fail-install: the package stays "
                         "unconfigured; dpkg --configure -a tries again\n")
        return ExitCode.FAILED
    _best_effort(lifecycle.mark_pending, host)  # the mark may be the file in the way
    sys.stderr.write("aks-flex-node: not joining now; the join is pending: aks-flex-node-agent "
                     "joins once the files are fixed (aks-flex-node status --wait), "
                     "dpkg-reconfigure aks-flex-node retries at once\n")
    lifecycle.start_agent(host)
    return ExitCode.OK


def _best_effort(action, host):
    try:
        action(host)
    except (FlexNodeError, OSError) as err:
        log.debug("%s: %s", action.__name__, err)


# ---- render-config --------------------------------------------------------------------


def render(channel, output, root):
    """postinst, before ucf: the configuration from the answers into `output`, or, when
    the file in place cannot be used, `output` removed and the file left as it is (the
    join step then shows why in a debconf note). The secret leaves debconf first,
    whatever happens next."""
    host = _host(root)
    secret = take_secret(channel)
    refused = input_problems(channel)[1]
    if refused:  # nothing is written; the join step names each one and exits accordingly
        log.error("%d value(s) cannot be used: %s is left as it is%s", len(refused), paths.CONFIG,
                  "; the client secret given is not stored: give it again with the answers"
                  if secret else "")
        if os.path.lexists(output):
            os.remove(output)
        return ExitCode.OK
    bad, text = node_files.config_problems(host)
    secret_in_way = node_files.file_problem(host, paths.SECRET)[0]
    problem = bad[0].message if bad else None
    if not bad:
        try:
            render_config(channel, output, root, secret, text, secret_file_ok=not secret_in_way)
            return ExitCode.OK
        except ConfigError as err:  # the file does not parse
            problem = (node_files.load_problems(err) or err).message
        except (FlexNodeError, OSError, ValueError) as err:  # an answer not UTF-8, a file in the way
            problem = getattr(err, "message", None) or str(err)
    log.error("%s; %s is left as it is", problem, paths.CONFIG)
    if os.path.lexists(output):
        os.remove(output)
    if not secret:
        return ExitCode.OK
    # The new secret still goes where it belongs when that file can take it, so fixing
    # the configuration is all that is left to do.
    try:
        if node_files.dir_problem(host, paths.CONFIG_DIR) or secret_in_way:
            raise FlexNodeError(f"{paths.SECRET} cannot take it")
        if channel.get(q("auth_method")) == "service-principal":
            store_secret(host, secret)
            log.info("the new client secret is in %s", paths.SECRET)
    except (FlexNodeError, OSError) as err:
        log.error("the client secret given was not stored (%s): give it again with "
                  "dpkg-reconfigure aks-flex-node once the files are fixed", getattr(err, "message", err))
    return ExitCode.OK


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


def read_timeout(env_name, default):
    """(seconds, None) from the environment variable `env_name`, or (default, the
    ConfigProblem naming the variable, its value and what it takes)."""
    text = os.environ.get(env_name, "")
    if not text:
        return default, None
    if _SECONDS.fullmatch(text) and 0 < float(text) <= MAX_TIMEOUT:
        return float(text), None
    return default, ConfigProblem(env_name, text, "a number of seconds in ASCII digits (such as 900), "
                                                  f"greater than 0 and at most {MAX_TIMEOUT}")


def input_problems(channel):
    """(the join's time budget, every problem with what the postinst reads: the
    environment, then the debconf answers), read before anything is written."""
    budget, env_problem = read_timeout(JOIN_TIMEOUT_ENV, 900.0)
    return budget, ([env_problem] if env_problem else []) + answer_problems(channel)


def on_join_failure(channel):
    """on_join_failure. An answer that is neither choice counts as fail-install: whoever
    gave it did not ask for a join left to the background (answer_problems refuses it)."""
    try:
        mode = channel.get(q("on_join_failure"))
    except (FlexNodeError, OSError, ValueError):  # not UTF-8, or the frontend is gone
        return lifecycle.FAIL
    return mode if mode in (lifecycle.RETRY, lifecycle.FAIL) else lifecycle.FAIL


def refuse(problems, mode):
    """Answers or environment variables that cannot be used: each named with its value and
    what it takes; nothing is changed (no join, no pending mark). Exit as for an invalid
    configuration: 2 with fail-install, else 0 (retrying cannot help)."""
    sys.stderr.write(f"aks-flex-node: not joining, nothing is changed: {len(problems)} value(s) "
                     "cannot be used:\n")
    for problem in problems:
        sys.stderr.write(f"  {problem}\n")
    sys.stderr.write("aks-flex-node: preseed the answers again (debconf-set-selections) or fix the "
                     "variables, then run dpkg-reconfigure aks-flex-node\n")
    return ExitCode.USAGE if mode == lifecycle.FAIL else ExitCode.OK


def join(channel, action, since_version, root):
    """postinst configure: check the files it reads, then join when asked and when it is
    time. Returns the exit code."""
    host = _host(root)
    # Everything the join reads from the environment and debconf is checked before it acts.
    budget, refused = input_problems(channel)
    mode = on_join_failure(channel)
    if refused:
        return refuse(refused, mode)
    bad, text = node_files.config_problems(host)
    bad += node_files.secret_problems(host, text)
    if channel.get(q("join")) != "true":
        try:
            if lifecycle.clear_pending(host):
                log.warning("join is false: the pending join is cancelled")
        except FlexNodeError as err:  # a directory with content where the mark goes
            bad.append(node_files.BadFile(paths.PENDING, err.message, f"remove it (rm -r {paths.PENDING})"))
        log.info("join is false: not joining (dpkg-reconfigure aks-flex-node joins later)")
        return report_bad_files(channel, host, bad, mode, joining=False)
    state = node_files.state_problems(host)
    # A mark in the way (a directory, say) still says a join was asked for; is_pending
    # reads only one that is a file.
    pending = any(b.path == paths.PENDING for b in state) or lifecycle.is_pending(host)
    reason = join_reason(action, since_version, pending)
    if reason is None:
        log.info("upgrade from %s: the node keeps its state, no join", since_version)
        return report_bad_files(channel, host, bad, mode, joining=False)
    if bad or state:
        return report_bad_files(channel, host, bad + state, mode, joining=True)
    progress = DebconfProgress(channel)
    progress.start(1)
    progress.info("progress/check")
    try:
        # First, wherever we are: a bad answer is reported now, not left as a pending join.
        cfg = config.load(root=root)
    except ConfigError as err:
        progress.stop()
        whole = node_files.load_problems(err)
        if whole:
            return report_bad_files(channel, host, [whole], mode, joining=True)
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
    # Both variables are read and checked before anything is done; a bad one is named and
    # the removal goes on with the default.
    choice = os.environ.get(UNJOIN_ENV, "")
    budget, problem = read_timeout(UNJOIN_TIMEOUT_ENV, 300.0)
    if problem:
        sys.stderr.write(f"aks-flex-node: {problem}; unjoining within the default {budget:.0f} s\n")
    if choice not in ("", "local", "skip"):
        sys.stderr.write(f"aks-flex-node: {UNJOIN_ENV} = {choice!r}: expected local or skip; "
                         "unjoining fully\n")
    if choice == "skip":
        lifecycle.clear_pending(host)
        sys.stderr.write(f"aks-flex-node: {UNJOIN_ENV}=skip: the node stays joined; the ledger "
                         f"{host.path(paths.LEDGER)} lists what was created\n")
        return ExitCode.OK
    # Said first, in the terms of the file; the leave still goes as far as it can.
    for item in node_files.config_problems(host)[0] + node_files.state_problems(host):
        sys.stderr.write(f"aks-flex-node: {item.message}\naks-flex-node: what to do: {item.remedy}\n")

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

USAGE = ("usage: python3 -m aks_flex_node.maintainer.maintscript render-config OUTPUT | "
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
    # What apt shows of us leaves with its control characters escaped, as the CLI's does
    # (output.py); the debconf channel has descriptors of its own (debconf_channel.py).
    with output.shown_streams():
        return _run(argv)


def _run(argv):
    _setup_logging()
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    root = dpkg_root()
    try:
        if command == "render-config" and len(args) == 1:
            return int(render(attach_debconf(), args[0], root))
        if command == "join" and 1 <= len(args) <= 2 and args[0] in ("configure", "reconfigure"):
            channel = attach_debconf()
            try:
                return int(join(channel, args[0], args[1] if len(args) == 2 else "", root))
            except Exception as exc:  # a bug must not wedge apt in the retry mode
                log.debug("join crashed", exc_info=True)
                return int(lifecycle.report_join(_host(root), exc, on_join_failure(channel)))
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


if __name__ == "__main__":
    sys.exit(main())
