"""Files on the node: compare first, then change only what differs, atomically.

These functions take real paths (the Host has already added its root). The writer follows
ubuntu-pro-client's system.write_file: a temp file in the same directory (created 0600 with
O_EXCL, so a secret is never readable by others even for an instant), mode and owner set
before the rename, the file and its directory fsynced, the temp file removed on failure.
The temp file's name carries the writer's pid, so the temp a killed writer left (its
`finally` never ran) is recognised and removed by the next write or removal of that file
(temps.py holds that rule). A tree is removed only by tree.py, never by this module.
Content, mode and owner are compared each on its own, as pyinfra's files.put does, so a
mode drift is repaired with a chmod and the content is left alone.
"""

import errno
import hashlib
import logging
import os
import stat
import tempfile

from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import observed, temps

log = logging.getLogger(__name__)

DIR_MODE = 0o755
_CHUNK = 1 << 20


class HostFileError(FlexNodeError):
    """A file operation on the node failed; the message names the path and the reason."""

    code = "host-file"


def _fail(action, path, err):
    reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    return HostFileError(f"cannot {action} {path}: {reason}")


def check_mode(mode):
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise ValueError(f"mode = {mode!r}: expected permission bits as an int, e.g. 0o644")
    return mode


def _lstat(path):
    observed.looked(path)  # the drift probe's record, while a pass records (observed.py)
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


# O_NONBLOCK: a FIFO planted at a path we read is never waited on (open(2) of a FIFO for
# reading blocks until a writer comes); an fstat then refuses it (issue 26).
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def file_sha256(path):
    """Hex sha256 of a regular file's content, read in chunks; None when nothing is there or
    it is no regular file (a FIFO is never waited on, a device never read: either differs
    from any content we compare it with, so the caller replaces it; issue 26)."""
    return file_digest(path, "sha256")


def file_digest(path, algorithm):
    """file_sha256 with another hashlib algorithm (sha512: the Kubernetes CHANGELOG's)."""
    digest = hashlib.new(algorithm)
    try:
        fd = os.open(path, _READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket, or a device without a driver
            return None
        raise _fail("read", path, e) from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                digest.update(chunk)
    except OSError as e:
        raise _fail("read", path, e) from e
    return digest.hexdigest()


def exists(path):
    """True when something (even a dangling symlink) is at path."""
    return _lstat(path) is not None


def read_bytes(path):
    """The content of the regular file at `path` (a link to one is followed), or None when
    nothing is there. A FIFO, socket or device (a link to /dev/zero) is refused with
    HostFileError code "not-a-regular-file", never waited on nor read without end."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ENXIO:  # what opening a socket (or a device without a driver) answers
            raise HostFileError(f"cannot read {path}: it is a socket or a device, expected a regular file",
                                code="not-a-regular-file") from e
        raise _fail("read", path, e) from e
    mode = os.fstat(fd).st_mode  # judged on what we opened: a swap after a look changes nothing
    if not stat.S_ISREG(mode):
        os.close(fd)  # (a directory's descriptor cannot even be a file object)
        if stat.S_ISDIR(mode):
            raise _fail("read", path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
        raise HostFileError(f"cannot read {path}: it is {_kind_of(mode)}, expected a regular file",
                            code="not-a-regular-file")
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read()
        except OSError as e:
            raise _fail("read", path, e) from e


def _kind_of(mode):
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_parents(directory):
    """Create `directory` and its missing ancestors, each exactly 0755 whatever the umask;
    returns the directories created, outermost first."""
    missing = []
    current = os.fspath(directory)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    created = []
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(d):
                raise HostFileError(f"cannot create directory {d}: a file is in the way", code="file-in-the-way")
            continue  # another thread made it meanwhile
        except OSError as e:
            raise _fail("create directory", d, e) from e
        os.chmod(d, DIR_MODE)
        created.append(d)
    if created:
        log.debug("created directories %s", ", ".join(created))
    return created


def open_temp(path):
    """(fd, name) of a new empty file (0600, O_EXCL) next to `path`, to be renamed over it:
    `.<name>.<pid>.<random>.tmp`, the pid letting a later run tell a dead writer's leftover
    from a live one's (temps.stale_temps). A stale temp of `path` is removed first."""
    temps.remove_stale_temps(path)
    try:
        return tempfile.mkstemp(prefix=temps.writer_prefix(path), suffix=temps.SUFFIX,
                                dir=os.path.dirname(path))
    except OSError as e:  # a full or read-only filesystem, a directory we may not write
        raise _fail("write", path, e) from e


def sync_dir(directory, path):
    """fsync `directory` after a rename of `path` in it (what makes the rename durable)."""
    try:
        _fsync_dir(directory)
    except OSError as e:  # the file is in place; only its rename's durability is in doubt
        raise _fail("sync the directory of", path, e) from e


def _replace_atomically(path, content, mode, owner):
    path = os.fspath(path)
    directory = os.path.dirname(path)
    make_parents(directory)
    fd, tmp = open_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            if owner is not None:
                os.fchown(f.fileno(), *owner)  # before fchmod: chown clears set-id bits
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):
            raise _fail("write", path, e) from e
        raise
    sync_dir(directory, path)


