"""Who may change the files the configuration is read from: sshd's StrictModes for us.

The configuration names commands run as root (`azcmagent`, `exec_plugin_command`) and
the credentials aks-flex-node signs in with, so a file anyone could rewrite is a way to
root. As sshd does before it reads a user's files (sshd_config(5) StrictModes; OpenSSH
misc.c safe_path()), a file is refused unless it and every directory on its path are
owned by root, or by the user running the command, and are not writable by group or
others.

Where we differ from sshd, and why:
- A group- or world-writable directory with the sticky bit (/tmp) is accepted: there
  unlink(2) and rename(2) of an entry are refused to whoever owns neither the entry nor
  the directory, so another user cannot replace what root owns below it; and that entry
  is checked in turn.
- Both the path as written and the path with its symlinks resolved are checked: a link
  in a writable directory could be swapped, and the target's own directories matter too.
- Under a root prefix (an image being built, a test) only what is inside the root is
  checked: the prefix and the directories above it belong to whoever builds the image.

Each problem names the file or directory and the exact chmod or chown that fixes it.
"""

import os
import stat

from aks_flex_node.errors import ConfigProblem
from aks_flex_node.host import observed

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def problems(key, shown, real, root="/", private=False):
    """The problems of file `real` (a path on this filesystem, `shown` in messages as the
    value of `key`) and of the directories above it; [] when it is safe or absent (the
    callers report a missing file in their own words). `private`: readable by its owner
    only too (a secret or a private key)."""
    observed.looked(real, owner_only=True)  # what the agent's drift probe watches (host/observed.py)
    try:
        st = os.stat(real)
    except OSError:
        return []
    found = []
    real = os.path.abspath(os.fspath(real))
    if not _trusted_owner(st):
        found.append(ConfigProblem(key, shown, f"a file owned by root (its owner is uid {st.st_uid}): "
                                               f"chown root: {real}"))
    mode = stat.S_IMODE(st.st_mode)
    if private and mode & 0o077:
        found.append(ConfigProblem(key, shown, f"a file only its owner can read (mode 0600, not {mode:04o}): "
                                               f"chmod 600 {real}"))
    elif mode & _OTHERS_WRITE:
        found.append(ConfigProblem(key, shown, f"a file only its owner can write (mode {mode:04o} lets "
                                               f"{_who(mode)} change it): chmod go-w {real}"))
    return found + directory_problems(key, shown, os.path.dirname(real), root, _below=real)


def directory_problems(key, shown, real_dir, root="/", _below=None):
    """The problems of directory `real_dir` and those above it, inside the root: where a
    file is, or is about to be written."""
    real_dir = os.path.abspath(os.fspath(real_dir))
    found = []
    for directory in _directories(_below or os.path.join(real_dir, "child"), root):
        observed.looked(directory, owner_only=True)
        try:
            st = os.stat(directory)
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if not _trusted_owner(st):
            found.append(ConfigProblem(key, shown, f"a file in directories owned by root ({directory} is owned "
                                                   f"by uid {st.st_uid}): chown root: {directory}"))
        if mode & _OTHERS_WRITE and not mode & stat.S_ISVTX:
            found.append(ConfigProblem(key, shown, f"a file in directories only root can write to "
                                                   f"({directory} has mode {mode:04o}, so {_who(mode)} can "
                                                   f"replace what is in it): chmod go-w {directory}"))
    return found


def _trusted_owner(st):
    return st.st_uid in (0, os.geteuid())


def _who(mode):
    return " and ".join(w for w, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit)


def _directories(real, root):
    """The directories above `real`, as written and with symlinks resolved, inside the
    root (the root itself when it is /), nearest first, each once."""
    top = os.path.abspath(os.fspath(root or "/"))
    tops = {top, os.path.realpath(top)}
    seen = []
    for path in (real, os.path.realpath(real)):
        inside = [t for t in tops if t == "/" or path.startswith(t.rstrip("/") + "/")]
        if not inside:
            continue
        stop = max(inside, key=len)
        current = os.path.dirname(path)
        while True:
            if current == stop and stop != "/":
                break
            if current not in seen:
                seen.append(current)
            if current == stop or current == os.path.dirname(current):
                break
            current = os.path.dirname(current)
    return seen
