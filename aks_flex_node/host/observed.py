"""What a pass observed of the host, and the cheap look again that tells the agent whether
any of it changed since: the drift probe (issue 30; agent.py says when it is used).

A `Recorder`, while it records (in the pass's forked child only), notes every observation
the pass makes of the host:
- each path read, stat'ed or listed: its lstat and stat signatures (device, inode, mode,
  owner, size, mtime and ctime in ns; or absent), taken when the pass looked at it. ctime is
  set by the kernel on every change of content, mode, owner or link count and cannot be set
  back by a process (stat(2), inode(7)), so an edit whose size and mtime were put back
  still shows;
- for a pseudo-file (under /proc or /sys, whose stat says nothing of its content: proc(5),
  sysfs(5)), a digest of its content (at most PSEUDO_MAX bytes);
- a directory's listing: a digest of its sorted names;
- each command run (host/run.py): argv, the environment it added, the digest of its exit
  code and output; only the read-only commands of READ_ONLY may be run again from the agent.

Opens, listings, processes and connections are seen through a Python audit hook (PEP 578;
events "open", "os.listdir", "os.scandir", "subprocess.Popen", "socket.connect", and the
os events that change a path), so no read by the pass escapes the record, whoever makes it;
stat-only looks are noted by the host door's functions that make them (fs, originals, root).
A path the pass wrote (status, metrics, the ledger, the lock) is signed again when the pass
ends, so its own write is not drift, and anyone else's later write is.

What cannot be looked at again makes the pass "not probe-able" (`Observations.unprobeable`
says why): a process that is not a read-only command, a connection outside a `deferred`
block, a read that fails. A `deferred` block (the Node read as the node, HIMDS's token) is
a network exchange the probe does not repeat; the agent's real passes repeat it at least
every agent.PROBE_MAX_AGE seconds.

`same(observations, env)` looks again, with the standard library alone (the agent's parent
imports no config or steps): None when everything is as it was, else what differs.
"""

import contextlib
import hashlib
import json
import os
import stat
import sys
import threading

VERSION = 1
PSEUDO = ("/proc/", "/sys/")  # node paths whose stat says nothing of their content
PSEUDO_MAX = 1 << 20
# Pseudo-files whose first word on each line is all that their one reader (host/kernel.py)
# takes: the loaded modules' names, and whether any swap area is listed (proc(5)). Their
# other columns (a module's use count, a swap area's use) move with the node's load.
FIRST_WORDS = ("/proc/modules", "/proc/swaps")
# Commands that only read (their verb), safe to run again from the agent's parent: what a
# converged local pass runs (systemctl(1) show, is-active, is-enabled; azcmagent show).
READ_ONLY = {"systemctl": frozenset({"show", "is-active", "is-enabled", "is-failed"}),
             "azcmagent": frozenset({"show"})}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# os events that change a path, and which of their arguments are the paths changed
# (os.symlink's first is the link's text, not a path; os.replace raises os.rename).
_CHANGES = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,), "os.chown": (0,),
            "os.utime": (0,), "os.truncate": (0,), "os.chflags": (0,), "os.setxattr": (0,),
            "os.removexattr": (0,), "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,)}
_PATHS = (str, bytes, os.PathLike)
_NOT_STATE = ("/dev/null",)

current = None  # the Recorder recording now, in this process (one pass at a time)
_hooked = False
_local = threading.local()  # per thread: inside our own look (no recursion), deferred depth


def _fields(st):
    return None if st is None else [st.st_mode, st.st_ino, st.st_dev, st.st_uid, st.st_gid, st.st_size,
                                    st.st_mtime_ns, st.st_ctime_ns]


def signature(real):
    """[lstat fields, stat fields] of real path `real` (None for what is not there); a
    directory's listing and a link's target are not followed further."""
    try:
        lst = os.lstat(real)
    except OSError:
        return [None, None]
    if not stat.S_ISLNK(lst.st_mode):
        return [_fields(lst), _fields(lst)]
    try:
        return [_fields(lst), _fields(os.stat(real))]
    except OSError:
        return [_fields(lst), None]


def owner_signature(real):
    try:
        st = os.stat(real)
    except OSError:
        return None
    return [st.st_mode, st.st_uid, st.st_gid]


