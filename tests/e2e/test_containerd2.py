"""How the GPU scenario's containerd 2.x fetch fails (tests/e2e/containerd2.py): an archive
that cannot be reached skips the scenario, saying why; one that answers without a signed
forky is an error, never a skip nor a pass. Nothing here reaches Debian's archive: the
"archives" are a closed port and an empty HTTP server on this host's loopback."""

import functools
import http.server
import threading

import pytest

from tests.e2e import container as ct
from tests.e2e import containerd2
from tests.proxy_fixtures import free_port

pytestmark = pytest.mark.e2e


def test_an_archive_that_cannot_be_reached_is_said_unreachable(e2e_host, tmp_path):
    with pytest.raises(containerd2.ArchiveUnreachable) as err:
        containerd2.deb(cache=tmp_path, mirror=f"http://127.0.0.1:{free_port()}/debian")
    assert "127.0.0.1" in str(err.value)
    assert not list(tmp_path.glob("containerd2-*/*.deb"))


def test_an_archive_without_a_signed_forky_is_an_error_not_a_skip(e2e_host, tmp_path):
    empty = tmp_path / "archive"
    empty.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(empty))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(ct.E2EError) as err:
            containerd2.deb(cache=tmp_path / "cache", mirror=f"http://127.0.0.1:{server.server_address[1]}/debian")
    finally:
        server.shutdown()
        server.server_close()
    assert not isinstance(err.value, containerd2.ArchiveUnreachable), err.value
    assert not list((tmp_path / "cache").glob("containerd2-*/*.deb"))
