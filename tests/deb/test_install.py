"""The built .deb installed for real, in a throwaway root of each Debian release it serves
(12 and 13; never on this machine): preseed, install, reinstall, remove, purge, with dpkg and
debconf inside the root; and the upgrade from a package that shipped its unit in
/lib/systemd/system, as 0.1.0 did, to this one's /usr/lib/systemd/system.

The roots come from mmdebstrap (Debian's archive), with the package's dependencies already
in them, cached as tarballs in build/deb-cache (tests/deb/roots.py), so a run after the first
one needs no network. In a chroot there is no systemd to join from: the postinst marks the
join pending for the agent, which is what it must do in an image build. The full apt
lifecycle in a booted container is the e2e suite's.

Runs under `make test-deb` (AKS_FLEX_NODE_DEB_TESTS=all); skipped otherwise, as it takes a
minute (a few more the first time, to build the roots).
"""

import os
import shutil
import subprocess

import pytest

from tests.deb import debtools
from tests.deb.roots import SUITES, Chroot, base_tarball

SECRET = "chroot-s3cr3t"
CLUSTER = ("/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/aks-rg"
           "/providers/Microsoft.ContainerService/managedClusters/aks-edge")
PRESEED = f"""\
aks-flex-node aks-flex-node/join boolean true
aks-flex-node aks-flex-node/tenant_id string 72f988bf-86f1-41af-91ab-2d7cd011db47
aks-flex-node aks-flex-node/cluster_resource_id string {CLUSTER}
aks-flex-node aks-flex-node/auth_method select service-principal
aks-flex-node aks-flex-node/sp_client_id string 2f4a1d38-5c7b-4e29-9a63-0d8e7b1c5f92
aks-flex-node aks-flex-node/sp_client_secret password {SECRET}
aks-flex-node aks-flex-node/machine_name string edge-chroot
"""
UNIT = "aks-flex-node-agent.service"
WANTS = f"/etc/systemd/system/multi-user.target.wants/{UNIT}"

pytestmark = pytest.mark.skipif(os.environ.get("AKS_FLEX_NODE_DEB_TESTS") != "all",
                                reason="installs in throwaway Debian roots: run `make test-deb`")


@pytest.fixture(params=SUITES)
def chroot(request, built_deb, tmp_path):
    root = Chroot.unpack(base_tarball(request.param), tmp_path / "root", request.param)
    shutil.copy(built_deb.deb, root.file("/tmp/aks-flex-node.deb"))
    yield root
    root.remove()


# Debian 13 only, once, when the package that shipped its unit in /lib/systemd/system (0.1.0)
# is replaced: no other package names that directory in dpkg's database any more (all moved
# their units to /usr), so dpkg tries to remove it, and it is /usr/lib/systemd/system, which
# holds our unit and systemd's: not empty, so it stays, and dpkg says so. Never on a purge
# of this package, which names no directory under /lib.
LIB_DIRECTORY_KEPT = {f"dpkg: warning: unable to delete old directory '{d}': Directory not empty"
                      for d in ("/lib/systemd/system", "/lib/systemd")}


def dpkg_warnings(result):
    """dpkg's warnings in a run's output (e.g. "unable to delete old directory ...: not empty")."""
    return [line for line in (result.stdout + result.stderr).splitlines() if "dpkg: warning" in line]


