"""A local mirror (artifact_mirror = file:///path, issue 28): the setting's check, the URLs it
gives, and the Downloader's copy of a local file into its cache (host/download.py copy_into)."""

import hashlib
import os

import pytest

from aks_flex_node.artifact_digests import Digest
from aks_flex_node.config.checks import Invalid, check_mirror
from aks_flex_node.host.download import Downloader
from aks_flex_node.host.download_errors import ChecksumMismatch, LocalFileError

DATA = b"#!/bin/sh\necho runc version 1.1.12\n"
NAME = "runc-v1.1.12.amd64"


class Sink:
    """What an install's sink does with a body: read it all; told when it must drop it."""

    def __init__(self):
        self.read, self.discarded = [], 0

    def read_from(self, body):
        self.read.append(body.read())
        return len(self.read[-1])

    def discard(self):
        self.discarded += 1


def trusted(data, algorithm="sha256"):
    return Digest(algorithm, hashlib.new(algorithm, data).hexdigest(), "artifact_digests_file (test)")


@pytest.mark.parametrize("value", ["file:///media/usb/aks-flex-node", "file:///srv/mirror/",
                                   "file:///media/alice/USB%20DISK", "https://mirror.example.com/k8s", ""])
def test_the_mirror_setting_takes_https_or_an_absolute_file_url(value):
    assert check_mirror(value) == value


@pytest.mark.parametrize("value", ["file://media/usb", "file:media/usb", "file:/media/usb",
                                   "file://nas.example/srv", "file:///srv/../etc", "file:///srv/./m",
                                   "file:///srv/m?x=1", "file:///srv/m#top", "file:///media/USB DISK",
                                   "FILE:///srv/m", "http://mirror.example.com", "ftp://mirror.example.com"])
def test_a_relative_remote_or_odd_file_url_is_refused(value):
    with pytest.raises(Invalid) as err:
        check_mirror(value)
    assert "file://" in err.value.expected and "https://" in err.value.expected


def test_a_local_mirror_gives_no_checksum_url(tmp_path):
    from aks_flex_node import config

    cfg = config.from_values(_values(artifact_mirror="file:///srv/m%20x"), root=str(tmp_path))
    assert cfg.artifact_urls("runc", "1.1.12", "amd64") == (f"file:///srv/m%20x/{NAME}", None)
    https = config.from_values(_values(artifact_mirror="https://m.example/k"), root=str(tmp_path))
    assert https.artifact_urls("runc", "1.1.12", "amd64") == (f"https://m.example/k/{NAME}",
                                                              f"https://m.example/k/{NAME}.sha256")
    # mirror sync fetches from the *_url templates whatever the mirror says
    assert cfg.upstream_artifact_urls("runc", "1.1.12", "amd64")[0] == \
        "https://github.com/opencontainers/runc/releases/download/v1.1.12/runc.amd64"


def _values(**extra):
    return {"tenant_id": "11111111-2222-3333-4444-555555555555", "auth_method": "azure-cli",
            "cluster_resource_id": "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/rg/"
                                   "providers/Microsoft.ContainerService/managedClusters/c1",
            "machine_name": "node-1", **extra}


def _mirror(tmp_path, name=NAME, data=DATA, directory="srv/usb stick"):
    """A root with the mirror directory under it, its file; (root, cache, file URL)."""
    root = tmp_path / "root"
    path = root / directory / name
    path.parent.mkdir(parents=True)
    if data is not None:
        path.write_bytes(data)
    cache = tmp_path / "cache"
    cache.mkdir()
    return root, cache, "file:///" + directory.replace(" ", "%20") + "/" + name


@pytest.mark.parametrize("algorithm", ["sha256", "sha512"])
def test_a_local_file_is_copied_into_the_cache_once_it_matches(tmp_path, algorithm):
    root, cache, url = _mirror(tmp_path)
    (root / "srv/usb stick" / (NAME + ".sha256")).write_text("0" * 64 + f"  {NAME}\n")  # never read
    downloader = Downloader(cache, root=root)
    sink = Sink()
    assert downloader.copy_into(url, trusted(DATA, algorithm), sink, field="artifact_mirror") == len(DATA)
    assert sink.read == [DATA]
    kept = downloader.cache_path(url, hashlib.sha256(DATA).hexdigest())
    assert os.listdir(cache) == [os.path.basename(kept)]
    with open(kept, "rb") as f:
        assert f.read() == DATA


def test_a_local_file_with_other_bytes_is_refused_and_nothing_is_kept(tmp_path):
    root, cache, url = _mirror(tmp_path, data=b"#!/bin/sh\necho swapped\n")
    sink = Sink()
    with pytest.raises(ChecksumMismatch) as err:
        Downloader(cache, root=root).copy_into(url, trusted(DATA), sink, field="artifact_mirror")
    assert f"/srv/usb stick/{NAME}" in err.value.message and trusted(DATA).hex in err.value.message
    assert sink.read == [] and os.listdir(cache) == []


def test_what_is_not_a_regular_file_is_refused_naming_the_setting_and_the_file(tmp_path):
    root, cache, url = _mirror(tmp_path, data=None)
    path = root / "srv/usb stick" / NAME
    other = tmp_path / "elsewhere"
    other.write_bytes(DATA)
    cases = [(None, "absent"), (os.mkdir, "not-regular"), (os.mkfifo, "not-regular"),
             (lambda p: os.symlink(other, p), "symlink")]
    for make, reason in cases:
        if make is not None:
            make(path)
        with pytest.raises(LocalFileError) as err:  # a FIFO is never waited on
            Downloader(cache, root=root).copy_into(url, trusted(DATA), Sink(), field="artifact_mirror")
        assert (err.value.code, err.value.reason, err.value.field) == ("mirror-file", reason, "artifact_mirror")
        assert err.value.path == f"/srv/usb stick/{NAME}" and "artifact_mirror" in err.value.message
        assert os.listdir(cache) == []
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        elif os.path.lexists(path):
            os.unlink(path)
