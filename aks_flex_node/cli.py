"""The `aks-flex-node` command's door: find the command word, answer `token` from its cache
before anything else is imported, and hand every other command line to
commands/handlers.py (each command's run and output, and the one error handler).

`token` is the kubelet's exec credential plugin, run on every credential refresh: a cache
hit (cached_token.py) loads nothing beyond the standard library's json, os and time, not
even argparse; anything else it leaves to token.py, which answers as it always has. The
command word is found here, before any parser is built, so that only that command's
arguments (and modules) are loaded.
"""

import os
import sys


def _command_word(argv):
    """The command `argv` names (its first word that is neither an option nor the value of
    --root/--config), or None: found before any parser is built, so only that command's
    arguments (and modules) are loaded."""
    args = iter(argv)
    for arg in args:
        if arg in ("--root", "--config"):
            next(args, None)  # the option's value
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_word(argv)
    if command == "token":
        from aks_flex_node import cached_token  # json: not on `version`'s path

        rest = list(argv)
        rest.remove("token")
        answered = cached_token.answer(rest, os.environ, sys.stdout)
        if answered is not None:
            return answered
        from aks_flex_node import token  # argparse and the rest: a miss, a flag, a refusal

        return token.main(rest, os.environ)
    from aks_flex_node.commands import handlers  # argparse and the package's errors

    return handlers.main(argv, command)
