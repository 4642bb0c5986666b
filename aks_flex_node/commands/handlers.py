"""Each command's run and output, and the one error handler: what cli.main hands a command
line to once it is not `token` (the arguments: commands/arguments.py).

Kept light at import time: `version` and `--help` must not pay for the Azure SDK nor for the
workflow's step modules. Only the named command's arguments are added (arguments.SUBCOMMANDS:
`bootstrap`'s need the phase names, hence the step modules), and each command imports what
it needs when it runs. `python3 -X importtime -m aks_flex_node version` shows what is left:
the interpreter's start, argparse and this package's errors module. build_parser() without a
command builds every command's arguments (the man page and the bash completion are
generated from it: tools/mkman.py).
"""

import os
import sys

from aks_flex_node import __version__, output
from aks_flex_node.commands.arguments import CONFIG_ENV, ROOT_ENV, build_parser
from aks_flex_node.errors import ExitCode, FlexNodeError


def _setup_logging(verbosity, service=False):
    """Log to stderr: warnings, or for a service (the agent) what each pass changed (INFO)."""
    import logging

    level = (logging.INFO if service else logging.WARNING) - 10 * verbosity
    handler = logging.StreamHandler(sys.stderr)
    # journald adds its own timestamps (JOURNAL_STREAM is set for a unit's stderr).
    fmt = "%(levelname)s %(name)s: %(message)s" if os.environ.get("JOURNAL_STREAM") else \
        "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(level, logging.DEBUG))
    # The SDKs log every HTTP request at INFO: only show them with -vv.
    logging.getLogger("azure").setLevel(logging.DEBUG if verbosity >= 2 else logging.WARNING)
    logging.getLogger("msal").setLevel(logging.DEBUG if verbosity >= 2 else logging.WARNING)
    # azure-identity warns on every failed token request; we report that error ourselves.
    logging.getLogger("azure.identity").setLevel(logging.DEBUG if verbosity >= 2 else logging.ERROR)


def _root(args):
    # An empty --root never gets here (_path refuses it): it must not mean the live system.
    return getattr(args, "root", None) or os.environ.get(ROOT_ENV) or "/"


def _config_path(args):
    return getattr(args, "config", None) or os.environ.get(CONFIG_ENV)


def load_config(args):
    from aks_flex_node import config

    path, root = _config_path(args), _root(args)
    if path and path.endswith(".json"):
        return config.load_upstream_json(path, root=root)
    return config.load(path, root=root)


def _make_host(args):
    from aks_flex_node.host import Host

    return Host(_root(args))


def _print_json(doc):
    import json

    # One write: json.dump writes each token on its own, and each write passes output.shown
    # (and is a write(2) of its own when stdout is unbuffered): 0.1 s for a bootstrap's summary.
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def cmd_bootstrap(args):
    from aks_flex_node import operations
    from aks_flex_node.steps.preflight import checks as preflight

    ignored = preflight.parse_ignored(args.ignore_preflight_errors)
    cfg = load_config(args)
    host = _make_host(args)
    json_out = getattr(args, "json", False)
    result, summary = operations.bootstrap(
        cfg, host, dry_run=args.dry_run, sequential=args.sequential, only=args.phase,
        skip=args.skip_phase, ignore_preflight_errors=ignored, lock_wait=args.wait_lock,
        progress=None if json_out else output.PhasePrinter())
    if json_out:
        _print_json(summary)
    elif args.dry_run:
        output.print_plan(summary["phases"])
        for owed in summary["owed"]:
            print(f"  owed: {owed['kind']} {owed['unit']} ({owed['reason']})")
    if result.error is not None:
        error = result.error
        if not isinstance(error, FlexNodeError):
            error = FlexNodeError(f"{type(error).__name__}: {error}")
        if not json_out:  # with --json the summary above already holds the error
            _report_error(error, json_out=False)
        return int(error.exit_code)
    if not json_out and not args.dry_run:
        print(f"bootstrap complete in {summary['duration_s']:.1f}s: node {cfg.machine_name} "
              f"joined {cfg.cluster.name}" if any(p["status"] == "changed" for p in summary["phases"])
              else f"bootstrap: nothing to change ({summary['duration_s']:.1f}s)")
    return int(ExitCode.OK)


