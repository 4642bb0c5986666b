#!/usr/bin/python3
"""Write the aks-flex-node(8) man page from the CLI's own argparse parser.

Run at package build time (debian/rules), so the page and the command cannot drift apart.
Standard library only: aks_flex_node.commands.arguments.build_parser() imports no Azure SDK and no
configobj, so the build needs no more than python3 (the package's Build-Depends).

    python3 tools/mkman.py [--output FILE]

The date in the page comes from SOURCE_DATE_EPOCH (dpkg-buildpackage sets it from
debian/changelog), so two builds of the same source give the same page.
"""

import argparse
import datetime
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from aks_flex_node import __version__  # noqa: E402
from aks_flex_node.commands import arguments as cli  # noqa: E402 (the grammar: commands/arguments.py)
from aks_flex_node.errors import ExitCode  # noqa: E402

# What each exit code means to an operator; a test checks every ExitCode has a line here.
EXIT_CODES = {
    ExitCode.OK: "success",
    ExitCode.FAILED: "the operation failed (the message says which phase and why)",
    ExitCode.USAGE: "bad command line or configuration (every problem is listed, each naming the key)",
    ExitCode.PREFLIGHT: "a preflight check failed and was not ignored",
    ExitCode.AUTH: "Azure authentication failed or a permission is missing",
    ExitCode.UNAVAILABLE: "the operation is not available in this release (upgrade without --dry-run: docs/upgrade.md)",
    ExitCode.TEMPFAIL: "a temporary failure (network, throttling, another run holding the lock): retry later",
}

FILES = (
    ("/etc/aks-flex-node/aks-flex-node.conf",
     "the configuration (mode 0600); written from the debconf answers by the package, "
     "kept when edited by hand. Every key is described in "
     "/usr/share/doc/aks-flex-node/configuration.md."),
    ("/etc/aks-flex-node/sp-client-secret",
     "the service principal's client secret (mode 0600), when auth_method is service-principal."),
    ("/var/lib/aks-flex-node/ledger.json",
     "what aks-flex-node created on this node and in Azure; unbootstrap walks it backwards."),
    ("/var/lib/aks-flex-node/status.json",
     "the outcome of the last run, phase by phase (shown by status)."),
    ("/var/lib/aks-flex-node/join-pending",
     "a join is wanted but has not succeeded yet; the aks-flex-node-agent service retries it."),
    ("/usr/share/doc/aks-flex-node/preseed.md",
     "the debconf questions and how to preseed them for an unattended install."),
)

ENVIRONMENT = (
    (cli.ROOT_ENV, "act on the filesystem below this directory instead of / (same as --root)."),
    (cli.CONFIG_ENV, "the configuration file to read (same as --config)."),
)


def roff(text):
    """Escape text for a roff line: backslashes, hyphens, and a leading dot or quote."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text[:1] in (".", "'"):
        text = "\\&" + text
    return text


def expand_help(action):
    text = action.help or ""
    if "%(" in text:
        params = dict(vars(action), prog="aks-flex-node")
        params["choices"] = ", ".join(map(str, action.choices or ()))
        text = text % params
    return text


def option_label(action):
    """`--phase PHASE` as roff: the option in bold, its argument in italics."""
    names = ", ".join(f"\\fB{roff(name)}\\fR" for name in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    return f"{names} \\fI{roff(str(metavar))}\\fR"


def sibling_helps(parser):
    """Help text by option string, from whichever command documents it (the CLI gives some
    options, e.g. --wait-lock, a help text in one command only)."""
    helps = {}
    for _path, sub, _help in walk(parser):
        for action in options(sub):
            if action.help:
                for name in action.option_strings:
                    helps.setdefault(name, action.help)
    return helps


def describe(action, borrowed):
    text = expand_help(action) or next(
        (borrowed[name] for name in action.option_strings if name in borrowed), "")
    choices = ", ".join(map(str, action.choices or ()))
    if choices and choices not in text:
        text += f" (one of: {choices})"
    default = action.default
    if action.nargs != 0 and default not in (None, "", [], (), argparse.SUPPRESS) and "default" not in text:
        text += f" (default: {default:g})" if isinstance(default, float) else f" (default: {default})"
    return text.strip()


def walk(parser, path=()):
    """Yield (command path, parser, help) for every (sub)command, depth first, in order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield path + (name,), sub, helps.get(name, "")
                yield from walk(sub, path + (name,))


