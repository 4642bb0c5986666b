"""`make repo`'s repository, seen by apt inside a bookworm node: signed, several versions."""

import pytest

from tests.e2e.node import KEYRING, REPO_MOUNT, SOURCES

pytestmark = pytest.mark.e2e


def test_apt_accepts_the_signature_and_sees_both_packages(node, debs):
    # node added the repository (its keyring and a deb822 stanza with Signed-By) and ran
    # apt-get update: no warning about the signature, the packages are candidates.
    update = node.apt_get("update")
    assert "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr
    assert "W:" not in update.stderr, update.stderr
    policy = node.c.run(["apt-cache", "policy", "aks-flex-node", "azcmagent"]).stdout
    assert f"Candidate: {debs.version()}" in policy
    assert f"file:{REPO_MOUNT} stable/main" in policy
    assert f"Candidate: {debs.version(debs.arc)}" in policy
    stanza = node.c.read(SOURCES).decode()
    assert f"Signed-By: {KEYRING}" in stanza and "Suites: stable" in stanza


def test_apt_refuses_the_repository_without_its_key(node):
    # A node that never had the key: no keyring, no lists fetched with it.
    node.c.run(["sh", "-c", f"rm {KEYRING} && rm -rf /var/lib/apt/lists/*"])
    update = node.apt_get("update", check=False)
    assert update.returncode != 0 or "NO_PUBKEY" in update.stderr
    assert "NO_PUBKEY" in update.stderr or "not signed" in update.stderr, update.stderr
    policy = node.c.run(["apt-cache", "policy", "aks-flex-node"]).stdout
    assert "Candidate: (none)" in policy or policy.strip() == ""


def test_the_repository_keeps_every_version_published(boot_node, fresh_repo, newer_deb):
    node = boot_node(fresh_repo)
    madison = node.c.run(["apt-cache", "madison", "aks-flex-node"]).stdout
    assert newer_deb.old_version in madison and newer_deb.new_version not in madison
    # Publishing the newer version into the same repository keeps the older one.
    fresh_repo.publish(newer_deb.deb)
    node.apt_get("update")
    madison = node.c.run(["apt-cache", "madison", "aks-flex-node"]).stdout
    assert newer_deb.old_version in madison and newer_deb.new_version in madison, madison
    policy = node.c.run(["apt-cache", "policy", "aks-flex-node"]).stdout
    assert f"Candidate: {newer_deb.new_version}" in policy
