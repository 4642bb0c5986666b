"""The debconf channel a maintainer script inherits, through python3-debconf's client.

The postinst sources confmodule and then runs our Python; this module takes the channel
over (stdin for replies, fd 3 or stdout for commands: debconf-devel(7)), so that anything
else printed goes to stderr, and it shows the runner's progress as debconf's progress bar.
"""

import logging
import os
import sys
import threading

from aks_flex_node.errors import FlexNodeError

log = logging.getLogger("aks_flex_node.maintscript")

QUESTION_PREFIX = "aks-flex-node/"


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
