"""The trusted digests (artifact_digests.py): the package's table parses and covers the
default versions, a broken table or pin file is a clear error naming where and what, and the
operator's pins come before the package's."""

import os

import pytest

from aks_flex_node import artifact_digests
from aks_flex_node.artifact_digests import DigestTableError
from tests.config_fixtures import MINIMAL, load, make_root, only_problem, with_values

HEX256 = "ab" * 32
HEX512 = "cd" * 64


def test_the_shipped_table_covers_the_default_runtime_for_both_architectures():
    table = artifact_digests.shipped()
    for arch in artifact_digests.ARCHES:
        assert table[("containerd", "2.0.4", arch)].algorithm == "sha256"
        assert table[("runc", "1.1.12", arch)].algorithm == "sha256"
        assert table[("kubernetes", "1.33.5", arch)].algorithm == "sha512"
    assert {k[0] for k in table} == set(artifact_digests.ARTIFACTS)


@pytest.mark.parametrize("artifact", ["containerd", "runc", "cni"])
def test_the_shipped_table_vouches_for_every_default_version(tmp_path, artifact):
    # A default with no shipped digest is refused on a default install (nothing to check
    # the download against), so a default bump without its digest must turn this red.
    version = load(make_root(tmp_path), MINIMAL)[f"{artifact}_version"]
    table = artifact_digests.shipped()
    assert [arch for arch in artifact_digests.ARCHES if (artifact, version, arch) not in table] == []


@pytest.mark.parametrize("line, field", [
    ("runc 1.1.12 amd64", "fields"),
    ("runc 1.1.12 amd64 sha256:" + HEX256 + " extra", "fields"),
    ("kubelet 1.31.2 amd64 sha256:" + HEX256, "artifact"),
    ("runc v1.1.12 amd64 sha256:" + HEX256, "version"),
    ("runc 1.1.12 x86_64 sha256:" + HEX256, "arch"),
    ("runc 1.1.12 amd64 md5:" + "ab" * 16, "digest"),
    ("runc 1.1.12 amd64 sha256:" + HEX256[:-1], "digest"),
    ("runc 1.1.12 amd64 sha512:" + HEX256, "digest"),
    ("runc 1.1.12 amd64 sha256:" + "zz" * 32, "digest"),
])
def test_a_line_that_is_not_a_digest_line_is_refused_with_its_number(line, field):
    with pytest.raises(DigestTableError) as excinfo:
        artifact_digests.parse(f"# header\n\ncni 1.6.2 arm64 sha256:{HEX256}\n{line}\n", "pins.txt")
    assert (excinfo.value.code, excinfo.value.source, excinfo.value.line) == ("digest-table", "pins.txt", 4)


def test_two_digests_for_one_file_are_refused():
    with pytest.raises(DigestTableError) as excinfo:
        artifact_digests.parse(f"runc 1.1.12 amd64 sha256:{HEX256}\nrunc 1.1.12 amd64 sha512:{HEX512}\n", "t")
    assert excinfo.value.line == 2


def test_upper_case_hex_is_read_as_lower_case_and_both_algorithms_parse():
    table = artifact_digests.parse(f"runc 1.1.12 amd64 sha256:{HEX256.upper()}\n"
                                   f"kubernetes 1.31.0-rc.1 arm64 sha512:{HEX512}\n", "t")
    assert table[("runc", "1.1.12", "amd64")] == ("sha256", HEX256, "t")
    assert table[("kubernetes", "1.31.0-rc.1", "arm64")].algorithm == "sha512"


def test_the_operators_pin_comes_before_the_shipped_digest():
    pins = artifact_digests.parse(f"runc 1.1.12 amd64 sha256:{HEX256}\n", "pins")
    assert artifact_digests.trusted(pins, "runc", "1.1.12", "amd64").hex == HEX256
    assert artifact_digests.trusted(pins, "runc", "1.1.12", "arm64").source.endswith("artifact-digests")
    assert artifact_digests.trusted(None, "runc", "0.0.1", "amd64") is None


def _pins(root, text, mode=0o644):
    path = root / "etc/aks-flex-node/digests"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return "/etc/aks-flex-node/digests"


def test_a_pin_file_with_a_broken_line_is_a_config_problem_naming_the_key(tmp_path):
    root = make_root(tmp_path)
    node_path = _pins(root, "runc 1.1.12 amd64 sha256:nothex\n")
    problem = only_problem(root, with_values(artifact_digests_file=node_path), "artifact_digests_file")
    assert problem.value == node_path


def test_a_pin_file_others_may_write_is_refused(tmp_path):
    root = make_root(tmp_path)
    node_path = _pins(root, f"runc 1.1.12 amd64 sha256:{HEX256}\n", mode=0o666)
    only_problem(root, with_values(artifact_digests_file=node_path), "artifact_digests_file")


def test_a_missing_pin_file_is_refused(tmp_path):
    root = make_root(tmp_path)
    only_problem(root, with_values(artifact_digests_file="/etc/aks-flex-node/none"), "artifact_digests_file")


def test_the_config_answers_the_pin_then_the_shipped_digest_then_refuses(tmp_path):
    root = make_root(tmp_path)
    cfg = load(root, with_values(artifact_digests_file=_pins(root, f"runc 1.1.12 amd64 sha256:{HEX256}\n")))
    assert cfg.artifact_digest("runc", "1.1.12", "amd64").hex == HEX256
    assert cfg.artifact_digest("containerd", "2.0.4", "amd64").source.endswith("artifact-digests")
    with pytest.raises(artifact_digests.ArtifactDigestUnknown) as excinfo:
        cfg.artifact_digest("runc", "0.0.1", "amd64")
    assert excinfo.value.code == "artifact-digest-unknown"


def test_a_pin_file_through_a_link_counts_only_when_its_target_is_safe_and_a_fifo_is_never_read(tmp_path):
    # Read as ca_bundle is (a public file, which update-alternatives and the like make links
    # to): the link and its target are both held to strictmodes.
    root = make_root(tmp_path)
    target = root / _pins(root, f"runc 1.1.12 amd64 sha256:{HEX256}\n").lstrip("/")
    os.symlink(target, root / "etc/aks-flex-node/link")
    cfg = load(root, with_values(artifact_digests_file="/etc/aks-flex-node/link"))
    assert cfg.artifact_digest("runc", "1.1.12", "amd64").hex == HEX256
    os.chmod(target, 0o666)
    only_problem(root, with_values(artifact_digests_file="/etc/aks-flex-node/link"), "artifact_digests_file")
    os.mkfifo(root / "etc/aks-flex-node/fifo")  # opened, it would block: never opened
    only_problem(root, with_values(artifact_digests_file="/etc/aks-flex-node/fifo"), "artifact_digests_file")


def test_a_pin_file_that_is_not_text_is_refused(tmp_path):
    root = make_root(tmp_path)
    path = root / _pins(root, "").lstrip("/")
    path.write_bytes(b"runc 1.1.12 amd64 sha256:\xff\xfe\n")
    only_problem(root, with_values(artifact_digests_file="/etc/aks-flex-node/digests"), "artifact_digests_file")
