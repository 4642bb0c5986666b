"""What is at a path before we take it over, seen without following it, kept, and put back
exactly (issue 26).

A path we manage may hold anything an operator (or an attacker with a foothold) put there:
a regular file, a symlink (to a file elsewhere, to /dev/zero), a FIFO, a device, a
directory. `look` says which from lstat(2) alone: nothing is opened, so no FIFO is waited
on and no device is read. `keep` copies a regular original into our backup with the one
careful open (O_NOFOLLOW, O_NONBLOCK, regular file judged on the descriptor) and streams it,
so its size costs no memory; a symlink or FIFO needs no copy: its link text or its mode is
all there is to it, and the ledger records that. `put_back` makes the same thing again
under a temp name and renames it over the path (rename(2) replaces any non-directory
atomically), owner included: lchown(2) on a link, never chown through it.

These functions take real paths (the Host has added its root).
"""

import dataclasses
import errno
import os
import stat

from aks_flex_node.host import fs, observed, temps

# The kinds `look` tells apart, in the words the ledger and messages use.
FILE, LINK, FIFO, DIR, SOCKET, DEVICE = "file", "link", "fifo", "dir", "socket", "device"
_KINDS = ((stat.S_ISREG, FILE), (stat.S_ISLNK, LINK), (stat.S_ISFIFO, FIFO), (stat.S_ISDIR, DIR),
          (stat.S_ISSOCK, SOCKET), (stat.S_ISCHR, DEVICE), (stat.S_ISBLK, DEVICE))
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Found:
    """What lstat(2) saw at a path: `kind` (FILE, LINK, FIFO, DIR, SOCKET, DEVICE), its
    permission bits, owner, size, and for a link its text (never resolved)."""

    kind: str
    mode: int
    uid: int
    gid: int
    size: int
    link: str = None


def look(path):
    """Found for what is at `path` (a link not followed), or None when nothing is."""
    observed.looked(path)  # the drift probe's record (observed.py)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    kind = next(name for test, name in _KINDS if test(st.st_mode))
    link = None
    if kind == LINK:
        try:
            link = os.readlink(path)
        except OSError as err:  # swapped for something else since the lstat: look again
            if err.errno == errno.EINVAL:  # no longer a link
                return look(path)
            raise fs.HostFileError(f"cannot read the link {path}: {err.strerror}") from err
    return Found(kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_size, link)


def keep(path, backup):
    """Copy the regular file at `path` to `backup` (0600, atomically), streamed, never
    through a link nor from a FIFO or device swapped in since the caller looked: those
    raise HostFileError (code "not-a-regular-file")."""
    try:
        src = os.open(path, _OPEN)
    except OSError as err:
        raise fs.HostFileError(f"cannot back up {path}: {err.strerror} (it is no longer a regular file)",
                               code="not-a-regular-file") from err
    try:
        if not stat.S_ISREG(os.fstat(src).st_mode):
            raise fs.HostFileError(f"cannot back up {path}: it is no longer a regular file",
                                   code="not-a-regular-file")
        fs.make_parents(os.path.dirname(backup))
        fd, tmp = fs.open_temp(backup)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in iter(lambda: os.read(src, _CHUNK), b""):
                    out.write(chunk)
                os.fchmod(out.fileno(), 0o600)
                os.fsync(out.fileno())
            os.replace(tmp, backup)
        except BaseException as err:
            _unlink(tmp)
            if isinstance(err, OSError):
                raise fs.HostFileError(f"cannot back up {path} to {backup}: {err.strerror}") from err
            raise
    finally:
        os.close(src)
    fs.sync_dir(os.path.dirname(backup), backup)


def put_back(path, kind, *, mode=None, owner=None, link=None):
    """Make `path` a symlink with the text `link` (kind LINK; an absolute text is kept as it
    was, it is only restored, never followed) or an empty FIFO with `mode` (kind FIFO),
    owned by `owner` (uid, gid) when given, replacing what is there (not a directory)."""
    found = look(path)
    if found is not None and found.kind == DIR:
        raise fs.HostFileError(f"cannot restore {path}: a directory is there now", code="is-a-directory")
    directory = os.path.dirname(path)
    fs.make_parents(directory)
    temps.remove_stale_temps(path)
    tmp = os.path.join(directory, f"{temps.writer_prefix(path)}{os.urandom(4).hex()}{temps.SUFFIX}")
    try:
        if kind == LINK:
            os.symlink(link, tmp)
            if owner is not None:
                os.lchown(tmp, *owner)
        elif kind == FIFO:
            os.mkfifo(tmp, 0o600)
            if owner is not None:
                os.chown(tmp, *owner, follow_symlinks=False)  # before chmod: chown clears set-id bits
            os.chmod(tmp, mode if mode is not None else 0o644)  # a FIFO we just made: nothing to follow
        else:
            raise ValueError(f"kind = {kind!r}: expected {LINK!r} or {FIFO!r}")
        os.replace(tmp, path)
    except OSError as err:
        _unlink(tmp)
        raise fs.HostFileError(f"cannot restore {path}: {err.strerror}") from err
    fs.sync_dir(directory, path)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