def write_file(path, content, mode=0o644, owner=None):
    """Make `path` hold `content` with `mode` (and `owner`, a (uid, gid) pair, when given).

    Returns what changed: "created", "content", "mode", "owner", "mode+owner", or None when
    the file was already right. Without `owner`, an existing file keeps its owner.
    A symlink at `path` is replaced by a regular file (the link is never written through).
    """
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise TypeError(f"content for {path} is a {type(content).__name__}: expected bytes")
    content = bytes(content)
    check_mode(mode)
    if owner is not None:
        owner = (int(owner[0]), int(owner[1]))

    st = _lstat(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise HostFileError(f"cannot write {path}: it is a directory, expected a file", code="is-a-directory")

    if st is not None and stat.S_ISREG(st.st_mode):
        if file_sha256(path) == hashlib.sha256(content).hexdigest():
            changed = []
            try:
                if owner is not None and (st.st_uid, st.st_gid) != owner:
                    os.chown(path, *owner)
                    changed.append("owner")
                # Compare the mode after a chown, which may have cleared set-id bits.
                if stat.S_IMODE(os.lstat(path).st_mode) != mode:
                    os.chmod(path, mode)
                    changed.insert(0, "mode")
            except OSError as e:
                raise _fail("change mode or owner of", path, e) from e
            return "+".join(changed) or None
        if owner is None:
            owner = (st.st_uid, st.st_gid)

    _replace_atomically(path, content, mode, owner)
    return "created" if st is None else "content"


def read_link(path):
    """Where the symlink at `path` points (its text, never resolved); None when no symlink is there."""
    observed.looked(path)
    try:
        return os.readlink(path)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EINVAL):  # EINVAL: not a symlink
            return None
        raise _fail("read the link", path, e) from e


def write_symlink(path, target):
    """Make `path` a symlink to `target` (relative, so it means the same under any root).

    Returns "created", "target" (another link or a file was replaced) or None when the link
    already points there. The new link is made under a temp name and renamed over `path`
    (rename(2) replaces atomically): a process that opens `path` meanwhile gets the old or
    the new target, never nothing. This is the one switch between two installed versions.
    A directory at `path` is refused, as write_file refuses one.
    """
    path = os.fspath(path)
    if os.path.isabs(target) or not target:
        raise ValueError(f"target = {target!r}: expected a relative path")
    st = _lstat(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise HostFileError(f"cannot link {path}: it is a directory, expected a file or a link",
                            code="is-a-directory")
    if st is not None and stat.S_ISLNK(st.st_mode) and os.readlink(path) == target:
        return None
    directory = os.path.dirname(path)
    make_parents(directory)
    temps.remove_stale_temps(path)
    tmp = os.path.join(directory, f"{temps.writer_prefix(path)}{os.urandom(4).hex()}{temps.SUFFIX}")
    try:
        os.symlink(target, tmp)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise _fail("link", path, e) from e
    sync_dir(directory, path)
    return "created" if st is None else "target"


def ensure_dir(path, mode=DIR_MODE):
    """Make `path` a directory with exactly `mode`: "created", "mode" or None.

    A symlink to a directory is accepted as it is (its target's mode is not ours to change).
    """
    check_mode(mode)
    st = _lstat(path)
    if st is None:
        make_parents(os.path.dirname(os.fspath(path)))
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            return ensure_dir(path, mode)  # made meanwhile by someone else
        except OSError as e:
            raise _fail("create directory", path, e) from e
        os.chmod(path, mode)  # mkdir's mode is masked by the umask
        return "created"
    if stat.S_ISLNK(st.st_mode) and os.path.isdir(path):
        return None
    if not stat.S_ISDIR(st.st_mode):
        raise HostFileError(f"cannot create directory {path}: a file is in the way", code="file-in-the-way")
    if stat.S_IMODE(st.st_mode) != mode:
        try:
            os.chmod(path, mode)
        except OSError as e:
            raise _fail("change mode of", path, e) from e
        return "mode"
    return None


def remove(path):
    """Remove a file, a symlink (never what it points to) or an empty directory.

    Returns False when nothing was there. A directory with content is refused, so no
    caller can recurse into a configured path by accident: a tree goes only through
    tree.remove_tree, which never crosses a mount point.
    """
    st = _lstat(path)
    if st is None or not stat.S_ISDIR(st.st_mode):
        temps.remove_stale_temps(path)  # a killed writer's temp goes with the file it was writing
    if st is None:
        return False
    try:
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):  # rmdir(2) allows either
            raise HostFileError(f"{path} is a directory with content: not removed",
                                code="directory-not-empty") from e
        raise _fail("remove", path, e) from e
    return True
