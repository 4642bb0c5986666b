"""Fixtures of the end-to-end tests (marker e2e; `make e2e` runs them, `make test` never).

  release     the Debian release a scenario's nodes run: every scenario that boots a node
              runs once per release of $AKS_FLEX_NODE_E2E_RELEASES (default: bookworm and
              trixie, container.RELEASES), as test_x[bookworm] and test_x[trixie]; a
              scenario marked @pytest.mark.releases("bookworm") runs on those only
  base        the cached root of that release (container.BaseRoot), built on first use;
  base_root   its tree
  debs        the .debs under test: aks-flex-node and the Arc agent stand-in (built here,
              or taken from AKS_FLEX_NODE_E2E_DEB_DIRS, which `make e2e` sets)
  repo        a signed APT repository of them, with its own throwaway key (tools/publish-repo.sh)
  mirror      the artifact mirror (tests/e2e/mirror.py): Debian's containerd/runc/CNI, the
              emulator's stand-in kubelet
  containerd2_mirror  the same with Debian forky's containerd 2.x (tests/e2e/containerd2.py),
              for the GPU scenario only
  booted      a fresh container for one test (container.Container), torn down after it
  node        `booted` prepared as a machine about to install the package (node.Node)
  private_registry  Debian's docker-registry on loopback with TLS from a throwaway CA
              (tests/e2e/registry.py), for a test's own images

The emulator is the shared session one (tests/emulator_fixtures.py); `fresh_emulator`
resets its world for each test.
"""

import os
import pathlib
import shutil
import subprocess
import urllib.parse
import uuid

import pytest

from aks_flex_node.azure import himds
from tests.e2e import container as ct
from tests.e2e import containerd2
from tests.e2e import registry as r
from tests.e2e.mirror import Mirror
from tests.e2e.node import DIGESTS, REPO_MOUNT, UPSTREAM_KEYS_MOUNT, Node
from tests.e2e.repository import Repo

TOOLS = ("mmdebstrap", "systemd-nspawn", "nsenter", "aptly", "gpg", "dpkg-buildpackage", "equivs-build", "piuparts", "mount")
RUN_BASE = ct.CACHE / "run"
HIMDS_PORT = urllib.parse.urlsplit(himds.DEFAULT_ENDPOINT).port  # the Arc agent's: 40342


@pytest.fixture(scope="session")
def e2e_host():
    """Root and the tools, or a failure that says what to run."""
    if os.geteuid() != 0:
        pytest.fail("the e2e tests mount and boot containers: run them as root (make e2e)")
    missing = [t for t in TOOLS if not shutil.which(t, path=ct.SYSPATH)]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: `make e2e` installs them from Debian and runs these tests")
    # A node on the host's network (`make demo`'s, and test_demo's) has its himdsd on the
    # host's 127.0.0.1:40342: one a `make demo` left would answer in test_demo's place.
    if ct.port_in_use(HIMDS_PORT):
        pytest.fail(f"127.0.0.1:{HIMDS_PORT} (HIMDS) is taken on this host: is a `make demo` node still "
                    f"running? `make demo-clean` ends it")
    RUN_BASE.mkdir(parents=True, exist_ok=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "releases(*names): the Debian releases a scenario runs on "
                                       "(default: all of $AKS_FLEX_NODE_E2E_RELEASES)")


def pytest_generate_tests(metafunc):
    """Every test that needs a node's release (through base, base_root, node...) runs once
    per selected release; a `releases` marker narrows that to the releases it names."""
    if "release" not in metafunc.fixturenames:
        return
    selected = ct.selected_releases()
    marker = metafunc.definition.get_closest_marker("releases")
    if marker:
        for name in marker.args:
            ct.check_release(name)
        selected = [name for name in selected if name in marker.args]
    # None of its releases is selected: one skipped case says so (an empty parametrize would too,
    # less clearly).
    if not selected:
        why = f"runs on {', '.join(marker.args)} only; {ct.RELEASES_ENV} selects {', '.join(ct.selected_releases())}"
        selected = [pytest.param(None, marks=pytest.mark.skip(reason=why))]
    metafunc.parametrize("release", selected, indirect=True, scope="session")