def content_digest(real, first_words=False):
    """sha256 of the first PSEUDO_MAX bytes of `real` (with `first_words`, of each line's
    first word), read without waiting on a FIFO; a marker for what cannot be read (its
    errno), so a file that appears or goes differs."""
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        return f"error {err.errno}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not regular"
        chunks, left = [], PSEUDO_MAX
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if first_words:
            data = b"\n".join(line.split(maxsplit=1)[0] for line in data.splitlines() if line.strip())
        return hashlib.sha256(data).hexdigest()
    except OSError as err:
        return f"error {err.errno}"
    finally:
        os.close(fd)


def listing_digest(real):
    try:
        names = sorted(os.listdir(real))
    except OSError as err:
        return f"error {err.errno}"
    return hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()


def answer_digest(returncode, stdout, keys=None):
    """The digest of a command's answer: its exit code and output, or with `keys`, of the
    values its JSON object output holds at those keys alone (a marker when it is none)."""
    if keys is not None:
        try:
            doc = json.loads(stdout)
        except ValueError:
            doc = None
        stdout = json.dumps([doc.get(k) for k in keys] if isinstance(doc, dict) else "not a JSON object")
    return hashlib.sha256(f"{returncode}\0{stdout}".encode("utf-8", "surrogateescape")).hexdigest()


def read_only_command(argv):
    """Whether `argv` is a command of READ_ONLY (its verb: the first word after the options)."""
    verbs = READ_ONLY.get(os.path.basename(argv[0]))
    verb = next((a for a in argv[1:] if not a.startswith("-")), None)
    return verbs is not None and verb in verbs


class Recorder:
    """The observations of one pass on the host whose root is `root` (see the module)."""

    def __init__(self, root):
        self.root = os.path.abspath(str(root))
        self.files = {}  # real path -> signature
        self.contents = {}  # real path -> content digest (pseudo-files)
        self.listings = {}  # real path -> listing digest
        self.owners = {}  # real path -> [mode, uid, gid] (stat, a link followed): looked at for those alone
        self.commands = []  # {"argv", "env", "timeout", "answer"}
        self.written = set()
        self.deferred = set()  # what the pass asked that the probe does not (see `deferred`)
        self.unprobeable = None  # why the pass cannot be probed, the first reason found
        self.processes = 0  # processes started (audit), against commands noted
        self._lock = threading.Lock()

    def node_path(self, real):
        if self.root == "/":
            return real
        if real == self.root or real.startswith(self.root + "/"):
            return real[len(self.root):] or "/"
        return real

    def refuse(self, why):
        with self._lock:
            if self.unprobeable is None:
                self.unprobeable = why

    def looked(self, real):
        """The pass looked at `real` (read, stat'ed): its signature now, or its content's
        digest for a pseudo-file."""
        if real in self.files or real in self.contents or real in self.written:
            return
        node = self.node_path(real)
        if node.startswith(PSEUDO):
            value = [content_digest(real, node in FIRST_WORDS), node in FIRST_WORDS]
            with self._lock:
                self.contents.setdefault(real, value)
            return
        value = signature(real)
        with self._lock:
            self.files.setdefault(real, value)

    def looked_for_owner(self, real):
        """The pass judged `real` by its mode and owner alone (strictmodes.py: the directories
        above a configuration file): those are noted, not its times, which every entry made
        in it moves."""
        if real not in self.owners:
            value = owner_signature(real)
            with self._lock:
                self.owners.setdefault(real, value)

    def listed(self, real):
        if real not in self.listings:
            value = listing_digest(real)
            with self._lock:
                self.listings.setdefault(real, value)

    def wrote(self, real):
        with self._lock:
            self.written.add(real)
            self.written.add(os.path.dirname(real))  # its entries changed, and so its mtime

    def ran(self, argv, env, timeout, returncode, stdout, stdin=None, secrets=()):
        if stdin is not None or secrets or not read_only_command(argv):
            self.refuse(f"it ran {os.path.basename(argv[0])!r}, which the probe does not run again")
            return
        added = {k: v for k, v in env.items() if os.environ.get(k) != v}
        with self._lock:
            self.commands.append({"argv": list(argv), "env": added, "timeout": timeout,
                                  "answer": answer_digest(returncode, stdout), "stdout": (returncode, stdout)})

    def narrow(self, argv, keys):
        """The caller reads the JSON answer of `argv` at `keys` alone: those are what is watched."""
        with self._lock:
            for command in self.commands:
                if command["argv"] == list(argv) and "keys" not in command:
                    returncode, stdout = command["stdout"]
                    command["keys"], command["answer"] = list(keys), answer_digest(returncode, stdout, keys)

    def finish(self):
        """The observations (a JSON-able dict) once the pass is over: what it wrote signed
        again now, after its last write; `unprobeable` set when they cannot be probed."""
        if self.processes != len(self.commands) and self.unprobeable is None:
            self.refuse(f"it started {self.processes} processes, {len(self.commands)} of them read-only commands")
        files = dict(self.files)
        for real in self.written:
            sig = signature(real)
            if sig[0] is None and real not in self.files:
                continue  # made and gone within the pass (a temp file): nothing to watch
            files[real] = sig
            if real in self.listings:
                self.listings[real] = listing_digest(real)
        contents = {real: digest for real, digest in self.contents.items() if real not in self.written}
        owners = {real: value for real, value in self.owners.items() if real not in files}
        return {"version": VERSION, "root": self.root, "files": files, "contents": contents, "owners": owners,
                "listings": dict(self.listings),
                "commands": [{k: v for k, v in c.items() if k != "stdout"} for c in self.commands],
                "deferred": sorted(self.deferred), "unprobeable": self.unprobeable}

    # ---- the audit hook (PEP 578) --------------------------------------------------------

    def event(self, name, args):
        for i in _CHANGES.get(name, (0,) if name in ("open", "os.listdir", "os.scandir") else ()):
            path = args[i] if len(args) > i else None
            if isinstance(path, _PATHS) and not os.fsdecode(path).startswith("/") and not _code(path):
                # Relative to a directory descriptor (host/tree.py) or the working directory:
                # not a path the probe could look at again.
                self.refuse(f"it used a relative path ({name} {os.fsdecode(path)!r})")
                return
        if name == "open":
            path, flags = args[0], args[2] if len(args) > 2 else 0
            if isinstance(path, int) or _code(path):
                return
            real = os.path.abspath(os.fsdecode(path))
            if real in _NOT_STATE:
                return
            if isinstance(flags, int) and flags & _WRITE_FLAGS:
                self.wrote(real)
            elif isinstance(args[1], str) and set(args[1]) & set("wax+"):
                self.wrote(real)
            else:
                self.looked(real)
        elif name in ("os.listdir", "os.scandir"):
            path = args[0]
            if isinstance(path, _PATHS) and not _code(path):
                self.listed(os.path.abspath(os.fsdecode(path)))
        elif name in _CHANGES:
            for i in _CHANGES[name]:
                if len(args) > i and isinstance(args[i], _PATHS):
                    self.wrote(os.path.abspath(os.fsdecode(args[i])))
        elif name == "subprocess.Popen":
            with self._lock:
                self.processes += 1
        elif name in ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty.spawn"):
            self.refuse(f"it started a process ({name})")
        elif name == "socket.connect":
            self.refuse(f"it connected to {args[1]!r} outside a read the probe defers")


