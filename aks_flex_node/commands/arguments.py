"""The command line's grammar: every command's arguments, their checks (seconds, paths) and
the parser (tools/mkman.py makes the man page and the bash completion from it). Standard
library only, and light: the parser of one command is built without the others' (cli.py).
"""

import argparse
import math
import re

from aks_flex_node.errors import UsageError

# The config file's default location (aks_flex_node/paths.py CONFIG and SECRET), spelled
# here so that parsing does not import pathlib; tests/unit/test_cli.py checks they agree.
DEFAULT_CONFIG = "/etc/aks-flex-node/aks-flex-node.conf"
DEFAULT_SECRET = "/etc/aks-flex-node/sp-client-secret"
ALL = "all"  # build_parser(ALL): every command with its arguments
ROOT_ENV = "AKS_FLEX_NODE_ROOT"
CONFIG_ENV = "AKS_FLEX_NODE_CONFIG"


# A week: longer than any wait we would ask for, and far below what time.sleep and
# monotonic arithmetic can hold (a huge value would end in OverflowError, not a message).
MAX_SECONDS = 7 * 24 * 3600
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")  # ASCII digits only, no exponent


def _seconds(minimum, strict):
    """An argparse type: a number of seconds (a plain decimal, > or >= `minimum`, at most
    MAX_SECONDS); argparse names the option and the value when it refuses one. float()
    alone would take "inf", "1e9" and non-ASCII digits."""
    def parse(text):
        value = float(text) if _DECIMAL.fullmatch(text.strip()) else math.nan
        if not math.isfinite(value) or value < minimum or (strict and value == minimum) \
                or value > MAX_SECONDS:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected a number of seconds {'greater than' if strict else 'of at least'} "
                f"{minimum:g} and at most {MAX_SECONDS} (digits 0-9 and a decimal point)")
        return value

    parse.__name__ = "seconds"
    return parse


def _path(example):
    """An argparse type: a path that is not empty (an unset shell variable must not quietly
    mean the default)."""
    def parse(text):
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{text!r}: expected a path, e.g. {example}")
        return text

    parse.__name__ = "path"
    return parse


POSITIVE, NOT_NEGATIVE = _seconds(0, strict=True), _seconds(0, strict=False)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 2 through our handler, with the usage line
        raise UsageError(f"{message}\n{self.format_usage().strip()}")


def _common(parser):
    parser.add_argument("--root", default=argparse.SUPPRESS, type=_path("/mnt/image"), metavar="DIR",
                        help="act on the filesystem below DIR instead of / (tests, image building)")
    parser.add_argument("--config", default=argparse.SUPPRESS, metavar="PATH", type=_path(DEFAULT_CONFIG),
                        help="configuration file (INI, or the upstream agent's config.json); "
                        "default /etc/aks-flex-node/aks-flex-node.conf")
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable output")
    parser.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more log output (-vv for debug)")


def _bootstrap_arguments(p, common):
    from aks_flex_node.steps.workflow import PHASE_HELP, PHASE_NAMES

    phases = "; ".join(f"{name}: {text}" for name, text in PHASE_HELP)
    p.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    p.add_argument("--sequential", action="store_true",
                   help="run the phases one at a time, in the upstream agent's order")
    p.add_argument("--phase", action="append", default=[], choices=PHASE_NAMES, metavar="PHASE",
                   help=f"run only this phase (repeatable). The phases, in order: {phases}")
    p.add_argument("--skip-phase", action="append", default=[], choices=PHASE_NAMES,
                   metavar="PHASE", help="skip this phase (repeatable)")
    p.add_argument("--ignore-preflight-errors", default="", metavar="CHECKS",
                   help="comma-separated preflight checks whose errors become warnings, or `all`")
    p.add_argument("--wait-lock", type=NOT_NEGATIVE, default=0.0, metavar="SECONDS",
                   help="wait this long for another run to finish")


def _unbootstrap_arguments(p, common):
    p.add_argument("--keep-cloud-resources", action="store_true",
                   help="clean up locally only; keep the Arc machine, role assignments and Node")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would be removed, and why; change nothing")
    p.add_argument("--wait-lock", type=NOT_NEGATIVE, default=0.0, metavar="SECONDS")
    p.add_argument("--drain-timeout", type=POSITIVE, default=None, metavar="SECONDS",
                   help="how long to wait for PodDisruptionBudgets to allow the evictions before "
                        "the Node is deleted (default 120)")
    p.add_argument("--skip-drain", action="store_true",
                   help="delete the Node without cordoning and draining it first")


def _status_arguments(p, common):
    p.add_argument("--wait", action="store_true",
                   help="wait until the running bootstrap is over; exit with its exit code")
    p.add_argument("--timeout", type=POSITIVE, default=900.0, metavar="SECONDS")


def _preflight_arguments(p, common):
    p.add_argument("--ignore-preflight-errors", default="", metavar="CHECKS")


def _agent_arguments(p, common):
    p.add_argument("--interval", type=POSITIVE, default=60.0, metavar="SECONDS",
                   help="seconds between local passes (host only, no Azure call)")
    p.add_argument("--cloud-interval", type=POSITIVE, default=1800.0, metavar="SECONDS",
                   help="seconds between full passes (the cloud side too)")
    p.add_argument("--probe-max-age", type=NOT_NEGATIVE, default=300.0, metavar="SECONDS",
                   help="the longest the drift probe stands in for local passes when nothing changed "
                   "(0: a local pass every interval)")
    p.add_argument("--once", action="store_true", help="one pass, then exit")


