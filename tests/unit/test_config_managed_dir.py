"""cache_dir names a directory aks-flex-node fills and unbootstrap removes: system
locations are refused by name (configspec's managed_dir check), an existing directory
that aks-flex-node did not create by the semantic check (issue #8: `cache_dir = /etc`
made unbootstrap delete /etc; `cache_dir = /` crashed)."""

import pytest

from aks_flex_node import paths
from aks_flex_node.config import managed_dir
from aks_flex_node.errors import ConfigError
from tests.config_fixtures import load, make_root, with_values


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def cache_dir_problem(root, value):
    with pytest.raises(ConfigError) as excinfo:
        load(root, with_values(cache_dir=value))
    problems = excinfo.value.problems
    assert [p.key for p in problems] == ["cache_dir"], [str(p) for p in problems]
    assert problems[0].value == value
    return problems[0]


REFUSED_BY_NAME = [
    ("/", "not a system location: / is the filesystem root"),
    ("/etc", "not a system location: /etc is the system's configuration"),
    ("/etc/", "/etc is the system's configuration"),
    ("//etc/.", "/etc is the system's configuration"),
    ("/etc/aks-cache", "/etc/aks-cache is inside /etc"),
    ("/srv", "/srv is the data this system serves"),
    ("/var/lib", "/var/lib is the programs' state"),
    ("/var/lib/aks-flex-node", "/var/lib/aks-flex-node holds aks-flex-node's state"),
    ("/var/lib/aks-flex-node/x", "is inside /var/lib/aks-flex-node"),
    ("/var/lib/kubelet", "holds the kubelet's state"),
    ("/usr/local", "/usr/local is the locally installed software"),
    ("/usr/local/bin", "/usr/local/bin is part of the locally installed software"),
    ("/usr/share/cache", "is inside /usr"),
    ("/opt/cni", "holds the CNI plugins aks-flex-node installs"),
    ("/opt/containerd", "holds containerd's plugins"),
    ("/proc/self", "is inside /proc"),
    ("/run/systemd/cache", "is inside /run/systemd"),
    ("/srv/../etc", "named without '..'"),
]


@pytest.mark.parametrize("value,expected", REFUSED_BY_NAME, ids=[v for v, _ in REFUSED_BY_NAME])
def test_a_system_location_is_refused_by_name(root, value, expected):
    problem = cache_dir_problem(root, value)
    assert expected in problem.expected
    assert f"cache_dir = {value!r}" in str(problem)


@pytest.mark.parametrize("value", ["/srv/data", "/srv/data/", "/opt/aks-cache", "/usr/local/share/aks-cache",
                                   "/var/cache/downloads", "/mnt/disk/aks-cache", "/home/ops/aks-cache"])
def test_a_directory_of_its_own_passes_by_name(value):
    assert managed_dir.refusal(value) is None
    assert managed_dir.check_managed_dir(value) == value.rstrip("/")


def test_a_missing_directory_is_accepted_without_its_trailing_slash(root):
    assert load(root, with_values(cache_dir="/srv/data/")).cache_dir == "/srv/data"


def test_an_existing_directory_aks_flex_node_did_not_create_is_refused(root):
    (root / "srv/data").mkdir(parents=True)
    (root / "srv/data/report.pdf").write_text("the operator's")
    problem = cache_dir_problem(root, "/srv/data")
    assert "/srv/data" in problem.expected and paths.CACHE_TAG_NAME in problem.expected  # the tag it lacks


def test_an_existing_directory_with_our_tag_is_accepted(root):
    (root / "srv/data").mkdir(parents=True)
    (root / "srv/data" / paths.CACHE_TAG_NAME).write_bytes(paths.CACHE_TAG)
    assert load(root, with_values(cache_dir="/srv/data")).cache_dir == "/srv/data"


def test_a_cache_a_kill_left_untagged_is_accepted_and_an_empty_one_is_not(root):
    """A run killed while tagging the cache it had just made leaves the directory with the
    tag's temp file only: refusing it would stop every later run before the tag is written.
    An empty directory is still refused: nothing says it is ours."""
    (root / "srv/data").mkdir(parents=True)
    assert paths.CACHE_TAG_NAME in cache_dir_problem(root, "/srv/data").expected
    (root / "srv/data" / f".{paths.CACHE_TAG_NAME}.4194999.k1ll3d_x.tmp").write_bytes(b"Signa")
    assert load(root, with_values(cache_dir="/srv/data")).cache_dir == "/srv/data"
    (root / "srv/data/report.pdf").write_text("the operator's")
    assert cache_dir_problem(root, "/srv/data") is not None


def test_another_programs_cache_tag_is_not_ours(root):
    # man-db tags /var/cache/man with the same signature line.
    (root / "srv/man").mkdir(parents=True)
    (root / "srv/man" / paths.CACHE_TAG_NAME).write_bytes(
        b"Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by man-db.\n")
    assert paths.CACHE_TAG_NAME in cache_dir_problem(root, "/srv/man").expected


def test_the_existing_default_is_accepted_without_a_tag(root):
    (root / paths.DEFAULT_CACHE_DIR.lstrip("/")).mkdir(parents=True)
    assert load(root, with_values(cache_dir=paths.DEFAULT_CACHE_DIR)).cache_dir == paths.DEFAULT_CACHE_DIR


def test_a_file_is_no_cache_directory(root):
    (root / "srv").mkdir()
    (root / "srv/data").write_text("x")
    # refused as what it is (not a directory), not for a missing tag
    assert paths.CACHE_TAG_NAME not in cache_dir_problem(root, "/srv/data").expected


def test_every_owned_directory_is_refused_with_what_is_inside_and_above_it():
    for owned in managed_dir.OWNED_DIRS:
        assert managed_dir.refusal(owned), owned
        assert managed_dir.refusal(owned + "/sub"), owned
        assert managed_dir.refusal(owned.rsplit("/", 1)[0] or "/"), owned
