"""One run at a time: an flock on /var/lib/aks-flex-node/lock that names its holder.

The kernel drops an flock when its holder's last descriptor closes, kill -9 included
(flock(2)), so "can the lock be taken?" is the one reliable test of whether a run is still
going: `status` asks it through `probe` (engine/status.py), never by the pid in the file
(a pid is reused, and means nothing in another pid namespace).
"""

import contextlib
import errno
import fcntl
import json
import os
import sys
import time

from aks_flex_node import paths
from aks_flex_node.errors import FlexNodeError, LockHeldError, StateWriteError

# `probe` holds the lock for the time of one status read. A run starting in that instant
# must not be refused for it, so even a run that does not wait tries for this long.
PROBE_GRACE = 0.5
_RETRY = 0.05


def _remedy(err_no, path):
    where = os.path.dirname(path)
    if err_no == errno.EISDIR:
        # A directory where a state file of ours belongs (a hand mkdir, a bad restore): it
        # is not ours to delete, and nothing of ours works until it is gone.
        return f"a directory is where this file belongs: move it aside (mv {path} {path}.bad), then run again"
    if err_no in (errno.ENOSPC, errno.EDQUOT):
        return f"free space on the file system holding {where} (df -h {where}), then run again"
    if err_no == errno.EROFS:
        return f"the file system holding {where} is read-only: remount it read-write, then run again"
    if err_no in (errno.EACCES, errno.EPERM):
        return "run it as root"
    return f"check the file system holding {where} (dmesg), then run again"


def state_write_error(path, err):
    """StateWriteError for a failed write of `path`, naming the file, the reason and what
    to do. `err` is the OSError."""
    return StateWriteError(f"cannot write {path}: {err.strerror or err}",
                           remedy=_remedy(err.errno, str(path)))


@contextlib.contextmanager
def writing_state(path):
    """Writes of the run's own state at `path` (a real path) inside this block fail with a
    StateWriteError naming the file: an OSError, or the host's HostFileError caused by one
    (it names the file already; this adds what to do). Other errors pass unchanged."""
    try:
        yield
    except OSError as err:
        raise state_write_error(path, err) from err
    except FlexNodeError as err:
        if not isinstance(err.__cause__, OSError) or err.remedy:
            raise
        raise StateWriteError(err.message, remedy=_remedy(err.__cause__.errno, str(path))) from err


class RunLock:
    def __init__(self, host, command, wait=0.0):
        self._host = host
        self._command = command
        self._wait = wait
        self._fd = None

    def __enter__(self):
        path = self._host.path(paths.LOCK)
        with writing_state(path):
            self._host.ensure_dir(paths.STATE_DIR, 0o700)
            # Through the host door: no link followed (a link here would have us truncate
            # its target, outside the root too), no FIFO waited on, a regular file or a
            # refusal naming what is there (host/run_lock_file.py, issue 26).
            fd = self._host.open_lock(paths.LOCK)
        deadline = time.monotonic() + max(self._wait, PROBE_GRACE)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    os.close(fd)
                    raise LockHeldError(
                        f"another aks-flex-node run holds {paths.LOCK}: {holder}",
                        remedy="wait for it to finish (see `aks-flex-node status`), or pass "
                        "--wait-lock SECONDS to wait for it",
                    )
                time.sleep(_RETRY)
        holder = {"pid": os.getpid(), "command": self._command, "since": time.time(),
                  "argv": sys.argv[1:2]}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)
        except OSError as err:
            # A run that cannot write a few bytes here cannot record what it does either
            # (status.json, the ledger): stop before changing anything.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise state_write_error(path, err) from err
        self._fd = fd
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        return False


@contextlib.contextmanager
def probe(host):
    """Whether a run holds the lock, for readers of status.json: yields True when none
    does (we then hold it ourselves until the block ends, so no run can start or finish
    while the caller reads), False when a run holds it, None when we cannot tell (no access
    to the state directory). Changes nothing a run reads: the holder's record stays."""
    try:
        # Created when missing: a lock file that is not there is free, and must stay ours
        # while we look. Something other than a regular file there: we cannot tell.
        fd = host.open_lock(paths.LOCK, writable=False)
    except (OSError, FlexNodeError):
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # drops the flock, if we took it


def _read_holder(fd):
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode() or "{}")
    except (OSError, ValueError):
        return "an unknown process"
    if not info:
        return "an unknown process"
    return f"pid {info.get('pid')} running `aks-flex-node {info.get('command')}`"