def common_dests():
    common = argparse.ArgumentParser(add_help=False)
    cli._common(common)
    return {a.dest for a in common._actions} | {"help"}


def options(parser, skip=()):
    return [a for a in parser._actions
            if a.option_strings and a.dest not in skip and a.help != argparse.SUPPRESS]


def positionals(parser):
    return [a for a in parser._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]


def has_subcommands(parser):
    return any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


def page_date():
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return ""
    return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime("%Y-%m-%d")


def render(parser=None):
    parser = parser or cli.build_parser()
    common = common_dests()
    borrowed = sibling_helps(parser)
    out = [
        '.\\" Generated by tools/mkman.py from the argparse definition in aks_flex_node/cli.py.',
        f'.TH AKS\\-FLEX\\-NODE 8 "{page_date()}" "aks\\-flex\\-node {roff(__version__)}" '
        '"System Administration"',
        ".SH NAME",
        "aks\\-flex\\-node \\- join this machine to an AKS cluster through Azure Arc, and take it out again",
        ".SH SYNOPSIS",
        ".B aks\\-flex\\-node",
        ".RI [ options ] " + '" " command " " [ arguments ]',
        ".SH DESCRIPTION",
        roff(parser.description or ""),
        ".PP",
        "A runner walks an ordered list of phases. Each phase reads the host and Azure, decides",
        "what must change and why, applies exactly that, and records what it created, so that",
        ".B unbootstrap",
        "removes what was created and only that.",
        "The Debian package asks for the configuration through debconf (or takes a preseed),",
        "joins on installation, and leaves the cluster on removal.",
        ".SH COMMANDS",
    ]
    for path, sub, help_text in walk(parser):
        if has_subcommands(sub):
            out += [f'.SS "{roff(" ".join(path))}"', roff(help_text) + "."]
            continue
        synopsis = " ".join(path)
        for action in positionals(sub):
            synopsis += f" {(action.metavar or action.dest).upper()}"
        out += [f'.SS "{roff(synopsis)}"', roff(help_text) + "."]
        for action in options(sub, skip=common):
            out += [".TP", option_label(action), roff(describe(action, borrowed))]
    out += [".SH OPTIONS", "Every command takes these options."]
    for action in options(parser):
        if action.dest in common:
            out += [".TP", option_label(action), roff(expand_help(action) or "show the help and exit")]
    out += [".SH EXIT STATUS"]
    for code in ExitCode:
        out += [".TP", f"\\fB{int(code)}\\fR", roff(EXIT_CODES[code])]
    out += [".SH ENVIRONMENT"]
    for name, text in ENVIRONMENT:
        out += [".TP", f"\\fB{roff(name)}\\fR", roff(text)]
    out += [".SH FILES"]
    for name, text in FILES:
        out += [".TP", f"\\fI{roff(name)}\\fR", roff(text)]
    out += [
        ".SH EXAMPLES",
        ".nf",
        "aks\\-flex\\-node bootstrap \\-\\-dry\\-run",
        "aks\\-flex\\-node status \\-\\-json",
        "dpkg\\-reconfigure aks\\-flex\\-node",
        ".fi",
        ".SH SEE ALSO",
        ".BR dpkg\\-reconfigure (8),",
        ".BR debconf\\-set\\-selections (1),",
        ".BR systemctl (1)",
        "",
    ]
    return "\n".join(out)


def write_generated(render_text, doc, argv=None):
    """The command line of a generator (this one, tools/mkcompletion.py): [--output FILE]."""
    args = argparse.ArgumentParser(description=doc.splitlines()[0])
    args.add_argument("--output", help="write here instead of standard output")
    opts = args.parse_args(argv)
    text = render_text()
    if opts.output:
        os.makedirs(os.path.dirname(os.path.abspath(opts.output)), exist_ok=True)
        with open(opts.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv=None):
    return write_generated(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
