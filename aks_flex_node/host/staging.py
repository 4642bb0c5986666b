"""A file written in full beside its destination before it replaces it.

An install that unpacks an archive while it downloads (steps/artifacts.py) cannot write
its files in place: the archive is only known good once its last byte has matched the
sha256. So each file is staged: written under a temp name in its destination's directory
(the same file system, so the rename is atomic), hashed as it is written, fsynced, and
renamed over the destination by commit, or removed by discard. Until commit, nothing a
reader of the destination can see has changed.

The temp name is the one host/fs.py's writer uses (`.<name>.<pid>.<random>.tmp`, the rule
of host/temps.py), so the leftover of a run killed while staging is known for what it is:
temps.stale_temps finds it, by its dead pid or by the pid the ledger recorded for the run
that staged it.

The commit keeps what host/fs.py's write_file keeps: a destination that already holds the
same bytes with the same mode is left alone (no new inode, no change to report), and a file
replaced keeps its owner.
"""

import hashlib
import os
import stat

from aks_flex_node.host import fs

_CHUNK = 1 << 20


class StagedFile:
    """`real` (the real path of the destination) staged."""

    def __init__(self, real):
        self.real = os.fspath(real)
        fd, self.temp = fs.open_temp(self.real)
        self._file = os.fdopen(fd, "wb")
        self._digest = hashlib.sha256()
        self.size = 0
        self.sha256 = None
        self.mode = None

    def write(self, data):
        try:
            self._file.write(data)
        except OSError as e:  # ENOSPC: the message names the file, not its temp
            raise fs._fail("write", self.real, e) from e
        self._digest.update(data)
        self.size += len(data)

    def copy_from(self, source):
        """Write what `source` (a binary file object) reads, to its end."""
        while True:
            chunk = source.read(_CHUNK)
            if not chunk:
                return
            self.write(chunk)

    def finish(self, mode):
        """Flush, set `mode`, fsync and close: the staged file is whole and durable."""
        fs.check_mode(mode)
        try:
            self._file.flush()
            os.fchmod(self._file.fileno(), mode)
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as e:
            raise fs._fail("write", self.real, e) from e
        self.sha256, self.mode = self._digest.hexdigest(), mode

    def commit(self):
        """Rename the staged file over its destination: "created", "content", or None when
        the destination already held these bytes with this mode (the staged copy goes)."""
        if self.sha256 is None:
            raise RuntimeError(f"{self.real}: commit before finish")
        try:
            st = os.lstat(self.real)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise fs._fail("write", self.real, e) from e
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise fs.HostFileError(f"cannot write {self.real}: it is a directory, expected a file",
                                    code="is-a-directory")
        regular = st is not None and stat.S_ISREG(st.st_mode)
        if regular and st.st_size == self.size and stat.S_IMODE(st.st_mode) == self.mode \
                and fs.file_sha256(self.real) == self.sha256:
            self.discard()
            return None
        try:
            if regular and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.chown(self.temp, st.st_uid, st.st_gid)
                os.chmod(self.temp, self.mode)  # chown clears set-id bits
            os.replace(self.temp, self.real)
        except OSError as e:
            raise fs._fail("write", self.real, e) from e
        self.temp = None
        fs.sync_dir(os.path.dirname(self.real), self.real)
        return "created" if st is None else "content"

    def discard(self):
        """Remove the staged file (the destination is untouched); a no-op once committed."""
        if not self._file.closed:
            try:
                self._file.close()
            except OSError:  # what it still buffered could not be written: it goes anyway
                pass
        if self.temp is not None:
            try:
                os.unlink(self.temp)
            except FileNotFoundError:
                pass
            self.temp = None