@pytest.fixture(scope="session")
def release(request):
    return request.param


@pytest.fixture(scope="session")
def base(e2e_host, release):
    base = ct.BaseRoot(release)
    base.ensure()
    return base


@pytest.fixture(scope="session")
def base_root(base):
    return base.tree


class Debs:
    def __init__(self, flex, arc):
        self.flex, self.arc = pathlib.Path(flex), pathlib.Path(arc)

    def version(self, deb=None):
        return subprocess.run(["dpkg-deb", "-f", str(deb or self.flex), "Version"], check=True,
                              capture_output=True, text=True).stdout.strip()


def _one(directory, pattern):
    found = sorted(pathlib.Path(directory).glob(pattern))
    if len(found) != 1:
        raise ct.E2EError(f"expected one {pattern} in {directory}, found {[p.name for p in found]}")
    return found[0]


@pytest.fixture(scope="session")
def debs(e2e_host, tmp_path_factory):
    given = os.environ.get("AKS_FLEX_NODE_E2E_DEB_DIRS", "")
    if given:
        dirs = given.split(":")
        flex = next(p for d in dirs for p in pathlib.Path(d).glob("aks-flex-node_*_all.deb"))
        arc = next(p for d in dirs for p in pathlib.Path(d).glob("azcmagent_*_all.deb"))
        return Debs(flex, arc)
    out = tmp_path_factory.mktemp("e2e-debs")
    ct._run([str(ct.REPO / "tools/build-deb.sh"), str(out / "flex")], timeout=900)
    ct._run([str(ct.REPO / "tools/build-arc-agent.sh"), str(out / "arc")], timeout=900)
    return Debs(_one(out / "flex", "aks-flex-node_*_all.deb"), _one(out / "arc", "azcmagent_*_all.deb"))


@pytest.fixture(scope="session")
def repo(debs, tmp_path_factory):
    base = tmp_path_factory.mktemp("e2e-repo")
    published = Repo(base / "repo", base / "key")
    # Inside the container the tree is a bind mount: its host parents need no permissions
    # for apt's _apt user; publish-repo.sh makes the tree itself world-readable.
    published.publish(debs.flex, debs.arc)
    return published


@pytest.fixture
def fresh_repo(debs, tmp_path):
    """A repository of its own for a test that publishes into it (upgrades)."""
    published = Repo(tmp_path / "repo", tmp_path / "key")
    published.publish(debs.flex, debs.arc)
    return published


class NewerBuild:
    def __init__(self, deb, old_version, new_version):
        self.deb, self.old_version, self.new_version = deb, old_version, new_version


@pytest.fixture(scope="session")
def newer_deb(debs, tmp_path_factory):
    """The same tree built as a newer version (tools/build-deb-version.sh), for upgrades."""
    old = debs.version()
    new = f"{old}+e2e1"
    out = tmp_path_factory.mktemp("e2e-newer")
    ct._run([str(ct.REPO / "tools/build-deb-version.sh"), new, str(out)], timeout=900)
    return NewerBuild(_one(out, f"aks-flex-node_{new}_all.deb"), old, new)


@pytest.fixture(scope="session")
def unrelated_deb(e2e_host, tmp_path_factory):
    """A small package that has nothing to do with ours (equivs), for "apt still works"."""
    out = tmp_path_factory.mktemp("e2e-unrelated")
    (out / "control").write_text(
        "Section: misc\nPriority: optional\nStandards-Version: 4.6.2\n\n"
        "Package: e2e-unrelated\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: aks-flex-node maintainers <aks-flex-node@lists.example.org>\n"
        "Description: unrelated package for the aks-flex-node e2e tests\n"
        " Installed after a failed join, to show apt is not wedged.\n")
    ct._run(["equivs-build", "control"], cwd=str(out), timeout=300)
    return _one(out, "e2e-unrelated_1.0_all.deb")


@pytest.fixture(scope="session")
def mirror(base, emulator):
    served = Mirror(base.runtime_debs(), emulator)
    yield served
    served.stop()