def _code(path):
    """Whether `path` is Python's code (a module an import opens, a directory it lists), not
    the host's state. By name alone: a prefix such as sys.path's could hold the root itself."""
    path = os.fsdecode(path)
    if path.endswith(_CODE_SUFFIXES) or "/__pycache__" in path:
        return True
    path = os.path.join(os.path.abspath(path), "")
    return path in _IMPORT_DIRS or (path.startswith(tuple(_IMPORT_DIRS))
                                    and os.path.exists(os.path.join(path, "__init__.py")))


_CODE_SUFFIXES = (".py", ".pyc", ".so", ".pth")
# The directories an import lists (sys.path's and our package's own)
_IMPORT_DIRS = frozenset(os.path.join(os.path.abspath(p), "") for p in
                         [*sys.path, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] if p)


def _hook(name, args):
    recorder = current
    if recorder is None or getattr(_local, "busy", False):
        return
    if getattr(_local, "deferred", 0):
        if name == "socket.connect":
            recorder.deferred.add(_local.what)
        return
    _local.busy = True
    try:
        recorder.event(name, args)
    except Exception as err:  # noqa: BLE001 - a probe that cannot note must not break the pass
        recorder.refuse(f"its observation could not be noted: {type(err).__name__}: {err}")
    finally:
        _local.busy = False


@contextlib.contextmanager
def recording(root):
    """Record what the code in the block observes of the host under `root`; yields the
    Recorder (its `finish()` gives the observations). An audit hook cannot be removed
    (PEP 578): it is added once per process and does nothing while no Recorder is current."""
    global current, _hooked
    if not _hooked:
        sys.addaudithook(_hook)
        _hooked = True
    recorder = Recorder(root)
    current = recorder
    try:
        yield recorder
    finally:
        current = None


