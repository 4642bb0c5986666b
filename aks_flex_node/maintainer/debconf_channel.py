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

log = logging.getLogger("aks_flex_node.maintainer.maintscript")

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
            value = self._call("get", question)
        except self._errors as err:
            code, text = (list(err.args) + ["", ""])[:2]
            raise DebconfError(f"debconf GET {question}: {text} (code {code})",
                               remedy="reinstall the package so its templates are loaded")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # the reader's surrogateescape kept bytes that are not UTF-8
            raise DebconfError(f"debconf GET {question}: the answer is not UTF-8 text",
                               remedy=f"answer {question} again (dpkg-reconfigure aks-flex-node) "
                               "or preseed it in UTF-8") from None
        return value

    def set(self, question, value):
        self._call("set", question, value)

    def metaget(self, question, field):
        """A field of the question's template as debconf loaded it (debian/templates), e.g.
        Choices-C."""
        try:
            return self._call("metaget", question, field)
        except self._errors as err:
            code, text = (list(err.args) + ["", ""])[:2]
            raise DebconfError(f"debconf METAGET {question} {field}: {text} (code {code})",
                               remedy="reinstall the package so its templates are loaded")

    def fset(self, question, flag, value):
        self._call("fset", question, flag, value)

    def subst(self, question, key, value):
        self._call("subst", question, key, value)

    def input(self, priority, question):
        """Ask debconf to show `question` at the next GO; False when it says it will not
        (code 30 in debconf-devel(7))."""
        try:
            self._call("input", priority, question)
            return True
        except self._errors:
            return False

    def go(self):
        try:
            self._call("go")
        except self._errors:  # code 30: the user backed up; a note has nothing to go back to
            pass

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
    # A reply that is not UTF-8 (a preseed, or a value the config script copied from a
    # hand-edited file) must not end the script with a traceback: get() reports it.
    read = os.fdopen(os.dup(0), "r", encoding="utf-8", errors="surrogateescape", newline="\n")
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


def show_note(channel, template, **subst):
    """Show an error note (a Type: error template) at critical priority, which every
    frontend shows: noninteractive prints it on the terminal and mails it to root when it
    can (debconf's Element/Noninteractive/Error.pm). A note that cannot be shown costs
    only the note: the caller says the same on stderr."""
    try:
        for key, value in subst.items():
            channel.subst(q(template), key, " ".join(str(value).split()))
        # GO even when INPUT says 30: noninteractive still queued the note to print it.
        channel.input("critical", q(template))
        channel.go()
        channel.fset(q(template), "seen", "false")  # the same problem again is shown again
    except (FlexNodeError, OSError, ValueError):
        log.debug("debconf note %s failed", template, exc_info=True)


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
