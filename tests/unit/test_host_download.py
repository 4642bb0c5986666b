"""Downloader against a threaded loopback HTTP(S) server that counts its requests
(tests/download_fixtures.py)."""

import datetime
import hashlib
import ipaddress
import logging
import os
import re
import socket
import ssl
import stat
import subprocess
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aks_flex_node.errors import ExitCode, TemporaryError
from aks_flex_node.host import (
    ChecksumMismatch,
    DownloadError,
    Downloader,
    DownloadUnavailable,
)
from aks_flex_node.host import download
from aks_flex_node.host.checksums import parse_checksums
from aks_flex_node.http_policy import HttpPolicy
from tests.download_fixtures import ArtifactServer
from tests.waiting import pauses, wait_for


def sha(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def server():
    s = ArtifactServer()
    yield s
    s.stop()


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "root" / "var/cache/aks-flex-node"


def downloader(cache, proxy=None, no_proxy=(), ca_bundle=None, **kw):
    kw.setdefault("backoff", 0.01)
    return Downloader(cache, policy=HttpPolicy(https_proxy=proxy, no_proxy=no_proxy, ca_bundle=ca_bundle), **kw)


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- fetch -------------------------------------------------------------------------------


def test_fetch_downloads_verifies_and_caches_by_hash(server, cache, caplog):
    body = os.urandom(300_000)
    url = server.serve("/v1.30.4/bin/linux/amd64/kubelet", body)
    caplog.set_level(logging.INFO, logger="aks_flex_node.host.download")
    path = downloader(cache).fetch(url, sha(body).upper())
    assert path == cache / f"{sha(body)}-kubelet"
    assert path.read_bytes() == body
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(cache) == [path.name]  # no temp file left
    assert server.count("/v1.30.4/bin/linux/amd64/kubelet") == 1
    assert server.requests[0][2].startswith("aks-flex-node/")
    assert any(url in r.getMessage() and "300000" in r.getMessage() for r in caplog.records)  # what, how much


def test_cache_hit_makes_no_request(server, cache):
    body = b"runc binary"
    url = server.serve("/runc.amd64", body)
    first = downloader(cache).fetch(url, sha(body))
    again = downloader(cache).fetch(url, sha(body))  # a new instance: the cache is on disk
    assert again == first
    assert server.count("/runc.amd64") == 1


def test_corrupted_cache_entry_is_downloaded_again(server, cache):
    body = b"containerd tarball"
    url = server.serve("/containerd.tar.gz", body)
    path = downloader(cache).fetch(url, sha(body))
    path.write_bytes(b"bit rot")
    assert downloader(cache).fetch(url, sha(body)).read_bytes() == body
    assert server.count("/containerd.tar.gz") == 2


def test_checksum_mismatch_names_url_and_both_hashes_and_keeps_nothing(server, cache):
    url = server.serve("/cni.tgz", b"tampered")
    wanted = sha(b"genuine")
    with pytest.raises(ChecksumMismatch) as caught:
        downloader(cache).fetch(url, wanted)
    message = str(caught.value)
    assert url in message and wanted in message and sha(b"tampered") in message
    assert caught.value.exit_code == ExitCode.FAILED
    assert os.listdir(cache) == []
    assert server.count("/cni.tgz") == 1  # a wrong hash is not retried


def test_404_is_a_permanent_error_naming_url_and_status(server, cache):
    url = server.origin + "/missing.tgz"
    with pytest.raises(DownloadError) as caught:
        downloader(cache).fetch(url, sha(b"x"))
    assert not isinstance(caught.value, TemporaryError)
    assert url in str(caught.value) and "HTTP 404" in str(caught.value)
    assert server.count("/missing.tgz") == 1


def test_500_is_retried_then_a_temporary_error(server, cache):
    url = server.serve("/flaky", b"x", status=500)
    with pytest.raises(DownloadUnavailable) as caught:
        downloader(cache, attempts=3).fetch(url, sha(b"x"))
    err = caught.value
    assert isinstance(err, TemporaryError) and err.exit_code == ExitCode.TEMPFAIL == 75
    assert url in str(err) and "HTTP 500" in str(err) and "after 3 attempts" in str(err)
    assert server.count("/flaky") == 3
    assert os.listdir(cache) == []


def test_transient_failures_then_success(server, cache):
    body = b"eventually"
    url = server.serve("/later", body, before=[503, "truncate", 429])
    assert downloader(cache, attempts=4).fetch(url, sha(body)).read_bytes() == body
    assert server.count("/later") == 4


def test_a_dropped_connection_resumes_with_a_range_request(server, cache, caplog):
    """Issue 12: the second attempt asks for the rest (Range, guarded by If-Range with the
    ETag), twice over, and the file is whole: the body crossed the wire once."""
    body = os.urandom(400_000)
    url = server.serve("/kubernetes-node.tar.gz", body, before=["truncate", "truncate"], etag='"v1"',
                       ranges=True)
    caplog.set_level(logging.INFO, logger="aks_flex_node.host.download")
    assert downloader(cache, attempts=3).fetch(url, sha(body)).read_bytes() == body
    assert [r for _, r in server.ranges] == [None, "bytes=200000-", "bytes=300000-"]
    assert "resuming after 200000 bytes" in caplog.text
    assert [n for n in os.listdir(cache) if n.endswith(".part")] == []


def test_a_server_that_sends_the_whole_file_again_starts_it_over(server, cache):
    body = os.urandom(100_000)
    url = server.serve("/cni.tgz", body, before=["truncate"], etag='"v1"', ranges=False)
    assert downloader(cache).fetch(url, sha(body)).read_bytes() == body
    assert [r for _, r in server.ranges] == [None, "bytes=50000-"]  # asked; got a 200


def test_without_a_strong_validator_a_download_starts_over(server, cache):
    """Without an ETag or Last-Modified (or with a weak ETag) a resumed body could splice
    two versions of the file: no Range is asked."""
    body = os.urandom(100_000)
    url = server.serve("/runc.amd64", body, before=["truncate"], ranges=True)
    weak = server.serve("/weak.tgz", body, before=["truncate"], etag='W/"v1"', ranges=True)
    assert downloader(cache).fetch(url, sha(body)).read_bytes() == body
    assert downloader(cache).fetch(weak, sha(body)).read_bytes() == body
    assert [r for _, r in server.ranges] == [None, None, None, None]


def test_a_resumed_download_that_does_not_match_is_still_refused(server, cache):
    """The sha256 runs across attempts: a resumed body is verified as a whole."""
    body = os.urandom(100_000)
    url = server.serve("/containerd.tar.gz", body, before=["truncate"], etag='"v1"', ranges=True)
    with pytest.raises(ChecksumMismatch):
        downloader(cache).fetch(url, sha(b"another release"))
    assert os.listdir(cache) == []


# ---- fetch_into: a sink reads the body while it arrives ----------------------------------------


class Sink:
    """Keeps what each read_from read, and counts the reads that reached the end; `early`
    is set once it has read that many bytes; `fail` is raised after a whole read."""

    def __init__(self, early=1, fail=None):
        self.reads, self.discards, self.ended, self.fail = [], 0, 0, fail
        self.early, self.got_early = early, threading.Event()

    def read_from(self, body):
        data = bytearray()
        self.reads.append(data)
        while True:
            chunk = body.read(64 << 10)
            if not chunk:
                break
            data += chunk
            if len(data) >= self.early:
                self.got_early.set()
        self.ended += 1
        if self.fail is not None:
            raise self.fail
        return bytes(data)

    def discard(self):
        self.discards += 1


def test_fetch_into_reads_the_body_while_it_arrives(server, cache):
    body, hold = os.urandom(1 << 20), threading.Event()
    url = server.serve("/kubernetes-node.tar.gz", body, hold=hold)
    sink, out = Sink(early=len(body) // 2), {}
    fetching = threading.Thread(target=lambda: out.update(got=downloader(cache).fetch_into(url, sha(body), sink)))
    fetching.start()
    try:
        # The server holds the second half back: the sink has the first half already.
        assert sink.got_early.wait(10), "the sink did not see the first half while the server held the rest"
        assert "got" not in out
    finally:
        hold.set()
        fetching.join(10)
    assert out["got"] == body and len(sink.reads) == 1 and sink.discards == 0
    assert (cache / f"{sha(body)}-kubernetes-node.tar.gz").read_bytes() == body


def test_fetch_into_goes_on_reading_across_a_resume(server, cache):
    body = os.urandom(400_000)
    url = server.serve("/cni.tgz", body, before=["truncate"], etag='"v1"', ranges=True)
    sink = Sink()
    assert downloader(cache).fetch_into(url, sha(body), sink) == body
    assert [r for _, r in server.ranges] == [None, "bytes=200000-"]
    assert len(sink.reads) == 1 and sink.discards == 0, "one read of one body"


def test_fetch_into_reads_again_when_the_download_starts_over(server, cache):
    body = os.urandom(400_000)
    url = server.serve("/runc.amd64", body, before=["truncate"])  # no validator: no Range
    sink = Sink()
    assert downloader(cache).fetch_into(url, sha(body), sink) == body
    assert sink.discards >= 1 and bytes(sink.reads[-1]) == body
    assert all(body.startswith(bytes(read)) for read in sink.reads), "each read from the first byte"


def test_fetch_into_a_body_that_does_not_match_is_discarded_and_never_returned(server, cache):
    body = os.urandom(100_000)
    url = server.serve("/containerd.tar.gz", body)
    sink = Sink()
    with pytest.raises(ChecksumMismatch):
        downloader(cache).fetch_into(url, sha(b"another release"), sink)
    assert sink.discards >= 1 and os.listdir(cache) == []
    assert sink.ended == 0, "no read reached the end: the body never verified"


def test_fetch_into_a_sink_error_is_raised_once_the_body_is_verified(server, cache):
    body = os.urandom(100_000)
    url = server.serve("/cni.tgz", body)
    sink = Sink(fail=ValueError("member bin/evil is a symlink"))
    with pytest.raises(ValueError, match="symlink"):
        downloader(cache).fetch_into(url, sha(body), sink)
    assert sink.discards == 1
    # The body verified, so it is cached: the release is what it is, not the transfer.
    assert downloader(cache).fetch(url, sha(body)).read_bytes() == body and server.count("/cni.tgz") == 1
    # A sink that fails on a body that does not match: the mismatch is what is reported.
    other = server.serve("/other.tgz", body)
    with pytest.raises(ChecksumMismatch):
        downloader(cache).fetch_into(other, sha(b"x"), Sink(fail=ValueError("damaged")))


def test_fetch_into_a_cached_body_is_read_from_the_cache(server, cache):
    body = os.urandom(100_000)
    url = server.serve("/kubelet.tgz", body)
    downloader(cache).fetch(url, sha(body))
    sink = Sink()
    assert downloader(cache).fetch_into(url, sha(body), sink) == body
    assert server.count("/kubelet.tgz") == 1 and sink.discards == 0
    with pytest.raises(ValueError):
        downloader(cache).fetch_into(url, sha(body), Sink(fail=ValueError("bad member")))


def test_fetch_into_a_failed_download_discards_what_the_sink_made(server, cache):
    url = server.serve("/gone.tgz", status=404)
    sink = Sink()
    with pytest.raises(DownloadError, match="HTTP 404"):
        downloader(cache).fetch_into(url, sha(b"x"), sink)
    assert sink.discards >= 1 and [n for n in os.listdir(cache) if n.endswith(".part")] == []


def test_redirect_is_followed(server, cache):
    body = b"release asset"
    server.serve("/objects/asset", body)
    url = server.serve("/releases/download/v1/asset", redirect=server.origin + "/objects/asset")
    assert downloader(cache).fetch(url, sha(body)).name == f"{sha(body)}-asset"


def test_connection_refused_and_timeout_are_temporary(server, cache):
    refused = f"http://127.0.0.1:{closed_port()}/x"
    with pytest.raises(DownloadUnavailable, match="after 2 attempts"):
        downloader(cache, attempts=2).fetch(refused, sha(b"x"))
    # An answer held until the test lets it go, and a 0.2 s timeout: "timed out" is the
    # timeout's doing (nothing else could end the fetch), however slow this machine.
    answer = threading.Event()
    slow = server.serve("/slow", b"x", gate=answer)
    try:
        with pytest.raises(DownloadUnavailable, match="timed out"):
            downloader(cache, attempts=1, timeout=0.2).fetch(slow, sha(b"x"))
    finally:
        answer.set()


def test_concurrent_fetches(server, cache):
    # Answered two at a time only (a barrier, not a delay): downloads one after another
    # never get their answers, and a second download of one artifact would have no partner.
    in_pairs = threading.Barrier(2)
    bodies = {f"/artifact-{i}": os.urandom(50_000 + i) for i in range(4)}
    urls = {p: server.serve(p, b, together=in_pairs) for p, b in bodies.items()}
    d = downloader(cache, timeout=300)
    results, errors = {}, []

    def fetch(path):
        try:
            results.setdefault(path, []).append(d.fetch(urls[path], sha(bodies[path])))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=fetch, args=(p,)) for p in bodies for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and server.apart == []  # different artifacts did download side by side
    for path, body in bodies.items():
        assert [p.read_bytes() for p in results[path]] == [body, body]
        assert server.count(path) == 1  # two threads, one download
    assert sorted(os.listdir(cache)) == sorted(f"{sha(b)}-{p[1:]}" for p, b in bodies.items())


def fetch_all(d, jobs):
    """Fetch every (url, sha256) of `jobs` on its own thread: {url: path or exception}."""
    results = {}

    def fetch(url, digest):
        try:
            results[url] = d.fetch(url, digest)
        except Exception as e:
            results[url] = e

    threads = [threading.Thread(target=fetch, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)  # a ceiling for a broken run: a fetch still going is missing from results
    return results


def test_parallel_downloads_are_bounded(server, cache):
    """Issue 12: the artifacts of a branch download side by side, never more than
    max_parallel at once (six artifacts, three slots: three at a time). The server answers
    a request only once three are in flight at once (a barrier), so downloads one after
    another, or two at a time, never get their answers; more than three at a time shows in
    max_in_flight. The delay only widens the window in which a fourth request would be seen
    in flight: what a correct downloader gets does not depend on it."""
    three_at_once = threading.Barrier(3)
    bodies = {f"/artifact-{i}.tar.gz": os.urandom(20_000 + i) for i in range(6)}
    jobs = [(server.serve(p, b, delay=0.3, together=three_at_once), sha(b)) for p, b in bodies.items()]
    results = fetch_all(downloader(cache, max_parallel=3, timeout=300), jobs)
    assert server.apart == [], "these requests never had two others in flight beside them"
    assert len(results) == 6 and all(not isinstance(r, Exception) for r in results.values()), results
    assert server.max_in_flight == 3


def test_the_default_bound_lets_the_install_branch_artifacts_go_at_once(server, cache):
    """Answered four at a time only (a barrier): a bound below four never gets its answers;
    the delay only widens the window a fifth request in flight would show in."""
    four_at_once = threading.Barrier(download.MAX_PARALLEL)
    bodies = {f"/artifact-{i}.tgz": os.urandom(1000 + i) for i in range(2 * download.MAX_PARALLEL)}
    jobs = [(server.serve(p, b, delay=0.3, together=four_at_once), sha(b)) for p, b in bodies.items()]
    results = fetch_all(downloader(cache, timeout=300), jobs)
    assert server.apart == [], "these requests never had three others in flight beside them"
    assert all(not isinstance(r, Exception) for r in results.values()), results
    assert server.max_in_flight == download.MAX_PARALLEL == 4


def test_a_failed_artifact_is_reported_and_cleaned_while_the_others_land(server, cache):
    """One artifact of four fails its checksum while the others download beside it: its
    error names the URL, nothing of it stays in the cache (no file, no .part), the others
    are complete."""
    good = {f"/good-{i}.tar.gz": os.urandom(30_000 + i) for i in range(3)}
    jobs = [(server.serve(p, b, delay=0.2), sha(b)) for p, b in good.items()]
    bad_url = server.serve("/bad.tar.gz", os.urandom(30_000), delay=0.2)
    jobs.append((bad_url, sha(b"what the checksum file promised")))
    results = fetch_all(downloader(cache), jobs)
    assert isinstance(results[bad_url], ChecksumMismatch)
    assert bad_url in results[bad_url].message
    for path, body in good.items():
        assert results[server.origin + path].read_bytes() == body
    assert sorted(os.listdir(cache)) == sorted(f"{sha(b)}-{p[1:]}" for p, b in good.items())


def test_a_retry_waits_without_holding_a_slot(server, cache, monkeypatch):
    """A download backing off after a 503 leaves its slot to the next artifact. The slow
    download's backoff lasts until the fast one is done (its pause is held open by the test,
    300 s at most): with one slot, the fast download lands during the backoff only if the
    backoff does not hold the slot; if it did, the fast one would come after the retry."""
    slow, fast = os.urandom(1000), os.urandom(1000)
    slow_url = server.serve("/slow.tgz", slow, before=[503])
    fast_url = server.serve("/fast.tgz", fast)
    d = downloader(cache, max_parallel=1, backoff=1.0)
    fast_done = threading.Event()
    worker = threading.Thread(target=d.fetch, args=(slow_url, sha(slow)))
    backoffs = pauses(monkeypatch, thread=worker, instead=lambda _seconds: fast_done.wait(300))
    worker.start()
    assert wait_for(lambda: backoffs, timeout=300), "the slow download never backed off"
    fast_thread = threading.Thread(target=lambda: (d.fetch(fast_url, sha(fast)), fast_done.set()))
    fast_thread.start()
    fast_thread.join(600)
    worker.join(600)
    assert fast_done.is_set(), "the fast download did not land"
    assert backoffs == [1.0]  # one backoff, as long as configured, and the retry after it
    assert [path for path, _, _ in server.requests] == ["/slow.tgz", "/fast.tgz", "/slow.tgz"]
    assert (cache / f"{sha(slow)}-slow.tgz").read_bytes() == slow


def test_bad_arguments_are_rejected(cache, tmp_path):
    d = downloader(cache)
    # each names the field and the value refused
    with pytest.raises(ValueError, match="sha256 = 'abc'"):
        d.fetch("https://example.invalid/x", "abc")
    with pytest.raises(ValueError, match="url = 'ftp://h/x'"):
        d.fetch("ftp://h/x", "0" * 64)
    with pytest.raises(ValueError, match="https_proxy = 'proxy:3128'"):
        downloader(cache, proxy="proxy:3128")
    with pytest.raises(ValueError, match=re.escape(f"ca_bundle = {str(tmp_path / 'nope.pem')!r}")):
        downloader(cache, ca_bundle=str(tmp_path / "nope.pem"))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(ValueError, match=re.escape(f"ca_bundle = {str(junk)!r}")):
        downloader(cache, ca_bundle=str(junk))
    with pytest.raises(ValueError, match="max_parallel = 0"):
        downloader(cache, max_parallel=0)


# ---- proxies ------------------------------------------------------------------------------


@pytest.fixture
def no_proxy_in_process_env(monkeypatch):
    # urllib also consults os.environ's no_proxy; keep the test's outcome independent of it.
    for name in ("no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)


def test_proxy_argument_carries_the_request(server, cache, no_proxy_in_process_env):
    body = b"via proxy"
    server.serve("/pkg.tgz", body)
    # The host name never resolves: only the proxy (our loopback server) is contacted.
    url = "http://artifacts.example.invalid/pkg.tgz"
    assert downloader(cache, proxy=server.origin).fetch(url, sha(body)).read_bytes() == body
    assert server.requests == [("/pkg.tgz", True, server.requests[0][2])]


def test_no_proxy_sends_a_host_direct(server, cache, no_proxy_in_process_env):
    body = b"direct"
    server.serve("/a", body)
    dead_proxy = f"http://127.0.0.1:{closed_port()}"
    downloader(cache, proxy=dead_proxy, no_proxy=("localhost", "127.0.0.1")).fetch(
        server.origin + "/a", sha(body))
    assert server.requests[-1][:2] == ("/a", False)


# ---- https ---------------------------------------------------------------------------------


def _now():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def _tls_server(tmp_path, authority_key_id=True):
    """An https server on 127.0.0.1 with a certificate from a throwaway CA shaped as a public
    or AKS CA issues them; `authority_key_id=False`: a leaf without the Authority Key
    Identifier (RFC 5280 4.2.1.1), as some TLS-inspecting proxies mint them."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test download CA")])
    day = datetime.timedelta(days=1)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(_now() - day).not_valid_after(_now() + day)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                         critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - day).not_valid_after(_now() + day)
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False))
    if authority_key_id:
        leaf = leaf.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False)
    leaf = leaf.sign(ca_key, hashes.SHA256())
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "server.pem").write_bytes(leaf.public_bytes(pem) + key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem")
    s = ArtifactServer(tls=context)
    s.ca_bundle = str(tmp_path / "ca.pem")
    return s


@pytest.fixture
def tls_server(tmp_path):
    s = _tls_server(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def tls_server_without_aki(tmp_path):
    s = _tls_server(tmp_path, authority_key_id=False)
    yield s
    s.stop()


def test_https_with_ca_bundle(tls_server, cache):
    body = b"over tls"
    url = tls_server.serve("/secure.bin", body)
    assert url.startswith("https://")
    d = downloader(cache, ca_bundle=tls_server.ca_bundle)
    assert d.fetch(url, sha(body)).read_bytes() == body


def test_https_untrusted_certificate_is_a_permanent_error(tls_server, cache):
    url = tls_server.serve("/secure.bin", b"x")
    d = downloader(cache, attempts=3)
    with pytest.raises(DownloadError) as caught:
        d.fetch(url, sha(b"x"))
    assert not isinstance(caught.value, TemporaryError)
    assert caught.value.code == "tls-untrusted" and url in caught.value.message
    assert d.policy.trusted() in caught.value.message  # what it was checked against
    assert "ca_bundle" in caught.value.remedy  # the setting that mends it


def test_https_a_leaf_without_authority_key_id(tls_server_without_aki, cache, monkeypatch):
    """The same certificate (no Authority Key Identifier, as TLS-inspecting proxies mint
    them), on every Python (http_policy's "TLS"): trusted through ca_bundle, whose CA the
    operator gave us; refused when its CA stands among the system's (public) CAs, which must
    issue RFC 5280's profile, with what it was checked against and why."""
    body = b"through the proxy"
    url = tls_server_without_aki.serve("/secure.bin", body)
    assert downloader(cache, ca_bundle=tls_server_without_aki.ca_bundle).fetch(url, sha(body)).read_bytes() == body
    # OpenSSL's default verify paths (the system's CAs) are read from SSL_CERT_FILE when set.
    monkeypatch.setenv("SSL_CERT_FILE", tls_server_without_aki.ca_bundle)
    other = cache.parent / "other-cache"
    d = downloader(other)
    with pytest.raises(DownloadError) as caught:
        d.fetch(url, sha(body))
    # the URL, what it was checked against (the system's CAs) and OpenSSL's reason
    assert caught.value.code == "tls-untrusted"
    assert caught.value.message.startswith(f"cannot download {url}:")
    assert caught.value.message.endswith(f"{d.policy.trusted()}: Missing Authority Key Identifier")
    assert not isinstance(caught.value, TemporaryError)
    assert not any(other.iterdir())


# ---- checksum files ------------------------------------------------------------------------

HEX_A, HEX_B, HEX_C = "a" * 64, "b" * 64, "C" * 64


@pytest.mark.parametrize("text, filename, expected", [
    (f"{HEX_A}  runc.amd64\n{HEX_B}  runc.arm64\n", "runc.arm64", HEX_B),
    (f"{HEX_A} *runc.amd64\n{HEX_B} *runc.arm64\n", "runc.amd64", HEX_A),
    (f"{HEX_A}  ./dist/cni.tgz\n{HEX_B}  other\n", "cni.tgz", HEX_A),
    (f"SHA256 (kubelet) = {HEX_C}\n", "kubelet", HEX_C.lower()),
    (f"{HEX_C}\n", "kubelet", HEX_C.lower()),  # dl.k8s.io's bare .sha256 files
    (f"# sums\n\n  {HEX_A}  kubelet  \n", "kubelet", HEX_A),
])
def test_parse_checksums_formats(text, filename, expected):
    assert parse_checksums(text, filename, "https://x/sums") == expected


def test_parse_checksums_only_entry_under_another_name_is_used_with_a_warning(caplog):
    assert parse_checksums(f"{HEX_A}  renamed.tgz\n", "cni.tgz", "u") == HEX_A
    assert "names renamed.tgz, not cni.tgz" in caplog.text


@pytest.mark.parametrize("text, expected", [
    (f"{HEX_A}  a\n{HEX_B}  b\n", "checksum file https://x/sums has no entry for c "
                                   "(it lists a, b)"),
    ("", "checksum file https://x/sums is empty: expected at least one sha256"),
    (f"{HEX_A}  a\n<html>oops</html>\n", "checksum file https://x/sums line 2 is "
                                         "'<html>oops</html>': expected '<sha256>  <file name>'"),
    ("abc123  c\n", "line 1 is 'abc123  c'"),
])
def test_parse_checksums_errors(text, expected):
    with pytest.raises(DownloadError) as caught:
        parse_checksums(text, "c", "https://x/sums")
    assert expected in str(caught.value)


def test_checksum_fetches_parses_and_falls_back_to_its_cached_copy(server, cache, caplog):
    body = b"containerd release"
    sums = f"{sha(body)}  containerd-1.7.tar.gz\n".encode()
    url = server.serve("/containerd-1.7.tar.gz.sha256sum", sums)
    artifact = server.serve("/containerd-1.7.tar.gz", body)
    d = downloader(cache)
    assert d.checksum(url, "containerd-1.7.tar.gz") == sha(body)
    d.fetch(artifact, sha(body))  # the artifact verifies against it: the copy is kept
    server.serve("/containerd-1.7.tar.gz.sha256sum", status=503)  # the mirror goes down
    assert downloader(cache, attempts=2).checksum(url, "containerd-1.7.tar.gz") == sha(body)
    assert any(r.levelname == "WARNING" and url in r.getMessage() and str(cache) in r.getMessage()
               for r in caplog.records)  # the checksum file it could not reach, and the copy used
    other = server.serve("/never-fetched.sha256", status=503)
    with pytest.raises(DownloadUnavailable, match="never-fetched"):
        downloader(cache, attempts=1).checksum(other, "x")


def cached_checksums(cache):
    return sorted(p.name for p in cache.glob("checksums-*")) if cache.is_dir() else []


def test_a_checksum_file_is_cached_only_once_an_artifact_verifies_against_it(server, cache):
    body = b"runc binary"
    wrong = f"{HEX_A}  runc\n".encode()  # names another digest: a bad mirror, a wrong release
    sums = server.serve("/runc.sha256", wrong)
    artifact = server.serve("/runc", body)
    d = downloader(cache)
    digest = d.checksum(sums, "runc")
    assert digest == HEX_A and cached_checksums(cache) == [], "cached before any artifact matched it"
    with pytest.raises(ChecksumMismatch):
        d.fetch(artifact, digest)
    assert cached_checksums(cache) == []
    # Offline now: the bad checksum file was never kept, so it cannot be used again.
    server.serve("/runc.sha256", status=503)
    with pytest.raises(DownloadUnavailable, match="runc.sha256"):
        downloader(cache, attempts=1).checksum(sums, "runc")
    # The mirror is fixed: its checksum file is kept once the artifact matches it.
    server.serve("/runc.sha256", f"{sha(body)}  runc\n".encode())
    d.fetch(artifact, d.checksum(sums, "runc"))
    assert len(cached_checksums(cache)) == 1


def test_a_cached_checksum_file_the_artifact_does_not_match_is_removed(server, cache):
    """A copy cached by an older release (which kept it before verifying) and found wrong."""
    sums = server.serve("/cni.sha256", status=503)
    artifact = server.serve("/cni.tgz", b"cni plugins")
    key = hashlib.sha256(sums.encode()).hexdigest()[:16]
    cache.mkdir(parents=True)
    (cache / f"checksums-{key}-cni.sha256").write_bytes(f"{HEX_B}  cni.tgz\n".encode())
    d = downloader(cache, attempts=1)
    digest = d.checksum(sums, "cni.tgz")
    assert digest == HEX_B
    with pytest.raises(ChecksumMismatch):
        d.fetch(artifact, digest)
    assert cached_checksums(cache) == []


def test_checksum_file_that_is_not_text_or_too_big(server, cache):
    url = server.serve("/bin.sha256", b"\xff\xfe\x00binary")
    with pytest.raises(DownloadError) as caught:
        downloader(cache).checksum(url, "x")
    assert caught.value.code == "checksum-not-text" and url in caught.value.message
    url = server.serve("/huge.sha256", b"a" * (1024 * 1024 + 1))
    with pytest.raises(DownloadError) as caught:
        downloader(cache).checksum(url, "x")
    assert caught.value.code == "checksum-too-large" and url in caught.value.message
    assert "1048576" in caught.value.message  # the limit


def test_the_run_policy_decides_and_the_environment_is_ignored(server, cache, monkeypatch):
    body = b"policy"
    server.serve("/p", body)
    dead_proxy = f"http://127.0.0.1:{closed_port()}"
    # The process environment says "dead proxy": a downloader with a policy does not read it.
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, dead_proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    through = Downloader(cache, policy=HttpPolicy(https_proxy=server.origin), backoff=0.01)
    through.fetch("http://mirror.example.invalid/p", sha(body))
    assert server.requests[-1][:2] == ("/p", True)
    # A CIDR in no_proxy (which urllib alone does not understand) makes it direct.
    direct = Downloader(cache / "2", policy=HttpPolicy(https_proxy=dead_proxy, no_proxy=("127.0.0.0/8",)),
                        backoff=0.01)
    direct.fetch(server.origin + "/p", sha(body))
    assert server.requests[-1][:2] == ("/p", False)


def test_a_bad_proxy_is_reported_without_its_password(cache):
    with pytest.raises(ValueError) as caught:
        downloader(cache, proxy="user:s3cret@proxy:3128")
    assert "s3cret" not in str(caught.value) and "***@proxy:3128" in str(caught.value)


def test_a_partial_download_a_killed_run_left_is_removed_and_a_live_one_kept(server, cache):
    url = server.serve("/kubernetes-node.tar.gz", b"node binaries")
    cache.mkdir(parents=True)
    dead = cache / ".download-4194999.k1ll3d_x.part"  # above any pid_max: no such process
    live = cache / f".download-{os.getpid()}.inflight.part"  # another thread of this run
    for part in (dead, live):
        part.write_bytes(b"half a tarball")
    downloader(cache).fetch(url, sha(b"node binaries"))
    assert not dead.exists() and live.exists()
    assert sorted(p.name for p in cache.iterdir() if p.name.endswith(".part")) == [live.name]


@pytest.fixture
def full_cache(tmp_path):
    """A cache directory on a 64 KiB tmpfs (root only: it mounts one)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mount)], check=True)
    try:
        yield mount / "var/cache/aks-flex-node"
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_cache_file_system_is_an_error_naming_the_file_and_what_to_do(server, full_cache):
    body = os.urandom(300_000)  # more than the file system holds
    url = server.serve("/kubernetes-node.tar.gz", body)
    with pytest.raises(DownloadError) as caught:
        downloader(full_cache).fetch(url, sha(body))
    message = str(caught.value)
    # the URL, the file it was writing in the cache, and the system's reason
    assert caught.value.code == "cache-write"
    assert url in message and f"{full_cache}/.download-" in message and "No space left on device" in message
    assert "cache_dir" in caught.value.remedy and str(full_cache) in caught.value.remedy
    assert caught.value.exit_code == ExitCode.FAILED
    assert os.listdir(full_cache) == [], "the part file is removed"
    assert server.count("/kubernetes-node.tar.gz") == 1, "a full disk is not retried"