@contextlib.contextmanager
def deferred(what):
    """A network exchange (`what`) inside the block: not looked at again by the probe (the
    agent's real pass repeats it at least every agent.PROBE_MAX_AGE seconds), nor are the
    files it reads (HIMDS's single-use challenge key)."""
    depth = getattr(_local, "deferred", 0)
    _local.deferred, previous = depth + 1, getattr(_local, "what", None)
    _local.what = what
    try:
        yield
    finally:
        _local.deferred, _local.what = depth, previous
        if current is not None and depth == 0:
            current.deferred.add(what)


# ---- the door's own notes (stat-only looks, commands) ----------------------------------------


def _noting():
    """The Recorder to note in, or None: none records, or the caller is inside a `deferred`
    exchange."""
    return current if current is not None and not getattr(_local, "deferred", 0) else None


def looked(real, owner_only=False):
    """Host door functions that look at a path without opening it (lstat, stat, readlink) call
    this; `owner_only`: the caller judges its mode and owner alone (a link followed)."""
    recorder = _noting()
    if recorder is not None and not getattr(_local, "busy", False):
        _local.busy = True
        try:
            real = os.path.abspath(os.fsdecode(real))
            if owner_only:
                recorder.looked_for_owner(real)
            else:
                recorder.looked(real)
        finally:
            _local.busy = False


def refuse(why):
    """What the pass does next cannot be probed (`why`): its observations are not probe-able."""
    if current is not None:
        current.refuse(why)


def ran(argv, env, timeout, returncode, stdout, stdin=None, secrets=()):
    """host/run.py calls this for each command that ran to its end."""
    recorder = _noting()
    if recorder is not None:
        recorder.ran(argv, env, timeout, returncode, stdout, stdin, secrets)


def narrow(argv, keys):
    """A command's reader (host/azcmagent.py show) reads its JSON answer at `keys` alone."""
    recorder = _noting()
    if recorder is not None:
        recorder.narrow(argv, keys)


# ---- looking again (the agent's parent) -------------------------------------------------------


def same(observations, run=None):
    """None when everything `observations` (Recorder.finish's) holds is as it was, else what
    differs, in words. `run(argv, env, timeout)` -> (returncode, stdout) runs a command (the
    agent: host/run.py's run_command); an error is a difference."""
    if not observations or observations.get("version") != VERSION or observations.get("unprobeable"):
        return "nothing to probe"
    for real, sig in observations["files"].items():
        now = signature(real)
        if now != sig:
            return f"{real} changed ({_what_changed(sig, now)})"
    for real, value in observations["owners"].items():
        if owner_signature(real) != value:
            return f"the mode or owner of {real} changed"
    for real, (digest, first_words) in observations["contents"].items():
        if content_digest(real, first_words) != digest:
            return f"the content of {real} changed"
    for real, digest in observations["listings"].items():
        if listing_digest(real) != digest:
            return f"the entries of {real} changed"
    for command in observations["commands"]:
        try:
            returncode, stdout = run(command["argv"], dict(os.environ, **command["env"]), command["timeout"])
        except Exception as err:  # noqa: BLE001 - any failure is a reason to run the real pass
            return f"`{' '.join(command['argv'])}` failed: {type(err).__name__}: {err}"
        if answer_digest(returncode, stdout, command.get("keys")) != command["answer"]:
            return f"`{' '.join(command['argv'])}` answers differently"
    return None


def sign_again(observations, host, written):
    """The agent wrote the node paths `written` of `host` itself (status.json, after a
    probe): their signatures, and their directories' signatures and listings, are taken
    again, so its own write is not drift at the next look."""
    for real in (str(host.path(p)) for p in written):
        for path in (real, os.path.dirname(real)):
            observations["files"][path] = signature(path)
            if path in observations["listings"]:
                observations["listings"][path] = listing_digest(path)


_FIELDS = ("mode", "inode", "device", "owner", "group", "size", "mtime", "ctime")


def _what_changed(before, now):
    if (before[0] is None) != (now[0] is None):
        return "appeared" if before[0] is None else "gone"
    for which, old, new in (("", before[0], now[0]), ("target's ", before[1], now[1])):
        if (old is None) != (new is None):
            return f"{which}existence"
        if old is not None:
            differ = [name for name, a, b in zip(_FIELDS, old, new) if a != b]
            if differ:
                return which + ", ".join(differ)
    return "?"
