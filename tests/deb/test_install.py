"""The built .deb installed for real, in a throwaway Debian 12 root (never on this machine):
preseed, install, reinstall, remove, purge, with dpkg and debconf inside the root.

The root comes from mmdebstrap (Debian's archive), with the package's dependencies already
in it, and is cached as a tarball in build/deb-cache (git-ignored; AKS_FLEX_NODE_DEB_CACHE
moves it), so a run after the first one needs no network. In a chroot there is no systemd
to join from: the postinst marks the join pending for the agent, which is what it must do
in an image build. The full apt lifecycle in a booted container is the e2e suite's.

Runs under `make test-deb` (AKS_FLEX_NODE_DEB_TESTS=all); skipped otherwise, as it takes a
minute (two more the first time, to build the base).
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

SUITE = "bookworm"
# What the package depends on (so dpkg -i needs no network), and the tools the test uses.
BASE_PACKAGES = ("python3-azure", "python3-configobj", "python3-yaml", "python3-debian", "python3-debconf", "ucf",
                 "debconf-utils")
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

pytestmark = pytest.mark.skipif(os.environ.get("AKS_FLEX_NODE_DEB_TESTS") != "all",
                                reason="installs in a throwaway bookworm root: run `make test-deb`")


def cache_dir():
    return Path(os.environ.get("AKS_FLEX_NODE_DEB_CACHE") or debtools.REPO / "build" / "deb-cache")


def base_tarball():
    """The cached base root (built once with mmdebstrap, named after what it holds)."""
    key = hashlib.sha256(" ".join((SUITE,) + BASE_PACKAGES).encode()).hexdigest()[:12]
    tarball = cache_dir() / f"{SUITE}-apt-{key}.tar"
    if tarball.exists():
        return tarball
    require_tools("mmdebstrap")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    # The install test and autopkgtest may ask at once (`make test-deb` runs workers): one
    # builds, the other waits for it.
    with open(tarball.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tarball.exists():
            return tarball
        partial = tarball.with_suffix(".partial.tar")
        result = subprocess.run(["mmdebstrap", "--variant=apt", f"--include={','.join(BASE_PACKAGES)}",
                                 SUITE, str(partial)], capture_output=True, text=True, timeout=1200,
                                env=debtools.system_env())
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            pytest.fail(f"mmdebstrap could not build the {SUITE} base:\n{result.stderr[-3000:]}")
        partial.rename(tarball)
    return tarball


class Chroot:
    def __init__(self, path):
        self.path = Path(path)

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


@pytest.fixture(scope="module")
def chroot(built_deb, tmp_path_factory):
    require_tools("chroot", "tar")
    tarball = base_tarball()
    path = tmp_path_factory.mktemp("bookworm") / "root"
    path.mkdir()
    subprocess.run(["tar", "-xf", str(tarball), "-C", str(path)], check=True, timeout=600)
    shutil.copy(built_deb.deb, path / "tmp" / "aks-flex-node.deb")
    yield Chroot(path)
    shutil.rmtree(path, ignore_errors=True)


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
    assert chroot.file("/etc/systemd/system/multi-user.target.wants/aks-flex-node-agent.service").is_symlink()
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
    assert chroot.find("aks-flex-node") == ["/tmp/aks-flex-node.deb", "/tmp/smoke-tmp/aks-flex-node.conf"]
    assert chroot.find("aks_flex_node") == []
    assert "aks-flex-node" not in chroot.file("/var/lib/ucf/registry").read_text()
    assert "aks-flex-node" not in chroot.file("/var/lib/ucf/hashfile").read_text()
    shown = chroot.run("debconf-show", "aks-flex-node")
    assert shown.stdout.strip() == ""
    for db in ("config.dat", "passwords.dat"):
        assert "aks-flex-node/" not in chroot.file(f"/var/cache/debconf/{db}").read_text()
