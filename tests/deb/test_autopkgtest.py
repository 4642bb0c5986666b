"""The package's autopkgtest (debian/tests), run by autopkgtest itself in a throwaway
testbed of each release the .deb serves (bookworm, trixie): autopkgtest-virt-unshare unpacks
the base tarball tests/deb/roots.py caches (build/deb-cache) into a new user and mount
namespace. Never on this machine: there is no `null` backend here.

The command is the one `make autopkgtest` runs, per SUITE:

    autopkgtest -U -o OUT aks-flex-node_<version>_all.deb SRC/ -- \\
        unshare --release SUITE --tarball build/deb-cache/SUITE-apt-<key>.tar

-U because the tarball has no apt lists and no apt-utils (autopkgtest needs apt-ftparchive
to publish the .deb in the testbed): apt-get update, the release's updates and apt-utils
come from Debian's archive. The tests reach nothing but loopback.

Runs under `make test-deb` (AKS_FLEX_NODE_DEB_TESTS=all), which installs autopkgtest and
uidmap and gives root subordinate ids (make autopkgtest-deps); skipped otherwise.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deb import debtools
from tests.deb.conftest import require_tools
from tests.deb.roots import SUITES, base_tarball

# debian/tests/control, in its order; preseed-validation is breaks-testbed, which the
# unshare backend can run (it reverts the whole testbed).
TESTS = ("smoke", "preseed-validation")
# autopkgtest(1): 0 all passed, 2 some skipped, 4 some failed, 8 none ran, 12 erroneous
# package, 16 testbed failure, 20 other.
TIMEOUT = 900

pytestmark = pytest.mark.skipif(os.environ.get("AKS_FLEX_NODE_DEB_TESTS") != "all",
                                reason="runs autopkgtest in Debian testbeds: run `make test-deb`")


def subordinate_ids_missing():
    """The files that have no line for the calling user (autopkgtest-virt-unshare needs both)."""
    import pwd

    user = pwd.getpwuid(os.getuid()).pw_name
    missing = []
    for path in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            lines = []
        if not any(line.split(":")[0] in (user, str(os.getuid())) for line in lines):
            missing.append(path)
    return user, missing


def source_tree(dest):
    """A copy of the work tree (tracked and unignored files; debian/ alone outside git),
    marked as built (debian/files): the .deb is given, so autopkgtest builds nothing and
    does not install dpkg-dev in the testbed."""
    dest.mkdir(parents=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=debtools.REPO, capture_output=True, env=debtools.system_env())
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            source = debtools.REPO / name
            if source.is_file() or source.is_symlink():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / name, follow_symlinks=False)
    else:
        shutil.copytree(debtools.DEBIAN, dest / "debian", symlinks=True)
    (dest / "debian" / "files").write_text("")
    return dest


@pytest.mark.parametrize("suite", SUITES)
def test_autopkgtest_in_unshare_testbed(built_deb, suite, tmp_path):
    require_tools("autopkgtest", "autopkgtest-virt-unshare", "unshare", "newuidmap")
    user, missing = subordinate_ids_missing()
    if missing:
        pytest.fail(f"no line for {user} in {', '.join(missing)}: autopkgtest-virt-unshare maps the "
                    "testbed's users there (`make autopkgtest-deps` adds root:200000:65536)")
    tarball = base_tarball(suite)
    src = source_tree(tmp_path / "src" / debtools.PACKAGE)
    out = tmp_path / "out"
    command = ["autopkgtest", "-U", "-o", str(out), str(built_deb.deb), f"{src}/",
               "--", "unshare", "--release", suite, "--tarball", str(tarball)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                                env=debtools.system_env(TMPDIR=str(tmp_path)))
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"autopkgtest did not finish within {TIMEOUT} s:\n{(expired.stdout or '')[-4000:]}")
    log = (out / "log").read_text(errors="replace") if (out / "log").exists() else result.stdout
    summary = (out / "summary").read_text() if (out / "summary").exists() else ""
    results = dict(line.split(None, 1) for line in summary.splitlines() if line.strip())
    where = f"\n$ {' '.join(command)}\n--- summary:\n{summary}\n--- end of the log:\n{log[-6000:]}\n{result.stderr[-2000:]}"
    assert result.returncode == 0, f"autopkgtest exited {result.returncode}{where}"
    assert {name: results.get(name, "").split()[0:1] for name in TESTS} == \
        {name: ["PASS"] for name in TESTS}, where
    assert "smoke: ok" in log and "preseed-validation: ok" in log, where
