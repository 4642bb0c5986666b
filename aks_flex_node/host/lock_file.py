"""A private lock file we flock (the token cache's single flight), opened the careful way:

- never through a symlink at the last component (O_NOFOLLOW): a link planted there would
  make us create or lock whatever it points at, outside the root too;
- never waiting on a FIFO (O_NONBLOCK) nor adopting a terminal (O_NOCTTY); a regular file,
  judged on the descriptor (fstat), owned by us and private (0600), or refused;
- never truncated or written: the lock is the flock, not the file's content.

The kernel drops an flock when its holder's last descriptor closes, kill -9 included
(flock(2)), so a holder that dies never leaves the lock taken. Stdlib only: the token
plugin (a light path the kubelet runs) uses it.
"""

import errno
import fcntl
import os
import stat
import time

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
POLL = 0.05  # seconds between two tries of a taken lock


class Unsafe(Exception):
    """Why the lock file cannot be used (`why`), with a stable `code`: symlink, cannot-open,
    not-regular, foreign-owner, loose-mode."""

    def __init__(self, why, *, code):
        super().__init__(why)
        self.why, self.code = why, code


def open_private(path, mode=0o600):
    """A descriptor of the lock file `path`, created `mode` (0600) when absent; Unsafe when
    it is a link, not a regular file, not ours, or readable by others."""
    try:
        fd = os.open(path, _FLAGS, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise Unsafe(f"{path} is a symlink: expected a regular file", code="symlink") from None
        raise Unsafe(f"cannot open {path} ({err.strerror})", code="cannot-open") from None
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = Unsafe(f"{path}: expected a regular file", code="not-regular")
    elif info.st_uid != os.geteuid():
        problem = Unsafe(f"{path} belongs to uid {info.st_uid}: expected ours ({os.geteuid()})", code="foreign-owner")
    elif info.st_mode & 0o077:
        problem = Unsafe(f"{path} has mode {stat.S_IMODE(info.st_mode):04o}: expected 0600", code="loose-mode")
    if problem is not None:
        os.close(fd)
        raise problem
    return fd


def hold(fd, wait, clock=time.monotonic, pause=time.sleep):
    """Take the exclusive flock on `fd`, waiting up to `wait` seconds for its holder: True
    once held, False when it was still taken at the end (the caller goes on without it)."""
    deadline = clock() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if clock() >= deadline:
                return False
            pause(POLL)


def release(fd):
    """Drop the lock and the descriptor."""
    os.close(fd)  # closing the last descriptor drops the flock (flock(2))
