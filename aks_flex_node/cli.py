"""The `aks-flex-node` command's door: find the command word, answer `token` from its cache
before anything else is imported, and hand every other command line to
commands/handlers.py (each command's run and output, and the one error handler).

`token` is the kubelet's exec credential plugin, run on every credential refresh: a cache
hit (cached_token.py) loads nothing beyond the standard library's json, os and time, not
even argparse; anything else it leaves to token.py, which answers as it always has. The
command word is found here, before any parser is built, so that only that command's
arguments (and modules) are loaded.

`run` is the process's entry (the installed command, `python3 -m aks_flex_node`): main,
then an exit without the interpreter's module teardown (see leave).
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


def run():
    """The process's entry: main(), then leave() with its exit code."""
    leave(main())


def leave(code):
    """Exit with `code` as the interpreter would (sys.exit), less its last part.

    Python's finalization first waits for the threads that are not daemons (and runs what
    threading's own atexit list holds, such as concurrent.futures' wake-up of idle
    workers), then runs the atexit functions (logging's shutdown, which flushes and closes
    every handler; weakref.finalize, which removes an unclosed TemporaryDirectory), then
    flushes stdout and stderr, and last tears down every module, one object at a time. A
    bootstrap that read Azure has some 800 modules loaded; their teardown took 75 ms of CPU
    (median of 12, make bench's machine), a tenth of a converged re-run, for memory that the
    kernel frees at exit anyway. So this does the first three, in that order, and then
    _exit(2)s. Where threading has no _shutdown to call (not CPython 3.10 to 3.14), or
    `code` is not a number, it is sys.exit as before."""
    threading = sys.modules.get("threading")  # not imported: no thread to wait for
    shutdown = getattr(threading, "_shutdown", None) if threading is not None else None
    if threading is not None and shutdown is None or not (code is None or isinstance(code, int)):
        sys.exit(code)
    if shutdown is not None:
        shutdown()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe: Python exits 120 when its flush fails
            code = 120
    os._exit(code or 0)
