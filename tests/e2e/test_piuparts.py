"""piuparts: install/purge of the package, and the upgrade from the previous version held
in the local repository, then purge; no file left, no error from any maintainer script.

piuparts builds its chroot from the release's cached tree (-d bookworm on bookworm's, -d
trixie on trixie's: the same .deb, built on this host; -e, through an overlay so the cache
is never written) with the repository's key added as an operator adds it; its only
APT source is the local repository (-m file://..., bound into the chroot), so it never
reaches Debian's archive: every dependency is in the base tree already. docs/testing.md
shows the same command by hand.
"""

import shutil

import pytest

from tests.e2e import container as ct
from tests.e2e.repository import Repo

pytestmark = pytest.mark.e2e


def test_piuparts_install_purge_and_upgrade_from_the_repository(release, base_root, debs, newer_deb, tmp_path):
    if not shutil.which("piuparts", path=ct.SYSPATH):
        pytest.fail("piuparts is missing: `make e2e` installs it")
    # The previous version, in a repository whose suite is the distribution piuparts tests.
    repo = Repo(tmp_path / "repo", tmp_path / "key")
    repo.publish(debs.flex, suite=release)
    merged = ct.mount_overlay(base_root, tmp_path / "chroot")
    try:
        shutil.copy(repo.keyring, merged / "etc/apt/trusted.gpg.d/aks-flex-node.gpg")
        log = tmp_path / "piuparts.log"
        proc = ct._run(["piuparts", "--no-adequate", "--no-eatmydata", "-d", release,
                        "-m", f"file://{repo.path}", "--bindmount", str(repo.path), "-e", str(merged),
                        "-l", str(log), str(newer_deb.deb)], timeout=1200, check=False)
    finally:
        ct._run(["umount", str(merged)], check=False)
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, text[-6000:]
    assert "PASS: Installation and purging test." in text
    # The upgrade test ran: the repository's version first, then the new .deb.
    assert "PASS: Installation, upgrade and purging tests." in text, text[-4000:]
    assert f"aks-flex-node_{newer_deb.new_version}_all.deb" in text
    assert "PASS: All tests." in text