def test_install_reinstall_remove_purge(chroot):
    # ---- preseed and install ----------------------------------------------------------------
    result = chroot.run("debconf-set-selections", input=PRESEED)
    assert result.returncode == 0, result.stderr
    result = chroot.run("dpkg", "-i", "/tmp/aks-flex-node.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    installed = chroot.run("dpkg-query", "-W", "-f=${Status}", "aks-flex-node").stdout
    assert installed == "install ok installed"
    # No systemd to join from: pending, for the agent, said plainly.
    assert "not joining now" in result.stderr and "pending" in result.stderr
    assert chroot.file("/var/lib/aks-flex-node/join-pending").exists()
    # The configuration holds the answers, 0600; the secret is in its own 0600 file only.
    conf = chroot.file("/etc/aks-flex-node/aks-flex-node.conf").read_text()
    assert f"cluster_resource_id = {CLUSTER}" in conf and "machine_name = edge-chroot" in conf
    assert chroot.mode("/etc/aks-flex-node/aks-flex-node.conf") == 0o600
    assert chroot.holding(SECRET) == ["/etc/aks-flex-node/sp-client-secret"]
    assert chroot.mode("/etc/aks-flex-node/sp-client-secret") == 0o600
    # ucf knows the file; the agent is enabled (not started: there is no systemd here).
    assert "/etc/aks-flex-node/aks-flex-node.conf" in chroot.file("/var/lib/ucf/registry").read_text()
    assert chroot.file(WANTS).is_symlink()
    # The unit is in its canonical place, owned there only (no aliased /lib path in dpkg's
    # database: DEP 17), and systemd, reading the root offline, has it enabled.
    assert chroot.run("dpkg-query", "-S", f"/usr/lib/systemd/system/{UNIT}").returncode == 0
    assert chroot.run("dpkg-query", "-S", f"/lib/systemd/system/{UNIT}").returncode != 0
    enabled = chroot.run("systemctl", "is-enabled", UNIT)
    assert enabled.stdout.strip() == "enabled", enabled.stdout + enabled.stderr
    # The installed CLI runs on Debian's python3 and modules, and accepts the configuration.
    version = chroot.run("aks-flex-node", "version")
    assert version.returncode == 0 and version.stdout.startswith("aks-flex-node "), version.stderr
    valid = chroot.run("aks-flex-node", "config", "validate")
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert chroot.file("/usr/share/man/man8/aks-flex-node.8.gz").exists()

    # The autopkgtest smoke test, run in the installed root as autopkgtest would.
    shutil.copy(debtools.DEBIAN / "tests" / "smoke", chroot.file("/tmp/smoke"))
    chroot.file("/tmp/smoke-tmp").mkdir()
    smoke = chroot.run("/tmp/smoke", env={"AUTOPKGTEST_TMP": "/tmp/smoke-tmp"})
    assert smoke.returncode == 0 and "smoke: ok" in smoke.stdout, smoke.stdout + smoke.stderr

    # ---- a hand edit, then the same version again (dpkg's upgrade path) -----------------------
    conf_path = chroot.file("/etc/aks-flex-node/aks-flex-node.conf")
    conf_path.write_text(conf_path.read_text().replace("max_pods = 110", "max_pods = 42"))
    result = chroot.run("dpkg", "-i", "/tmp/aks-flex-node.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "max_pods = 42" in conf_path.read_text()
    assert chroot.holding(SECRET) == ["/etc/aks-flex-node/sp-client-secret"]

    # ---- remove: the pending join is cancelled, the configuration kept ------------------------
    result = chroot.run("dpkg", "-r", "aks-flex-node")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not chroot.file("/var/lib/aks-flex-node/join-pending").exists()
    assert conf_path.exists()

    # ---- purge: nothing left, no debconf answer, no ucf record ----------------------------------
    result = chroot.run("dpkg", "-P", "aks-flex-node")
    assert result.returncode == 0, result.stdout + result.stderr
    # Nothing left behind, not even a directory dpkg could not remove (on 13, a package that
    # shipped /lib/systemd/system got "unable to delete old directory: not empty").
    assert dpkg_warnings(result) == []
    assert chroot.find("aks-flex-node") == ["/tmp/aks-flex-node.deb", "/tmp/smoke-tmp/aks-flex-node.conf"]
    assert chroot.find("aks_flex_node") == []
    assert "aks-flex-node" not in chroot.file("/var/lib/ucf/registry").read_text()
    assert "aks-flex-node" not in chroot.file("/var/lib/ucf/hashfile").read_text()
    shown = chroot.run("debconf-show", "aks-flex-node")
    assert shown.stdout.strip() == ""
    for db in ("config.dat", "passwords.dat"):
        assert "aks-flex-node/" not in chroot.file(f"/var/cache/debconf/{db}").read_text()


def repacked_with_unit_in_lib(deb, out, version):
    """The .deb as 0.1.0 shipped it: the unit in /lib/systemd/system (aliased, since the /usr
    merge), as version `version`; the rest, maintainer scripts included, unchanged."""
    tree = out / "tree"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    (tree / "lib/systemd").mkdir(parents=True)
    (tree / "usr/lib/systemd/system").rename(tree / "lib/systemd/system")
    (tree / "usr/lib/systemd").rmdir()
    md5sums = tree / "DEBIAN/md5sums"
    md5sums.write_text(md5sums.read_text().replace("  usr/lib/systemd/", "  lib/systemd/"))
    control = tree / "DEBIAN/control"
    control.write_text("".join(f"Version: {version}\n" if line.startswith("Version:") else line + "\n"
                               for line in control.read_text().splitlines()))
    old = out / "aks-flex-node-old.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(tree), str(old)], check=True,
                   capture_output=True)
    return old


def test_upgrade_from_the_unit_in_lib_keeps_the_agent_enabled(chroot, built_deb, tmp_path):
    # DEP 17: dpkg sees /lib/systemd/system/X and /usr/lib/systemd/system/X as two files,
    # one file on disk. Unpacking the new package writes X, then dpkg removes the old path
    # the new package no longer has: X itself, unless dpkg notices that it just unpacked it
    # (it does, for a move within one package: DEP 17's file loss, P1, needs a second package,
    # and P3 a diversion; we have neither). This proves the unit survives and stays enabled.
    version = built_deb.field("Version")
    old = repacked_with_unit_in_lib(built_deb.deb, tmp_path, f"{version}~unit-in-lib")
    shutil.copy(old, chroot.file("/tmp/aks-flex-node-old.deb"))
    result = chroot.run("dpkg", "-i", "/tmp/aks-flex-node-old.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert chroot.run("dpkg-query", "-S", f"/lib/systemd/system/{UNIT}").returncode == 0
    assert chroot.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    link_before = os.readlink(chroot.file(WANTS))

    result = chroot.run("dpkg", "-i", "/tmp/aks-flex-node.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(dpkg_warnings(result)) <= LIB_DIRECTORY_KEPT, result.stdout + result.stderr
    assert chroot.run("dpkg-query", "-W", "-f=${Version}", "aks-flex-node").stdout == version
    # The file is there, with its content, owned by its canonical path only.
    unit = chroot.file(f"/usr/lib/systemd/system/{UNIT}")
    assert unit.read_bytes() == (debtools.REPO / "lib/systemd/system" / UNIT).read_bytes()
    assert chroot.run("dpkg-query", "-S", f"/usr/lib/systemd/system/{UNIT}").returncode == 0
    assert chroot.run("dpkg-query", "-S", f"/lib/systemd/system/{UNIT}").returncode != 0
    verify = chroot.run("dpkg", "--verify", "aks-flex-node")
    assert verify.returncode == 0 and verify.stdout == "", verify.stdout + verify.stderr
    # /lib is still the merged-/usr symlink: dpkg did not remove what it held for the old path.
    assert chroot.file("/lib").is_symlink()
    # Still enabled, for systemd and for deb-systemd-helper (whose state decides whether a
    # later upgrade re-enables it), and the wants link leads to the unit.
    assert chroot.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    helper = {"DPKG_MAINTSCRIPT_PACKAGE": "aks-flex-node"}  # it refuses to run outside dpkg otherwise
    for query in ("is-enabled", "was-enabled"):
        assert chroot.run("deb-systemd-helper", query, UNIT, env=helper).returncode == 0, query
    target = os.readlink(chroot.file(WANTS))
    assert chroot.file(target).resolve() == unit.resolve(), (link_before, target)

    # Going back (docs/apt-repository.md) is the same move the other way round, and so is
    # coming forward again.
    result = chroot.run("dpkg", "-i", "/tmp/aks-flex-node-old.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [w for w in dpkg_warnings(result) if "downgrading" not in w] == []
    assert chroot.file(f"/lib/systemd/system/{UNIT}").is_file()
    assert chroot.run("dpkg-query", "-S", f"/lib/systemd/system/{UNIT}").returncode == 0
    assert chroot.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    result = chroot.run("dpkg", "-i", "/tmp/aks-flex-node.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(dpkg_warnings(result)) <= LIB_DIRECTORY_KEPT, result.stdout + result.stderr
    assert unit.is_file() and chroot.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"

    # And a purge leaves nothing of ours, with no warning.
    result = chroot.run("dpkg", "-P", "aks-flex-node")
    assert result.returncode == 0 and dpkg_warnings(result) == [], result.stdout + result.stderr
    assert not chroot.file(WANTS).is_symlink()
    assert chroot.find("aks-flex-node-agent") == []
