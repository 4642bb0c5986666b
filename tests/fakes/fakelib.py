"""Shared plumbing of the host-command stand-ins in tests/fakes/bin (stdlib only).

Each stand-in records its argv in $FAKE_STATE_DIR/calls.jsonl, honours a fault file
$FAKE_STATE_DIR/fail-<command> (or fail-<command>-<verb>): exit 1 with its content on
stderr, honours $FAKE_STATE_DIR/noop-<command> where it says so (exit 0, nothing done:
`does_nothing`), and keeps its state in a JSON file under $FAKE_STATE_DIR, changed under
an flock so that concurrent steps do not lose updates. Paths on the node map to $FAKE_ROOT + path.
"""

import contextlib
import fcntl
import json
import os
import sys
import time


def state_dir():
    d = os.environ.get("FAKE_STATE_DIR")
    if not d:
        sys.stderr.write(f"{os.path.basename(sys.argv[0])} (test stand-in): FAKE_STATE_DIR is not set; "
                         "expected the directory where the fakes keep their state\n")
        sys.exit(2)
    os.makedirs(d, exist_ok=True)
    return d


def root_path(path):
    """The stand-in view of a node path: $FAKE_ROOT + path (or path itself without FAKE_ROOT)."""
    root = os.environ.get("FAKE_ROOT", "/")
    return os.path.join(root, path.lstrip("/"))


@contextlib.contextmanager
def _flock(name):
    fd = os.open(os.path.join(state_dir(), name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_json(name, default=None):
    path = os.path.join(state_dir(), name)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def write_json(name, data, mode=0o600):
    path = os.path.join(state_dir(), name)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked_json(name, default):
    """Read-modify-write a state file under an exclusive lock: `with locked_json(n, {}) as d: d[...] = ...`."""
    with _flock(name):
        data = read_json(name, default)
        yield data
        write_json(name, data)


def redact(argv, secret_flags):
    """argv with the value of each secret flag (`--flag value` or `--flag=value`) replaced."""
    out, hide = [], False
    for arg in argv:
        name, eq, _ = arg.partition("=")
        if hide:
            out.append("<redacted>")
            hide = False
        elif name in secret_flags and eq:
            out.append(f"{name}=<redacted>")
        else:
            out.append(arg)
            hide = arg in secret_flags
    return out


def record_call(command, argv):
    entry = {"command": command, "argv": [command] + list(argv), "time": time.time(), "pid": os.getpid()}
    with _flock("calls.jsonl"):
        with open(os.path.join(state_dir(), "calls.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")


def check_fault(command, argv):
    """Exit 1 with the fault file's content if $FAKE_STATE_DIR/fail-<command>[-<verb>] exists;
    with hang-<command>[-<verb>], say so in <that file>.waiting and wait until the test removes
    the hang file (a gate, not a time: a test that kills the caller meanwhile finds it still
    waiting however slow the machine), or until the state directory is gone."""
    verb = next((a for a in argv if not a.startswith("-")), None)
    for name in [f"hang-{command}"] + ([f"hang-{command}-{verb}"] if verb else []):
        path = os.path.join(state_dir(), name)
        if os.path.exists(path):
            with open(path + ".waiting", "w") as f:
                f.write(str(os.getpid()))
            while os.path.exists(path):
                time.sleep(0.05)
    names = [f"fail-{command}"] + ([f"fail-{command}-{verb}"] if verb else [])
    for name in names:
        path = os.path.join(state_dir(), name)
        if os.path.exists(path):
            with open(path) as f:
                message = f.read()
            sys.stderr.write(message if message.endswith("\n") or not message else message + "\n")
            sys.exit(1)


def does_nothing(command, argv):
    """True when $FAKE_STATE_DIR/noop-<command>[-<verb>] exists: the stand-in then exits 0
    having changed nothing (a modprobe that "succeeds" in a container, the module never
    showing up), after recording the call."""
    verb = next((a for a in argv if not a.startswith("-")), None)
    names = [f"noop-{command}"] + ([f"noop-{command}-{verb}"] if verb else [])
    return any(os.path.exists(os.path.join(state_dir(), name)) for name in names)


def begin(command, argv, secret_flags=()):
    """What every stand-in does first: record the call (secret values redacted, so that the
    record is not a second leak), then honour a fault file."""
    record_call(command, redact(argv, secret_flags))
    check_fault(command, argv)