@pytest.fixture(scope="session")
def containerd2_mirror(base, emulator):
    """The artifact mirror with Debian forky's containerd 2.x in place of the release's own
    (tests/e2e/containerd2.py), for the GPU scenario; runc and the CNI plugins stay the release's."""
    try:
        deb = containerd2.deb()
    except containerd2.ArchiveUnreachable as err:
        pytest.skip(str(err))
    served = Mirror({**base.runtime_debs(), "containerd": deb}, emulator)
    yield served
    served.stop()


def _boot(base_root, request, binds, **options):
    run_dir = RUN_BASE / f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}"
    box = ct.Container(base_root, run_dir, binds=binds, **options)
    request.addfinalizer(box.destroy)
    box.start()
    return box


def emulator_ports(emulator, mirror):
    """The host ports a node in a network namespace of its own must reach: every endpoint
    of the emulator (ARM, Entra, HIMDS upstream, the API servers, artifacts) and the mirror
    (None: not the mirror's)."""
    urls = [url for key, value in emulator.endpoints.items() if key not in ("admin", "pid")
            for url in (value if isinstance(value, (list, tuple)) else
                        value.values() if isinstance(value, dict) else [value])
            if isinstance(url, str) and url.startswith(("http://", "https://"))]
    return sorted({urllib.parse.urlsplit(url).port for url in [*urls, *([mirror.url] if mirror else [])]} - {None})


@pytest.fixture
def booted(base_root, request):
    """A booted container with nothing more (the harness smoke test)."""
    return _boot(base_root, request, ())


@pytest.fixture
def boot_node(base_root, fresh_emulator, request):
    """boot_node(repo) -> a booted node whose only APT source is `repo`, with the Arc agent's
    settings in place (the agent itself comes with the package, as a Recommends).

    private_network (the default): the node gets a network namespace of its own, the
    emulator's and the mirror's ports forwarded in, so nodes can run at once, in one test
    (the fleet scenarios) or in several workers (`make e2e` runs two); node.c.expose()
    reaches its ports. False: the host's network, as `make demo` runs a node.
    before_boot(container): files to put in place before systemd starts.
    add_repository=False leaves the APT source to the scenario (cloud-init adds it).
    extra_ports: more host ports to forward in (the release upgrade's archive proxy).
    reach_mirror=False: the artifact mirror's port is not forwarded (a node that installs
    from a file:// mirror). binds: more (host path, node path, read_only) bind mounts.
    mirror: the artifact mirror the node is given (its digests, its port), by default the
    `mirror` fixture's. system_calls: more system calls for the container (container.Container)."""

    def boot(repo, private_network=True, before_boot=None, hostname="e2e-node", add_repository=True,
             extra_ports=(), reach_mirror=True, binds=(), mirror=None, system_calls=()):
        served = mirror or request.getfixturevalue("mirror")
        digests = served.digests()

        def prepare(box):
            # In place before systemd starts: a cloud-init join runs during the boot.
            box.write(DIGESTS, digests, 0o644)
            if before_boot:
                before_boot(box)

        options = {"hostname": hostname, "before_boot": prepare, "system_calls": system_calls}
        if private_network:
            options.update(private_network=True,
                           forward_ports=[*emulator_ports(fresh_emulator, served if reach_mirror else None),
                                          *extra_ports])
        box = _boot(base_root, request, [(repo.path, REPO_MOUNT, True),
                                         (fresh_emulator.himds_key_dir, UPSTREAM_KEYS_MOUNT, False), *binds],
                    **options)
        n = Node(box, fresh_emulator)
        if add_repository:
            n.add_repository(repo)
        n.configure_arc_agent()
        return n

    return boot


@pytest.fixture
def node(boot_node, repo):
    return boot_node(repo)


@pytest.fixture
def private_registry(tmp_path):
    missing = r.missing_tools()
    if missing:
        pytest.fail(f"missing {', '.join(missing)} on the test host: apt-get install docker-registry skopeo "
                    "python3-grpcio (Debian's)")
    ca = r.TestCA(tmp_path / "registry-ca")
    registry = r.Registry(tmp_path / "registry", ca).start()
    yield registry
    registry.stop()