def cmd_unbootstrap(args):
    from aks_flex_node import operations

    cfg = load_config(args)
    host = _make_host(args)
    json_out = getattr(args, "json", False)
    _result, summary = operations.unbootstrap(
        cfg, host, keep_cloud_resources=args.keep_cloud_resources, dry_run=args.dry_run,
        lock_wait=args.wait_lock, drain=not args.skip_drain, drain_timeout=args.drain_timeout,
        progress=None if json_out or args.dry_run else output.PhasePrinter())
    if json_out:
        _print_json(summary)
    elif args.dry_run:
        output.print_plan(summary["phases"], what="would remove")
    else:
        for item in summary["kept"]:
            print(f"kept: {item}")
        if summary["leftovers"]:
            print("unbootstrap finished with leftovers to clean up by hand:", file=sys.stderr)
            for item in summary["leftovers"]:
                print(f"  - {item}", file=sys.stderr)
        else:
            print(f"unbootstrap complete: node {cfg.machine_name} removed")
    return summary["exit_code"]


def cmd_status(args):
    from aks_flex_node import lifecycle

    host = _make_host(args)
    status = lifecycle.wait_for_outcome(host, args.timeout) if args.wait else \
        lifecycle.last_status(host)
    if getattr(args, "json", False):
        _print_json(status)
    else:
        output.print_status(status, lifecycle.is_pending(host))
    if args.wait:
        return int(status.get("exit_code", 0))
    return int(ExitCode.OK)


def cmd_preflight(args):
    from aks_flex_node.steps.context import JoinContext
    from aks_flex_node.steps.kinds import open_ledger
    from aks_flex_node.steps.preflight import checks as preflight

    ignored = preflight.parse_ignored(args.ignore_preflight_errors)
    cfg = load_config(args)
    host = _make_host(args)
    ctx = JoinContext(cfg, host, open_ledger(host))
    results = preflight.run_checks(ctx, ignored)
    failed = [r for r in results if r.status == "error"]
    if getattr(args, "json", False):
        _print_json({"checks": [r.to_dict() for r in results], "ok": not failed})
    else:
        for r in results:
            line = f"[{r.status.upper():>7}] {r.name}"
            if r.message:
                line += f": {r.message}"
            print(line)
            if r.remedy and r.status != "pass":
                print(f"          -> {r.remedy}")
    if not failed:
        return int(ExitCode.OK)
    # As a bootstrap would end (preflight.raise_for): 75 when every failure may pass on its own.
    return int(ExitCode.TEMPFAIL if all(r.transient for r in failed) else ExitCode.PREFLIGHT)


def cmd_agent(args):
    from aks_flex_node import agent

    return agent.run(lambda: load_config(args), _make_host(args), interval=args.interval,
                     once=args.once, cloud_interval=args.cloud_interval, probe_max_age=args.probe_max_age)


