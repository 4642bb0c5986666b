"""Fixtures of the Debian package tests: the .deb built once per session, tool checks.

These tests drive Debian tools (dpkg-buildpackage, lintian, debconf, ucf, mmdebstrap). When
one is missing the test is skipped with what to run; under `make test-deb`, which installs
them first and sets AKS_FLEX_NODE_DEB_TESTS, a missing tool is a failure instead.
"""

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deb import debtools
from tests.deb import sandbox as sb_mod

BUILD_TOOLS = ("dpkg-buildpackage", "dh", "dh_python3", "debconf-updatepo", "fakeroot")


def require_tools(*tools):
    missing = [t for t in tools if not shutil.which(t, path=debtools.SYSPATH)]
    if not missing:
        return
    message = (f"missing {', '.join(missing)}: `make test-deb` installs the Debian packaging tools "
               "and runs these tests")
    if os.environ.get("AKS_FLEX_NODE_DEB_TESTS"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def sandbox(tmp_path):
    """A throwaway root and private debconf database the maintainer scripts run against
    (tests/deb/sandbox.py)."""
    require_tools("debconf-set-selections", "debconf-communicate", "po2debconf", "ucf", "ucfr")
    return sb_mod.Sandbox(tmp_path)


@pytest.fixture(scope="session")
def built_deb(tmp_path_factory):
    """The package built from this work tree, once per run: a debtools.Built. Under
    pytest-xdist the workers share one build (the first builds it, the others wait on the
    lock) in the directory above their own temp dirs, which belongs to this run only."""
    require_tools(*BUILD_TOOLS)
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out = shared / "deb-build"
    with open(shared / "deb-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "deb-build.done").exists():
            result = subprocess.run([str(debtools.REPO / "tools" / "build-deb.sh"), str(out)],
                                    capture_output=True, text=True, timeout=600,
                                    env=debtools.system_env())
            if result.returncode != 0:
                pytest.fail(f"the package does not build:\n{result.stdout}\n{result.stderr}")
            (shared / "deb-build.done").touch()
    return debtools.Built(out)


@pytest.fixture(scope="session")
def unpacked_deb(built_deb, tmp_path_factory):
    """The .deb's files (dpkg-deb -x) and control area (dpkg-deb -e) in a temp dir."""
    root = tmp_path_factory.mktemp("deb-unpacked")
    subprocess.run(["dpkg-deb", "-x", str(built_deb.deb), str(root / "data")], check=True)
    subprocess.run(["dpkg-deb", "-e", str(built_deb.deb), str(root / "control")], check=True)
    return root


@pytest.fixture
def repo():
    return Path(debtools.REPO)
