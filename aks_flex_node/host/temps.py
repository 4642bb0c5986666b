"""The names of our temp files, and how the ones a killed writer left are told from the rest.

An atomic write (fs.write_file, fs.write_symlink, staging.StagedFile) goes through a temp
file beside its target named `.<name>.<pid>.<random>.tmp`. A writer killed mid-write (kill
-9, a power cut: its `finally` never ran) leaves that temp for good, and a directory that
holds one cannot be removed. The pid in the name is what lets a later run take the temp of
a dead writer and leave a live writer's, and someone else's file, alone. The rule lives in
this one module so that the names made and the names swept cannot drift apart; it touches
nothing but the temps themselves, so fs.py builds on it.
"""

import logging
import os
import re
import stat

log = logging.getLogger(__name__)

SUFFIX = ".tmp"


def _prefix(path):
    # Short enough for NAME_MAX whatever the target's name is.
    return "." + os.path.basename(path)[:64] + "."


def writer_prefix(path):
    """What the name of a temp file this process writes for `path` starts with; a random
    part and SUFFIX follow."""
    return f"{_prefix(path)}{os.getpid()}."


def pid_alive(pid):
    """Whether process `pid` exists (kill(2) with signal 0): a leftover named after a dead
    writer is stale."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, and is someone else's
    return True


def stale_temps(path, writer=None):
    """The temp files a writer of `path` killed mid-write left next to it (kill -9, a power
    cut: its `finally` never ran): `.<name>.<pid>.<random>.tmp` whose pid is gone. A
    writer that is still alive keeps its temp file; one without a pid in its name (written
    by someone else) is never taken for ours. `writer`: the pid of a run the caller knows
    is over (the ledger's record of it, under the run lock), whose temps go whether or not
    the pid has been taken by another process since."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    pattern = re.compile(re.escape(_prefix(path)) + r"(\d+)\.[A-Za-z0-9_]+" + re.escape(SUFFIX))
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    stale = []
    for name in names:
        match = pattern.fullmatch(name)
        pid = int(match.group(1)) if match else None
        if match and (pid == writer if writer is not None else not pid_alive(pid)):
            candidate = os.path.join(directory, name)
            try:
                st = os.lstat(candidate)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone meanwhile
            # A regular file (write_file's) or a link (write_symlink's), never a directory.
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                stale.append(candidate)
    return sorted(stale)


def remove_stale_temps(path, writer=None):
    """Remove stale_temps(path, writer); returns what was removed. A failure is logged, not
    raised: the leftover is the old run's, and the write at hand does not depend on it."""
    removed = []
    for temp in stale_temps(path, writer):
        try:
            os.unlink(temp)
            removed.append(temp)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("cannot remove %s, a temp file a killed run left: %s", temp, e)
    if removed:
        log.info("removed %s, left by a killed run", ", ".join(removed))
    return removed
