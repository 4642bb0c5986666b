"""tools/refresh-artifact-digests.py: the shipped table is what the tool makes of the
upstream sources' own formats (Kubespray's checksums.yml, the Kubernetes CHANGELOG)."""

import importlib.util
import pathlib

import pytest

from aks_flex_node import artifact_digests

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "refresh-artifact-digests.py"
spec = importlib.util.spec_from_file_location("refresh_artifact_digests", TOOL)
refresh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(refresh)

A, B, C = "a" * 64, "b" * 64, "c" * 64
CHECKSUMS_YML = f"""---
crictl_checksums:
  amd64:
    1.33.0: sha256:{C}
containerd_archive_checksums:
  arm:
    2.0.4: sha256:{C}
  arm64:
    2.0.4: sha256:{A}
  amd64:
    2.0.4: sha256:{B}
containerd_static_archive_checksums:
  amd64:
    2.0.4: sha256:{C}
runc_checksums:
  amd64:
    1.1.12: sha256:{A}
cni_binary_checksums:
  amd64:
    1.6.2: sha256:{B}
"""
CHANGELOG = f"""### Node Binaries

filename | sha512 hash
-------- | -----------
[kubernetes-node-linux-amd64.tar.gz](https://dl.k8s.io/v1.33.5/kubernetes-node-linux-amd64.tar.gz) | {"d" * 128}
[kubernetes-node-linux-arm64.tar.gz](https://dl.k8s.io/v1.33.5/kubernetes-node-linux-arm64.tar.gz) | `{"e" * 128}`
[kubernetes-node-linux-s390x.tar.gz](https://dl.k8s.io/v1.33.5/kubernetes-node-linux-s390x.tar.gz) | {"f" * 128}
[kubernetes-node-linux-amd64.tar.gz](https://dl.k8s.io/v1.34.0-rc.1/kubernetes-node-linux-amd64.tar.gz) | {"f" * 128}
"""


def test_only_the_archives_our_urls_fetch_are_taken_for_our_architectures():
    rows = refresh.from_kubespray(CHECKSUMS_YML)
    assert sorted(rows) == [("cni", "1.6.2", "amd64", f"sha256:{B}"), ("containerd", "2.0.4", "amd64", f"sha256:{B}"),
                            ("containerd", "2.0.4", "arm64", f"sha256:{A}"), ("runc", "1.1.12", "amd64", f"sha256:{A}")]


def test_the_changelog_gives_the_node_tarballs_sha512_of_releases_only():
    assert sorted(refresh.from_changelog(CHANGELOG)) == [
        ("kubernetes", "1.33.5", "amd64", "sha512:" + "d" * 128), ("kubernetes", "1.33.5", "arm64", "sha512:" + "e" * 128)]


def test_what_it_prints_is_a_table_aks_flex_node_reads(tmp_path, capsys):
    (tmp_path / "checksums.yml").write_text(CHECKSUMS_YML)
    (tmp_path / "CHANGELOG-1.33.md").write_text(CHANGELOG)
    assert refresh.main(["--kubespray", str(tmp_path / "checksums.yml"),
                         "--changelog", str(tmp_path / "CHANGELOG-1.33.md"), "--source-note", "test"]) == 0
    table = artifact_digests.parse(capsys.readouterr().out, "out")
    assert table[("kubernetes", "1.33.5", "arm64")].algorithm == "sha512" and len(table) == 6


def test_the_shipped_table_is_the_tools_output_form():
    text = (TOOL.parents[1] / "aks_flex_node" / artifact_digests.SHIPPED).read_text()
    assert text.startswith("# The digests aks-flex-node trusts") and "Sources:" in text


@pytest.mark.parametrize("artifact", artifact_digests.ARTIFACTS)
def test_every_artifact_has_a_section_in_the_shipped_table(artifact):
    assert any(k[0] == artifact for k in artifact_digests.shipped())
