"""The node's files the Debian maintainer scripts read, inspected before they are used.

A hand edit, a disk fault or an interrupted run can leave any of them unusable. Each is
inspected before it is used: what is not a regular file is never opened (a FIFO would
block the script, and dpkg's lock with it), and every problem becomes a BadFile, which
the postinst shows as a debconf note naming the file and what to do.
"""

import os

from aks_flex_node import paths
from aks_flex_node.engine.status import StatusFile
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import careful_read
from aks_flex_node.maintainer.debconf_answers import file_value
from aks_flex_node.steps.kinds import open_ledger

REDO = "then run dpkg-reconfigure aks-flex-node"
NUL = b"\0"
# Our configuration, secret and state files are a few KiB; a ledger of many installs stays
# well under a MiB. Reading is bounded so a huge file put in their place costs no memory.
MAX_FILE_BYTES = 16 * 1024 * 1024


class BadFile(FlexNodeError):
    """A file (or directory) a maintainer script reads that cannot be used."""

    code = "bad-file"

    def __init__(self, path, problem, remedy):
        super().__init__(f"{path} cannot be used: {problem}", remedy=remedy)
        self.path = path
        self.problem = problem


def _aside(path):
    return f"move it aside (mv {path} {path}.bad)"


def dir_problem(host, node_path):
    """Why the directory at node path `node_path` cannot hold our files, or None."""
    kind = host.kind(node_path)
    if kind is None or host.is_dir(node_path):
        return None
    if kind == "link":
        return f"a symbolic link to {host.read_link(node_path)}, which is not a directory"
    return "a file, not a directory"


def file_problem(host, node_path, text=False, required=False):
    """(problem, content) of the file at node path `node_path`: why it cannot be read (None
    when it can, or when it is absent and not `required`) and its bytes. `text`: UTF-8
    text without NUL bytes; `required`: there and not empty. A link is followed (an
    operator may link the configuration from elsewhere); what is not a regular file is
    never waited on, and no more than MAX_FILE_BYTES is read."""
    try:
        data = host.read_carefully(node_path, MAX_FILE_BYTES, follow=True)
    except careful_read.Unsafe as unsafe:
        return _unreadable(host, node_path, unsafe, required), None
    if required and not data.strip():
        return "it is empty", data
    if text and NUL in data:
        return f"a binary file (a NUL byte at offset {data.index(NUL)}), not text", data
    if text:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            line = data.count(b"\n", 0, err.start) + 1
            return f"not UTF-8 text (byte 0x{data[err.start]:02x} on line {line})", data
    return None, data


def _unreadable(host, node_path, unsafe, required):
    """The problem careful_read found, in the words the maintainer scripts' notes use."""
    if unsafe.code == "absent":
        if host.kind(node_path) == "link":
            return f"a symbolic link to {host.read_link(node_path)}, which does not exist"
        return "it does not exist" if required else None
    if unsafe.code == "not-regular":
        return ("a directory, not a file" if host.is_dir(node_path)
                else "not a regular file (a FIFO, a socket or a device)")
    if unsafe.code == "too-large":
        return f"larger than {MAX_FILE_BYTES} bytes: not a file aks-flex-node wrote"
    # A symlink loop, a parent that is not a directory, a permission refused.
    return f"it cannot be reached ({os.strerror(unsafe.errno)})" if unsafe.errno else unsafe.why


def config_problems(host):
    """BadFiles among the configuration's directory and file, and the file's text."""
    problem = dir_problem(host, paths.CONFIG_DIR)
    if problem:
        return [BadFile(paths.CONFIG_DIR, problem, f"{_aside(paths.CONFIG_DIR)}, {REDO}: it is "
                        "written again from the answers")], None
    problem, data = file_problem(host, paths.CONFIG, text=True)
    if problem is None:
        return [], (data or b"").decode("utf-8")
    if data is None:  # not a file at all
        remedy = f"{_aside(paths.CONFIG)}, {REDO}: it writes a new one from the answers"
    else:
        remedy = (f"fix it by hand (it is UTF-8 text; iconv -f ISO-8859-1 -t UTF-8 converts a "
                  f"Latin-1 file) or {_aside(paths.CONFIG)}, {REDO}")
    return [BadFile(paths.CONFIG, problem, remedy)], None


def secret_problems(host, text):
    """BadFiles among the client secret files: ours (debconf's), and the one the
    configuration names, which must hold the secret when the service principal uses it."""
    named = file_value(text or "", "sp_client_secret_file") or ""
    method = file_value(text or "", "auth_method") or ""
    bad = []
    for node_path in dict.fromkeys([paths.SECRET, named]):
        if not node_path.startswith("/"):
            continue  # not a path: config.load says what it expects
        required = node_path == named and method in ("", "service-principal")
        problem, _data = file_problem(host, node_path, text=True, required=required)
        if problem:
            remedy = (f"write the client secret into it (a file only root can read: chmod 600) or "
                      f"{_aside(node_path)} and give the secret again with dpkg-reconfigure aks-flex-node")
            bad.append(BadFile(node_path, problem, remedy))
    return bad


def state_problems(host):
    """BadFiles among the state the join reads: its directory, the pending mark, the
    ledger (read as the library reads it) and status.json."""
    problem = dir_problem(host, paths.STATE_DIR)
    if problem:
        return [BadFile(paths.STATE_DIR, problem, f"{_aside(paths.STATE_DIR)}, {REDO}")]
    bad = []
    problem, _data = file_problem(host, paths.PENDING)
    if problem:
        bad.append(BadFile(paths.PENDING, problem, f"remove it (rm -r {paths.PENDING}): the mark is an "
                                                   "empty file, written again when a join is asked for"))
    problem, _data = file_problem(host, paths.LEDGER)
    if problem:
        bad.append(BadFile(paths.LEDGER, problem, f"restore it, or {_aside(paths.LEDGER)} and remove "
                                                  "what it listed by hand: without it nothing can be undone"))
    else:
        try:
            open_ledger(host)
        except FlexNodeError as err:
            bad.append(BadFile(paths.LEDGER, _without(paths.LEDGER, err.message), err.remedy))
    problem, _data = file_problem(host, paths.STATUS)
    if problem is None:
        try:
            StatusFile(host).read()
        except FlexNodeError as err:
            problem = _without(paths.STATUS, err.message)
    if problem:
        bad.append(BadFile(paths.STATUS, problem, f"remove it (rm -r {paths.STATUS}): the next run "
                                                  "writes it again"))
    return bad


def _without(path, message):
    """The library's message on a file ("PATH is not JSON"), as our problem: "it is not JSON"."""
    return "it" + message[len(path):] if message.startswith(path + " is ") else message


def load_problems(err):
    """The problems of a ConfigError that are about the file itself (unreadable, lines
    configobj cannot parse), not about a value: a BadFile, or None."""
    whole = [p for p in err.problems if p.key == "config file" or p.key.startswith("line ")]
    if not whole:
        return None
    return BadFile(paths.CONFIG, "; ".join(f"{p.key}: {p.value!r}: expected {p.expected}" for p in whole),
                   f"fix these lines by hand or {_aside(paths.CONFIG)}, {REDO}")