def cmd_config(args):
    from aks_flex_node import config

    if args.config_command == "import":
        from aks_flex_node.config import importer

        target = args.output or _config_path(args)
        done = importer.import_upstream(args.source, output=target, secret_file=args.secret_file,
                                        root=_root(args), warn=lambda w: print(f"warning: {w}", file=sys.stderr))
        # The secret, a bootstrap token or a cluster CA go to files of their own.
        written = [f"{done.secret_file} (0600)"] if done.secret_file else []
        written += [path for path in done.files.values() if path != done.secret_file]
        print(f"wrote {target or config.DEFAULT_PATH}" + "".join(f" and {path}" for path in written))
        return int(ExitCode.OK)
    cfg = load_config(args)
    if args.config_command == "validate":
        print(f"{cfg.source}: valid")
        return int(ExitCode.OK)
    from aks_flex_node.steps.agentpool import recorded_overlay

    cfg = recorded_overlay(cfg, _make_host(args))
    effective = cfg.as_dict(redact=True)
    if getattr(args, "json", False):
        _print_json(dict(effective, **({"_origins": cfg.origins} if cfg.origins else {})))
    else:
        for key, value in effective.items():
            if key in cfg.origins:  # not the file's nor a default: say whose
                print(f"{key} = {output.ini_value(value)}  # from {cfg.origins[key]}")
                continue
            if isinstance(value, dict):
                print(f"[{key}]")
                for k, v in value.items():
                    print(f"{k} = {output.ini_value(v)}")
                print()
            else:
                print(f"{key} = {output.ini_value(value)}")
    return int(ExitCode.OK)


def cmd_upgrade(args):
    from aks_flex_node import operations, pool_follow
    from aks_flex_node.commands import upgrade

    cfg = load_config(args)
    host = _make_host(args)
    json_out = getattr(args, "json", False)
    # Agent-pool mode: a node that follows its Machine moves to the Machine's settings.
    goal, to = pool_follow.goal_to_apply(cfg, host), args.to
    if goal is not None and to is None and not cfg.is_set("kubernetes_version"):
        to = goal.version
    plan = upgrade.plan(cfg, host, to)
    if args.dry_run or not plan.runs:
        if json_out:
            _print_json(plan.to_dict())
        elif not plan.needed:
            print(f"node {plan.node}: kubelet {plan.kubelet} is already at {plan.target} "
                  f"(kube-apiserver {plan.apiserver}): nothing to do")
        else:
            print(f"would upgrade node {plan.node} from kubelet {plan.kubelet} to {plan.target} "
                  f"(kube-apiserver {plan.apiserver}; the version-skew policy allows it):")
            for number, step in enumerate(plan.steps, 1):
                print(f"  {number}. {step}")
        return int(ExitCode.OK)
    # The run is a bootstrap with the target as kubernetes_version: the kubernetes phase
    # installs it side by side, the kubelet-upgrade phase switches (steps/kubelet_upgrade.py).
    if not cfg.kubernetes_version:
        cfg = cfg.overlaid({"kubernetes_version": str(plan.target)}, "upgrade --to" if args.to else
                           "the Machine" if goal is not None else "the API server")
    result, summary = operations.bootstrap(cfg, host, lock_wait=args.wait_lock, upgrade=True, machine_goal=goal,
                                           progress=None if json_out else output.PhasePrinter())
    summary["upgrade"] = {k: v for k, v in plan.to_dict().items() if k in ("node", "apiserver", "kubelet", "target")}
    if json_out:
        _print_json(summary)
    if result.error is not None:
        error = result.error if isinstance(result.error, FlexNodeError) else \
            FlexNodeError(f"{type(result.error).__name__}: {result.error}")
        if not json_out:
            _report_error(error, json_out=False)
        return int(error.exit_code)
    if not json_out:
        print(f"upgrade complete in {summary['duration_s']:.1f}s: node {plan.node} runs kubelet "
              f"{plan.target} (was {plan.kubelet})")
    return int(ExitCode.OK)


def cmd_debug(args):
    from aks_flex_node.commands import debug

    path, index = debug.write_bundle(_make_host(args), lambda: load_config(args), output=args.output)
    failed = [part for part in index["parts"] if part["status"] == "failed"]
    if getattr(args, "json", False):
        _print_json({"path": path, "warnings": len(failed), "parts": index["parts"]})
        return int(ExitCode.OK)
    for part in failed:
        print(f"warning: {part['part']}: {part['why']}", file=sys.stderr)
    print(path)
    if failed:
        print(f"{len(failed)} part(s) could not be gathered: each says why in the bundle", file=sys.stderr)
    return int(ExitCode.OK)


