"""The one careful read of a file we, as root, must not be fooled by: a secret, a key, a
file an operator names, our own private state.

- never through a symlink at the last component (O_NOFOLLOW): a link swapped in would make
  us read, and then send or trust, whatever it points at;
- never waiting on a FIFO (O_NONBLOCK) nor adopting a terminal (O_NOCTTY), and only a
  regular file, judged on the descriptor we read (fstat), so a swap after any earlier
  look changes nothing;
- optionally owned by root or by us, and private (no group or other permission bits);
- never more than `max_bytes` read, whatever the file's size says.

Stdlib only: the token plugin and HIMDS client (light paths the kubelet runs) use it; a
read that succeeds loads nothing beyond os and stat (cached_token.py counts on it).
Callers turn an Unsafe into their own error, naming the field or file it came from.
"""

import os
import stat

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unsafe(Exception):
    """Why a file cannot be read as asked (`why`, in the operator's words), with `remedy`
    when there is one, the errno when the system said no (`errno`, else None) and `code`,
    a stable name for the case (absent, symlink, cannot-open, not-regular, loose-mode,
    foreign-owner, too-large) that is never reworded."""

    def __init__(self, why, remedy=None, err=None, *, code):
        super().__init__(why)
        self.why, self.remedy, self.errno, self.code = why, remedy, err, code


def kind_of(mode):
    """What a file that is not a regular one is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def read(path, max_bytes, *, private=False, owners=None, follow=False):
    """The bytes of the regular file `path` (at most `max_bytes`), or Unsafe saying why not.
    `private`: no group or other permission bits. `owners`: the uids it may belong to (None:
    any; `root_or_us()` for root's files). `follow`: a public file (a CA bundle) may be a
    link to one, as update-ca-certificates makes them in /etc/ssl/certs; never a secret."""
    with open_file(path, max_bytes, private=private, owners=owners, follow=follow) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # grown since the fstat
        raise Unsafe(f"expected at most {max_bytes} bytes", code="too-large")
    return data


def open_file(path, max_bytes, *, private=False, owners=None, follow=False):
    """The regular file `path`, open for reading (a binary file object) once read()'s checks
    passed on its descriptor, for a caller that streams it (a local mirror's archive, too
    large to hold in memory); Unsafe saying why not. The caller reads at most `max_bytes`:
    the size checked here is the one fstat saw."""
    try:
        fd = os.open(path, _FLAGS if follow else _FLAGS | os.O_NOFOLLOW)
    except FileNotFoundError as err:
        raise Unsafe("the file does not exist", err=err.errno, code="absent") from None
    except OSError as err:
        import errno  # only once opening failed: `token`'s cached answer loads no more than json, os, time

        if err.errno == errno.ELOOP:
            raise Unsafe("is a symlink: expected a regular file", err=err.errno, code="symlink") from None
        if err.errno == errno.ENXIO:  # what opening a socket (or a device without a driver) answers
            raise Unsafe("expected a regular file (it is a socket or a device)", err=err.errno,
                         code="not-regular") from None
        raise Unsafe(f"cannot open it ({err.strerror})", err=err.errno, code="cannot-open") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # (a directory's descriptor cannot even be a file object)
        os.close(fd)
        raise Unsafe(f"expected a regular file (it is {kind_of(info.st_mode)})", code="not-regular")
    handle = os.fdopen(fd, "rb")
    try:
        mode = stat.S_IMODE(info.st_mode)
        if private and mode & 0o077:
            raise Unsafe(f"has mode {mode:04o}: expected 0600 or 0400 (readable by its owner only)",
                         remedy=f"chmod 600 {path}", code="loose-mode")
        if owners is not None and info.st_uid not in owners:
            raise Unsafe(f"is owned by uid {info.st_uid}: expected root", remedy=f"chown root:root {path}",
                         code="foreign-owner")
        if info.st_size > max_bytes:
            raise Unsafe(f"is {info.st_size} bytes: expected at most {max_bytes} bytes", code="too-large")
    except BaseException:
        handle.close()
        raise
    return handle


def root_or_us():
    """Root's files: owned by root, or by whoever runs us (a test as its own user)."""
    return (0, os.geteuid())
