"""Removing a directory tree: the one recursive delete on the node, careful at every step.

fs.remove refuses a directory with content, so that no caller recurses into a configured
path by accident; what must go as a tree (the run directory, a kubelet directory that
unbootstrap removes) comes here. The walk opens each directory without following a link
and removes through file descriptors, so a directory swapped for a link meanwhile cannot
lead it elsewhere, and it never enters another mount: a volume mounted below after the
caller read the mount table (Host.remove_tree unmounts what it knows of first) is left and
reported, not emptied. Nothing here raises for what stays: the leftovers are the answer,
as kubeadm reset lists what it could not clean.
"""

import errno
import os
import posixpath

from aks_flex_node.host import fs

# Opening a directory to walk it: never through a symlink (O_NOFOLLOW), and a file or a
# link fails with ENOTDIR/ELOOP before anything is opened (so a fifo never blocks).
_WALK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Deeper than any tree we create; an odd deeper one is left and reported rather than
# running out of file descriptors or Python stack.
MAX_TREE_DEPTH = 128


def remove_tree(path, shown=None):
    """Remove `path` and everything below it without leaving its mount; returns leftovers.

    Nothing is followed: symlinks are unlinked, and directories are opened with O_NOFOLLOW
    and emptied through their file descriptors (unlink and rmdir with dir_fd), so a
    directory swapped for a link meanwhile cannot lead the walk elsewhere. A directory on
    another mount than `path` (a volume mounted after the caller read the mount table) is
    not entered: it is left and reported, and so, not being empty, are its ancestors.
    `shown` names `path` in the messages (the node path). [] means `path` is gone.
    """
    path = os.fspath(path)
    shown = shown or path
    parent, name = os.path.split(path.rstrip("/"))
    if not name:
        raise ValueError(f"path = {path!r}: refusing to remove the root")
    try:
        parent_fd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise fs._fail("open", parent, e) from e
    leftovers = []
    try:
        _remove_entry(parent_fd, name, shown, None, 0, leftovers)
    finally:
        os.close(parent_fd)
    return leftovers


def _mount_of(fd):
    """(st_dev, mount ID) of an open file. The mount ID (from /proc/self/fdinfo, see
    proc_pid_fdinfo(5)) tells a bind mount of the same filesystem, whose st_dev is the
    same; without /proc only st_dev is compared."""
    mount_id = None
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for line in f:
                if line.startswith(b"mnt_id:"):
                    mount_id = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return os.fstat(fd).st_dev, mount_id


def _unlink(dir_fd, name, shown, leftovers):
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as e:  # EBUSY: a file with something mounted on it
        leftovers.append(str(fs._fail("remove", shown, e)))
        return False
    return True


def _remove_entry(dir_fd, name, shown, mount, depth, leftovers):
    """Remove entry `name` of the open directory `dir_fd` (and its content when it is a
    directory on `mount`, None for the top); False, with a leftover, when it stays."""
    try:
        fd = os.open(name, _WALK_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):  # a file or a symlink
            return _unlink(dir_fd, name, shown, leftovers)
        leftovers.append(str(fs._fail("open", shown, e)))
        return False
    try:
        here = _mount_of(fd)
        if mount is not None and here != mount:
            leftovers.append(f"{shown} is on another mount: not entered, not removed")
            return False
        if depth >= MAX_TREE_DEPTH:
            leftovers.append(f"{shown} is more than {MAX_TREE_DEPTH} levels deep: not removed")
            return False
        try:
            with os.scandir(fd) as entries:
                names = [entry.name for entry in entries]
        except OSError as e:
            leftovers.append(str(fs._fail("read directory", shown, e)))
            return False
        emptied = True
        for child in names:
            emptied &= _remove_entry(fd, child, posixpath.join(shown, child), here, depth + 1,
                                     leftovers)
    finally:
        os.close(fd)
    if not emptied:
        return False  # what stays inside has been reported
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as e:  # EBUSY: a mount point
        leftovers.append(str(fs._fail("remove", shown, e)))
        return False
    return True
