"""An archive whose digest matched but that host/archive.py refused leaves no cached copy
(issue 26: nothing of a hostile archive stays on disk), downloaded or read from the cache."""

import hashlib
import os
import tarfile

import pytest

from aks_flex_node.host import ArchiveError, Downloader
from aks_flex_node.host.archive import members
from aks_flex_node.http_policy import HttpPolicy
from tests.archive_fixtures import tar_gz
from tests.download_fixtures import ArtifactServer


class ArchiveSink:
    """Reads every member as an install does (steps/artifacts.py's _Unpack, less the staging)."""

    def read_from(self, body):
        return [(name, content.read()) for name, _, content in members(body, lambda n: n, "cni.tgz")]

    def discard(self):
        pass


@pytest.fixture
def server():
    s = ArtifactServer()
    yield s
    s.stop()


def cached(cache):
    return sorted(p for p in os.listdir(cache) if not p.startswith(".")) if os.path.isdir(cache) else []


def test_a_refused_archive_is_not_kept_in_the_cache(server, tmp_path):
    cache = tmp_path / "cache"
    body = tar_gz([("bridge", b"#!/bin/sh\n"), ("loopback", tarfile.SYMTYPE, "/usr/bin/sudo")])
    url = server.serve("/cni.tgz", body)
    digest = hashlib.sha256(body).hexdigest()
    loader = Downloader(cache, policy=HttpPolicy(), backoff=0.01)
    with pytest.raises(ArchiveError) as err:
        loader.fetch_into(url, digest, ArchiveSink())
    assert err.value.code == "member-not-regular"
    assert cached(cache) == []
    # Cached by a plain fetch (no reader then), then refused when read from the cache.
    loader.fetch(url, digest)
    assert len(cached(cache)) == 1
    with pytest.raises(ArchiveError):
        loader.fetch_into(url, digest, ArchiveSink())
    assert cached(cache) == []


def test_a_good_archive_stays_cached(server, tmp_path):
    cache = tmp_path / "cache"
    body = tar_gz([("bridge", b"#!/bin/sh\n")])
    url = server.serve("/cni.tgz", body)
    loader = Downloader(cache, policy=HttpPolicy(), backoff=0.01)
    assert loader.fetch_into(url, hashlib.sha256(body).hexdigest(), ArchiveSink()) == [("bridge", b"#!/bin/sh\n")]
    assert len(cached(cache)) == 1
