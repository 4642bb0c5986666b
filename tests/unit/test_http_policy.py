"""The one HTTP policy: no_proxy matching (Go's rules), what the services and the Arc agent get."""

import http.server
import subprocess
import sys
import threading

import pytest

from aks_flex_node.clouds import CloudEndpoints
from aks_flex_node.http_policy import HttpPolicy, ProxySettingError, redact

PROXY = "http://proxy.example:3128"


@pytest.mark.parametrize("no_proxy, url, bypassed", [
    # A domain matches itself and its subdomains; .domain and *.domain only subdomains
    # (golang.org/x/net/http/httpproxy, the code containerd and the kubelet run).
    ("example.com", "https://example.com/x", True),
    ("example.com", "https://a.b.example.com", True),
    ("example.com", "https://notexample.com", False),
    (".example.com", "https://example.com", False),
    (".example.com", "https://a.example.com", True),
    ("*.example.com", "https://example.com", False),
    ("*.example.com", "https://a.example.com", True),
    ("EXAMPLE.com", "https://a.Example.COM", True),
    # IPs and CIDRs: what Python's urllib and curl do not understand.
    ("10.0.0.0/8", "https://10.1.2.3:6443", True),
    ("10.0.0.0/8", "https://11.1.2.3", False),
    ("10.0.0.0/8", "https://ten.example", False),
    ("fd00::/8", "https://[fd00::1]:443", True),
    ("192.168.1.5", "https://192.168.1.5", True),
    ("192.168.1.5", "https://192.168.1.6", False),
    # A port narrows the entry; the scheme's default port counts.
    ("example.com:8443", "https://example.com:8443", True),
    ("example.com:8443", "https://example.com", False),
    ("example.com:443", "https://example.com", True),
    ("127.0.0.1:5000", "http://127.0.0.1:5000/a", True),
    ("127.0.0.1:5000", "http://127.0.0.1:5001/a", False),
    ("*", "https://anything.example", True),
    ("", "https://management.azure.com", False),
    # Loopback is not special for our own clients: only no_proxy exempts it.
    ("", "https://127.0.0.1:8443", False),
    ("localhost", "https://localhost:8443", True),
])
def test_no_proxy_matches_as_go_does(no_proxy, url, bypassed):
    policy = HttpPolicy(https_proxy=PROXY, no_proxy=no_proxy)
    assert policy.bypasses(url) is bypassed
    assert policy.proxy_for(url) == (None if bypassed else PROXY)


def test_no_proxy_from_a_list_or_a_string():
    assert HttpPolicy(PROXY, ["a.example", " 10.0.0.0/8 "]).no_proxy == ("a.example", "10.0.0.0/8")
    assert HttpPolicy(PROXY, "a.example,,b.example").no_proxy == ("a.example", "b.example")


def test_without_a_proxy_everything_is_direct():
    policy = HttpPolicy(no_proxy=("example.com",))
    assert policy.proxy_for("https://management.azure.com") is None
    assert policy.proxies_for("https://management.azure.com") == {}
    assert policy.sdk_options("https://management.azure.com") == {"use_env_settings": False}
    assert policy.service_environment() == [] and policy.environment_file() is None


def test_sdk_options_never_read_the_environment():
    policy = HttpPolicy(PROXY, ("login.example",), ca_bundle="/etc/ssl/ca.pem")
    assert policy.sdk_options("https://management.azure.com") == {
        "use_env_settings": False, "proxies": {"http": PROXY, "https": PROXY},
        "connection_verify": "/etc/ssl/ca.pem"}
    assert "proxies" not in policy.sdk_options("https://login.example")


@pytest.mark.parametrize("url, shown", [
    ("http://user:p%40ss@proxy:3128", "http://***@proxy:3128"),
    ("http://user:pass@proxy:3128/path@x", "http://***@proxy:3128/path@x"),
    ("user:pass@proxy:3128", "***@proxy:3128"),
    ("http://proxy:3128", "http://proxy:3128"),
    (None, None),
])
def test_redact(url, shown):
    assert redact(url) == shown


def test_repr_hides_the_password():
    assert "secret" not in repr(HttpPolicy("http://u:secret@proxy:3128"))


def test_environment_file_for_go_services():
    policy = HttpPolicy("http://u:p%40ss@proxy:3128", ("10.0.0.0/8", "localhost"))
    text = policy.environment_file("cluster.local").decode()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    no_proxy = "10.0.0.0/8,localhost,127.0.0.1,::1,.svc,.cluster.local"
    assert lines == [
        "HTTPS_PROXY='http://u:p%40ss@proxy:3128'", "https_proxy='http://u:p%40ss@proxy:3128'",
        "HTTP_PROXY='http://u:p%40ss@proxy:3128'", "http_proxy='http://u:p%40ss@proxy:3128'",
        f"NO_PROXY='{no_proxy}'", f"no_proxy='{no_proxy}'"]


def test_environment_file_refuses_what_systemd_cannot_read_verbatim():
    with pytest.raises(ProxySettingError) as caught:
        HttpPolicy("http://u:it's@proxy:3128").environment_file()
    assert "https_proxy = 'http://***@proxy:3128'" in str(caught.value)
    assert "it's" not in str(caught.value)


ENDPOINTS = CloudEndpoints("AzurePublicCloud", "https://management.azure.com",
                           "https://login.microsoftonline.com", "https://management.azure.com/.default")


@pytest.mark.parametrize("no_proxy, bypass", [
    ((), []),
    ((".azure.com",), ["ARM", "Arc"]),
    (("login.microsoftonline.com", "management.azure.com"), ["AAD", "ARM"]),
    (("his.arc.azure.com",), ["Arc"]),
])
def test_azcmagent_proxy_and_bypass_service_names(no_proxy, bypass):
    assert HttpPolicy(PROXY, no_proxy).azcmagent_proxy(ENDPOINTS) == (PROXY, bypass)


def test_azcmagent_cannot_take_credentials_or_a_tls_proxy():
    assert HttpPolicy().azcmagent_proxy(ENDPOINTS) == (None, [])
    with pytest.raises(ProxySettingError, match=r"https_proxy = 'http://\*\*\*@proxy:3128'.*authentication"):
        HttpPolicy("http://u:secret@proxy:3128").azcmagent_proxy(ENDPOINTS)
    with pytest.raises(ProxySettingError, match="TLS"):
        HttpPolicy("https://proxy:3128").check_for_azcmagent()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A loopback HTTP server that answers any GET and records whether it came as a proxy
    request (absolute URL in the request line)."""

    seen = []

    def do_GET(self):
        type(self).seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_opener_goes_through_the_proxy_unless_no_proxy_says_otherwise(recorder, monkeypatch):
    # An environment proxy would send the direct call elsewhere: the opener never reads it.
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    policy = HttpPolicy(https_proxy=recorder, no_proxy=("127.0.0.1",))
    url = "http://unresolvable.example.invalid/a"
    assert policy.opener(url).open(url, timeout=5).read() == b"ok"
    assert _Recorder.seen[-1] == url  # a proxy request: the absolute URL
    assert policy.opener(recorder + "/b").open(recorder + "/b", timeout=5).read() == b"ok"
    assert _Recorder.seen[-1] == "/b"  # direct: no_proxy covers 127.0.0.1


def test_importing_it_pulls_no_azure_sdk():
    code = ("import sys, aks_flex_node.http_policy; "
            "print(any(m.split('.')[0] == 'azure' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