def cmd_mirror(args):
    from aks_flex_node import config
    from aks_flex_node.commands import mirror
    from aks_flex_node.steps.artifacts import node_arch

    path = _config_path(args)
    # Read on a connected machine, not the node: the node's credential files need not be here.
    cfg = config.load_upstream_json(path, root=_root(args)) if path and path.endswith(".json") else \
        config.load(path, root=_root(args), elsewhere=True)
    host = _make_host(args)
    json_out = getattr(args, "json", False)
    directory = mirror.node_directory(args.directory)
    plan = mirror.plan(cfg, host, directory, mirror.release_versions(cfg, args.kubernetes_version),
                       mirror.arches_or_this(args.arch, node_arch))
    if args.dry_run:
        if json_out:
            _print_json(dict(plan.to_dict(), dry_run=True))
        else:
            for item in plan.items:
                print(mirror.entry_line(item, "would fetch" if item.state != mirror.PRESENT else "present")
                      + (f" from {item.url}" if item.state != mirror.PRESENT else ""))
            print(f"{len(plan.to_fetch)} of {len(plan.items)} file(s) to fetch into {directory}")
        return int(ExitCode.OK)
    progress = None if json_out else (lambda item, what: print(mirror.entry_line(item, what)))
    try:
        entries = mirror.sync(cfg, host, plan, progress=progress)
    except FlexNodeError as err:
        raise mirror.failed(err) from err
    if json_out:
        _print_json(dict(plan.to_dict(), fetched=len(plan.to_fetch), manifest=entries))
    else:
        print(f"{directory}: {len(plan.to_fetch)} file(s) fetched, {len(plan.items) - len(plan.to_fetch)} "
              f"already there; artifact_mirror = {mirror.file_url(directory)} (or serve {directory} over https)")
    return int(ExitCode.OK)


def cmd_version(args):
    if getattr(args, "json", False):
        _print_json({"version": __version__})
    else:
        print(f"aks-flex-node {__version__}")
    return int(ExitCode.OK)


COMMANDS = {
    "bootstrap": cmd_bootstrap, "unbootstrap": cmd_unbootstrap, "status": cmd_status,
    "preflight": cmd_preflight, "agent": cmd_agent, "config": cmd_config, "upgrade": cmd_upgrade,
    "debug": cmd_debug, "mirror": cmd_mirror, "version": cmd_version,
}


def _report_error(error, json_out):
    if json_out:
        _print_json(error.to_dict())
        return
    print(f"error: {error.message}", file=sys.stderr)
    if error.remedy:
        print(f"  what to do: {error.remedy}", file=sys.stderr)


def _debug(message):
    """Log the current exception's trace at DEBUG (shown with -vv)."""
    import logging

    logging.getLogger("aks_flex_node").debug(message, exc_info=True)


def main(argv, command):
    """Run the command line `argv`, whose command word (cli._command_word) is `command`."""
    # Every line we print, errors and logs included, leaves with its control characters
    # escaped (output.py): much of it is text from the network or the disk.
    with output.shown_streams():
        return _run(argv, command)


def _run(argv, command):
    """Parse `argv`, run its command, and turn what it raises into an exit code: the one
    error handler."""
    json_out = "--json" in argv
    try:
        args = build_parser(command).parse_args(argv)
        if args.command == "version":  # nothing to log: no logging import either
            return cmd_version(args)
        _setup_logging(getattr(args, "verbose", 0) or 0, service=args.command == "agent")
        return COMMANDS[args.command](args)
    except FlexNodeError as error:
        _debug("failed")
        _report_error(error, json_out)
        return int(error.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug: say so plainly, keep the trace for -vv
        _debug("internal error")
        print(f"internal error: {type(error).__name__}: {error} (run with -vv for the trace)",
              file=sys.stderr)
        return int(ExitCode.FAILED)
