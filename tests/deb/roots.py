"""Throwaway Debian roots for the package tests: one per release the .deb serves, made with
mmdebstrap from Debian's archive and cached as tarballs in build/deb-cache (git-ignored;
AKS_FLEX_NODE_DEB_CACHE moves it), so a run after the first needs no network.

- base_tarball(suite): the package's dependencies, the tools the tests use and systemd
  (whose `systemctl is-enabled` reads the enablement offline, as a booted node would see
  it); test_install.py installs the .deb in it, test_autopkgtest.py uses it as the testbed.
- lintian_tarball(suite): that release's lintian, for the releases whose lintian is not this
  machine's (test_build.py).
"""

import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.deb import debtools
from tests.deb.conftest import require_tools

# The releases the .deb is installed and checked on, oldest first: Debian 12 and 13.
SUITES = ("bookworm", "trixie")
# What the package depends on (so dpkg -i needs no network), and the tools the tests use.
BASE_PACKAGES = ("python3-azure", "python3-configobj", "python3-yaml", "python3-debian", "python3-debconf", "ucf",
                 "debconf-utils", "systemd")
LINTIAN_PACKAGES = ("lintian",)
# The lintian this machine runs (make deb-deps installs Debian 12's): its suite needs no root.
HOST_SUITE = "bookworm"


def cache_dir():
    return Path(os.environ.get("AKS_FLEX_NODE_DEB_CACHE") or debtools.REPO / "build" / "deb-cache")


def _tarball(suite, packages, kind):
    """The cached root holding packages (built once with mmdebstrap, named after what it holds)."""
    key = hashlib.sha256(" ".join((suite,) + tuple(packages)).encode()).hexdigest()[:12]
    tarball = cache_dir() / f"{suite}-{kind}-{key}.tar"
    if tarball.exists():
        return tarball
    require_tools("mmdebstrap")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    # Several tests may ask at once (`make test-deb` runs workers): one builds, the rest wait.
    with open(tarball.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tarball.exists():
            return tarball
        partial = tarball.with_suffix(".partial.tar")
        result = subprocess.run(["mmdebstrap", "--variant=apt", f"--include={','.join(packages)}",
                                 suite, str(partial)], capture_output=True, text=True, timeout=1200,
                                env=debtools.system_env())
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            pytest.fail(f"mmdebstrap could not build the {suite} root ({kind}):\n{result.stderr[-3000:]}")
        partial.rename(tarball)
    return tarball


def base_tarball(suite=HOST_SUITE):
    return _tarball(suite, BASE_PACKAGES, "apt")


def lintian_tarball(suite):
    return _tarball(suite, LINTIAN_PACKAGES, "lintian")


class Chroot:
    """A root unpacked from a tarball, and commands run in it with chroot(8)."""

    def __init__(self, path, suite):
        self.path = Path(path)
        self.suite = suite

    @classmethod
    def unpack(cls, tarball, path, suite):
        require_tools("chroot", "tar")
        path = Path(path)
        path.mkdir(parents=True)
        subprocess.run(["tar", "-xf", str(tarball), "-C", str(path)], check=True, timeout=600)
        return cls(path, suite)

    def remove(self):
        shutil.rmtree(self.path, ignore_errors=True)

    def run(self, *argv, input=None, env=None, timeout=300):
        full_env = {"PATH": debtools.SYSPATH, "LC_ALL": "C.UTF-8", "HOME": "/root",
                    "DEBIAN_FRONTEND": "noninteractive", **(env or {})}
        return subprocess.run(["chroot", str(self.path), *argv], input=input, text=True,
                              capture_output=True, env=full_env, timeout=timeout)

    def file(self, node_path):
        return self.path / node_path.lstrip("/")

    def mode(self, node_path):
        return stat.S_IMODE(os.stat(self.file(node_path)).st_mode)

    def find(self, needle):
        """Paths (node paths) whose name contains needle, like `find / -name '*needle*'`."""
        found = []
        for dirpath, dirs, names in os.walk(self.path):
            for name in dirs + names:
                if needle in name:
                    found.append("/" + os.path.relpath(os.path.join(dirpath, name), self.path))
        return sorted(found)

    def holding(self, text):
        """Files holding text, where anything of ours can write (not the read-only /usr)."""
        found = []
        for top in ("etc", "var", "root", "tmp", "run", "srv", "opt"):
            for dirpath, _dirs, names in os.walk(self.path / top):
                for name in names:
                    path = os.path.join(dirpath, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        with open(path, "rb") as f:
                            if text.encode() in f.read():
                                found.append("/" + os.path.relpath(path, self.path))
        return sorted(found)
