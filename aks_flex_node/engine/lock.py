"""One run at a time: an flock on /var/lib/aks-flex-node/lock that names its holder."""

import fcntl
import json
import os
import sys
import time

from aks_flex_node import paths
from aks_flex_node.errors import LockHeldError


class RunLock:
    def __init__(self, host, command, wait=0.0):
        self._host = host
        self._command = command
        self._wait = wait
        self._fd = None

    def __enter__(self):
        self._host.ensure_dir(paths.STATE_DIR, 0o700)
        path = self._host.path(paths.LOCK)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self._wait
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
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        holder = {"pid": os.getpid(), "command": self._command, "since": time.time(),
                  "argv": sys.argv[1:2]}
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        return False


def _read_holder(fd):
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode() or "{}")
    except (OSError, ValueError):
        return "an unknown process"
    if not info:
        return "an unknown process"
    return f"pid {info.get('pid')} running `aks-flex-node {info.get('command')}`"
