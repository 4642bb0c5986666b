"""The descriptor of the run lock's file, opened so that nothing at its path is followed,
waited on or truncated but a regular file (issue 26, defect 3).

The lock is taken as root in a directory an operator can reach, so what is at its path is
not to be trusted: a symlink there would have us truncate and overwrite its target (any
file on the node, and under --root one outside the root), a FIFO would have us write a
holder record into a pipe. So: O_NOFOLLOW (open(2): a link at the last component fails
with ELOOP), O_NONBLOCK (a FIFO or device is never waited on) and the file judged on the
descriptor we hold (fstat), so a swap between a look and the open changes nothing. What is
not a regular file is refused with the path, what it is, and what to do; it is never
removed, as it is not ours to remove. (lock_file.py is the token cache's lock: private and
owned by us, refused without an errno; this one keeps the OSError of a full or read-only
disk for the run's StateWriteError, which says what to do about it.)
"""

import errno
import os
import stat

from aks_flex_node.host import careful_read, fs

_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class LockFileError(fs.HostFileError):
    """Something other than a regular file is at the lock's path."""

    code = "lock-not-a-file"


def _refuse(path, shown, what):
    return LockFileError(
        f"{shown} is {what}, not the lock file aks-flex-node keeps there; it is left as it is",
        remedy=f"move it aside (mv {path} {path}.bad) and run again: aks-flex-node makes the lock file itself")


def open_lock(path, shown, writable=True):
    """A descriptor of the regular file `path` (real path; `shown`: its node path, for
    messages), made 0600 when missing. LockFileError when something else is there; an
    OSError (a full or read-only disk, EISDIR) passes to the caller, who names it."""
    flags = _FLAGS | os.O_CREAT | (os.O_RDWR if writable else os.O_RDONLY)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _refuse(path, shown, f"a symlink (to {_link_text(path)})") from None
        if err.errno == errno.ENXIO:  # a socket, or a device without a driver
            raise _refuse(path, shown, "a socket or a device") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _refuse(path, shown, careful_read.kind_of(info.st_mode))
    return fd


def _link_text(path):
    try:
        return repr(os.readlink(path))
    except OSError:
        return "somewhere"