def _upgrade_arguments(p, common):
    p.add_argument("--to", default=None, metavar="VERSION",
                   help="the kubelet version to move to (MAJOR.MINOR.PATCH); default: the API server's")
    p.add_argument("--dry-run", action="store_true",
                   help="check the version-skew policy and print the plan; change nothing")
    p.add_argument("--wait-lock", type=NOT_NEGATIVE, default=0.0, metavar="SECONDS",
                   help="wait this long for another run to finish")


def _debug_arguments(p, common):
    p.add_argument("--output", default=None, metavar="PATH", type=_path("/tmp/flex-debug.tar.gz"),
                   help="where to write the bundle (0600; a link there is refused); default "
                        "/var/lib/aks-flex-node/debug-<UTC time>.tar.gz")


def _config_arguments(p, common):
    prog = "aks-flex-node config"
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", parser_class=_Parser, prog=prog)
    csub.required = True
    csub.add_parser("show", parents=[common], help="the effective configuration, secrets redacted")
    csub.add_parser("validate", parents=[common], help="check the configuration")
    ip = csub.add_parser("import", parents=[common],
                         help="convert the upstream agent's config.json into our INI file")
    ip.add_argument("source", metavar="CONFIG_JSON")
    ip.add_argument("--output", default=None, metavar="PATH", type=_path(DEFAULT_CONFIG),
                    help="where to write (default: the configuration path)")
    ip.add_argument("--secret-file", default=None, metavar="PATH", type=_path(DEFAULT_SECRET),
                    help=f"where the service principal secret goes (0600; default {DEFAULT_SECRET})")


def _release(text):
    """An argparse type: a Kubernetes release MAJOR.MINOR.PATCH (a leading v allowed), as
    kubernetes_version takes it (kubeversion.py)."""
    from aks_flex_node.kubeversion import KubeVersion, VersionError

    try:
        return str(KubeVersion.parse_release(text))
    except VersionError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


_release.__name__ = "version"


def _mirror_arguments(p, common):
    msub = p.add_subparsers(dest="mirror_command", metavar="ACTION", parser_class=_Parser,
                            prog="aks-flex-node mirror")
    msub.required = True
    sp = msub.add_parser("sync", parents=[common],
                         help="fetch, verify and lay out in DIR every artifact a join needs, for "
                              "artifact_mirror (https or file://); needs no join, no Azure, no root")
    sp.add_argument("directory", metavar="DIR", type=_path("/media/usb/aks-flex-node"),
                    help="the mirror directory (created 0755 when missing)")
    sp.add_argument("--kubernetes-version", action="append", default=[], type=_release, metavar="VERSION",
                    help="a Kubernetes release to mirror (repeatable); default: the configuration's "
                         "kubernetes_version")
    sp.add_argument("--arch", action="append", default=[], choices=("amd64", "arm64"), metavar="ARCH",
                    help="an architecture to mirror, amd64 or arm64 (repeatable); default: this machine's")
    sp.add_argument("--dry-run", action="store_true",
                    help="list what would be fetched (and what is there already); change nothing")


# Every command, in the order `--help` lists them: (name, help, what adds its arguments
# given its parser and the options every command takes).
# `token` parses its own arguments (token.py), routed in main() before any of this.
SUBCOMMANDS = (
    ("bootstrap", "join this node to the cluster", _bootstrap_arguments),
    ("unbootstrap", "take this node out of the cluster and remove what bootstrap made",
     _unbootstrap_arguments),
    ("status", "what the last run did", _status_arguments),
    ("preflight", "check the machine before a join", _preflight_arguments),
    ("token", "print an ExecCredential for the kubelet (its exec plugin)", None),
    ("agent", "the service: finish a pending join, then watch and converge", _agent_arguments),
    ("upgrade", "move the kubelet to the cluster's version (or --to): cordon, drain, switch, uncordon",
     _upgrade_arguments),
    ("config", "show, check or import the configuration", _config_arguments),
    ("debug", "write a support bundle (tar.gz, secrets redacted) of this node's state", _debug_arguments),
    ("mirror", "fill a directory to serve as artifact_mirror, on a machine that reaches the release servers",
     _mirror_arguments),
    ("version", "print the version", None),
)


def build_parser(command=ALL):
    """The parser. With the name of a command, only that command's parser is built (argparse
    makes each with a help formatter and several gettext lookups: ~10 ms for all of them);
    with None or an unknown word, every command is listed without its arguments, for
    `--help` and for argparse's "invalid choice"."""
    common = _Parser(add_help=False)
    _common(common)
    parser = _Parser(prog="aks-flex-node", parents=[common],
                     description="Join this machine to an AKS cluster (through Azure Arc, a FlexNodes "
                     "agent pool or a bootstrap token), keep it current, and take it out again.")
    # prog given: else argparse formats a usage line to make the commands' (importing shutil).
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, prog="aks-flex-node")
    sub.required = True
    named = command in {name for name, _, _ in SUBCOMMANDS}
    for name, text, add_arguments in SUBCOMMANDS:
        if named and name != command:
            continue
        p = sub.add_parser(name, parents=[common], help=text)
        if add_arguments is not None and command in (ALL, name):
            add_arguments(p, common)
    return parser
