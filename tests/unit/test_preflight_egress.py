"""Preflight names what a restricted network lacks (issue 28, point 4; egress.py): per join
mode, each endpoint a join needs is probed as its client reaches it (the run's HttpPolicy),
once per run, and each one missing is one error naming its purpose, its URL, whether the
proxy was used and the host names to allow; --ignore-preflight-errors ignores them as the
other checks' errors. Against a loopback HTTPS server and a real restricted proxy (Debian's
tinyproxy with a deny-by-default filter, as an egress proxy with an allow list): no probe
leaves loopback."""

import http.server
import shutil
import ssl
import threading

import pytest

from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.errors import ExitCode
from aks_flex_node.host.root import Host
from aks_flex_node.http_policy import DIRECT, HttpPolicy
from aks_flex_node.steps.context import JoinContext
from aks_flex_node.steps.preflight import checks as preflight
from aks_flex_node.steps.preflight import egress
from tests import config_fixtures as cf
from tests.emulator import tls
from tests.proxy_fixtures import TINYPROXY, Tinyproxy, free_port

CA_NODE_PATH = "/etc/aks-flex-node/test-ca.pem"
EGRESS_CHECKS = ("azure-endpoints", "arc-services", "cluster-api", "artifact-hosts", "image-registry")


class Server:
    """HTTPS on 127.0.0.1 answering 404 to everything (an answer is all a probe asks);
    `mode = "drop"` closes each connection without a word instead."""

    def __init__(self, paths):
        outer = self
        self.requests = []
        self.mode = "answer"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                self.send_error(404)

            def log_message(self, *args):
                pass

        class Dropping(http.server.ThreadingHTTPServer):
            def finish_request(self, request, client_address):
                if outer.mode == "drop":
                    request.close()
                    return
                super().finish_request(request, client_address)

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(paths["cert"], paths["key"])
        self.httpd = Dropping(("127.0.0.1", 0), Handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def pki(tmp_path):
    (tmp_path / "pki").mkdir()
    _ca, paths = tls.ensure_pki(tmp_path / "pki")
    return paths


@pytest.fixture
def server(pki):
    s = Server(pki)
    yield s
    s.close()


@pytest.fixture
def proxy(tmp_path):
    if TINYPROXY is None:
        pytest.skip("tinyproxy is not installed (Debian package tinyproxy-bin)")
    p = Tinyproxy(str(tmp_path), only_loopback=True)
    yield p
    p.stop()


def closed_port():
    """A port nothing listens on (bound, then released)."""
    return free_port()


def context(tmp_path, pki, files=(), **values):
    """A run's context for a configuration of the Arc mode with `values` (a scratch root
    holding the CA at CA_NODE_PATH, and each (source, node path, mode) of `files`)."""
    root = cf.make_root(tmp_path)
    for source, node_path, mode in ((pki["ca"], CA_NODE_PATH, 0o644), *files):
        target = root / node_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
        target.chmod(mode)
    cfg = cf.load(root, cf.with_values(**values))
    return JoinContext(cfg, Host(root=str(root), env={"PATH": "/usr/bin:/bin"}), None)


def emulated(server, **values):
    """Azure, the mirror and the registry all at `server` (one origin), unless `values` say."""
    address = server.url.split("://", 1)[1]
    return {"cloud": "custom", "arm_endpoint": server.url, "authority_host": server.url, "ca_bundle": CA_NODE_PATH,
            "artifact_mirror": server.url + "/artifacts", "pause_image": f"{address}/oss/kubernetes/pause:3.9",
            **values}


def egress_results(ctx, ignored=()):
    return [r for r in preflight.run_checks(ctx, ignored) if r.name in EGRESS_CHECKS]


# ---- what each join mode needs ------------------------------------------------------------------

def public(tmp_path, **values):
    root = cf.make_root(tmp_path)
    return cf.load(root, cf.with_values(**values))


def hosts(endpoints):
    return [endpoint.allow[0] for endpoint in endpoints]


def test_each_join_mode_needs_its_endpoints(tmp_path):
    cfg = public(tmp_path)
    assert hosts(egress.wanted(cfg, JoinMode.ARC, DIRECT)) == [
        "management.azure.com", "login.microsoftonline.com", "gbl.his.arc.azure.com",
        "dl.k8s.io", "github.com", "mcr.microsoft.com"]
    assert hosts(egress.wanted(cfg, JoinMode.AGENT_POOL, DIRECT)) == [
        "management.azure.com", "login.microsoftonline.com", "dl.k8s.io", "github.com", "mcr.microsoft.com"]
    assert hosts(egress.wanted(cfg, JoinMode.BOOTSTRAP_TOKEN, DIRECT)) == ["dl.k8s.io", "github.com", "mcr.microsoft.com"]


def test_the_hosts_to_allow_name_where_a_client_is_sent_on(tmp_path):
    """A redirect of a download, a registry's data endpoint, the Arc agent's other services:
    the firewall must let those through too."""
    by_host = {e.allow[0]: e for e in egress.wanted(public(tmp_path), JoinMode.ARC, DIRECT)}
    assert by_host["dl.k8s.io"].allow == ("dl.k8s.io", "cdn.dl.k8s.io")
    # containerd, runc and the CNI plugins come from one host: one endpoint, probed once.
    github = by_host["github.com"]
    assert github.allow == ("github.com", "objects.githubusercontent.com", "release-assets.githubusercontent.com")
    assert all(key in github.purpose for key in ("containerd_url", "runc_url", "cni_url"))
    assert by_host["mcr.microsoft.com"].allow == ("mcr.microsoft.com", "*.data.mcr.microsoft.com",
                                                  "mcr-0001.mcr-msedge.net")
    assert by_host["mcr.microsoft.com"].url == "https://mcr.microsoft.com/v2/"
    assert {"*.his.arc.azure.com", "*.guestconfiguration.azure.com", "guestnotificationservice.azure.com",
            "azgn*.servicebus.windows.net"} <= set(by_host["gbl.his.arc.azure.com"].allow)


def test_each_cloud_has_its_arc_endpoint_and_a_custom_one_none(tmp_path):
    assert hosts(egress.arc_endpoints({"cloud": "AzureUSGovernment"})) == ["gbl.his.arc.azure.us"]
    assert hosts(egress.arc_endpoints({"cloud": "AzureChinaCloud"})) == ["gbl.his.arc.azure.cn"]
    assert egress.arc_endpoints({"cloud": "custom"}) == []


def test_a_mirror_replaces_the_download_hosts_and_a_local_one_is_not_probed():
    assert [(e.url, e.allow) for e in egress.artifact_endpoints({"artifact_mirror": "https://mirror.example:8443/aks"})] \
        == [("https://mirror.example:8443/aks", ("mirror.example",))]
    assert egress.artifact_endpoints({"artifact_mirror": "file:///media/usb/aks-flex-node"}) == []


def test_registry_mirrors_are_probed_instead_of_the_registry():
    pause = {"pause_image": "mcr.microsoft.com/oss/kubernetes/pause:3.9"}
    mirrored = egress.registry_endpoints({**pause, "registry_mirrors": ["mcr.microsoft.com=https://registry.example:5000"]},
                                         DIRECT)
    assert [(e.url, e.allow) for e in mirrored] == [("https://registry.example:5000/v2/", ("registry.example",))]
    # `_default` mirrors every registry no other item names.
    other = egress.registry_endpoints({**pause, "registry_mirrors": ["docker.io=https://hub.example",
                                                                     "_default=https://all.example"]}, DIRECT)
    assert [e.url for e in other] == ["https://all.example/v2/"]
    # Without the key (a configuration before registry mirrors), the registry itself.
    assert [e.url for e in egress.registry_endpoints(pause, DIRECT)] == ["https://mcr.microsoft.com/v2/"]
    # docker.io's API is registry-1.docker.io; a name without a dot is on docker.io.
    assert [e.url for e in egress.registry_endpoints({"pause_image": "library/pause:3.9"}, DIRECT)] \
        == ["https://registry-1.docker.io/v2/"]


def test_the_registry_is_reached_as_containerd_reaches_it():
    """containerd's environment skips the proxy for the node itself (HttpPolicy.service_no_proxy):
    a registry on loopback is probed directly, another through the proxy."""
    policy = HttpPolicy(https_proxy="http://proxy.example:3128")
    local, = egress.registry_endpoints({"pause_image": "127.0.0.1:5000/pause:3.9"}, policy)
    remote, = egress.registry_endpoints({"pause_image": "registry.example/pause:3.9"}, policy)
    assert local.policy.proxy_for(local.url) is None
    assert remote.policy.proxy_for(remote.url) == "http://proxy.example:3128"


# ---- probing ----------------------------------------------------------------------------------

def test_a_refused_registry_is_one_error_naming_the_hosts_to_allow(tmp_path, pki, server):
    port = closed_port()
    ctx = context(tmp_path, pki, **emulated(server, pause_image=f"127.0.0.1:{port}/oss/kubernetes/pause:3.9"))
    results = egress_results(ctx)
    assert {r.name: r.status for r in results} == {"azure-endpoints": "pass", "arc-services": "pass", "cluster-api": "pass",
                                                   "artifact-hosts": "pass", "image-registry": "error"}
    failed, = [r for r in results if r.status == "error"]
    assert f"https://127.0.0.1:{port}/v2/" in failed.message and "directly" in failed.message
    assert "127.0.0.1" in failed.remedy and not failed.transient
    with pytest.raises(preflight.PreflightError) as caught:
        preflight.raise_for(results)
    assert caught.value.exit_code == ExitCode.PREFLIGHT


def test_each_missing_endpoint_is_its_own_error(tmp_path, pki, server):
    """The mirror and the registry both refused: two errors, each naming its own."""
    mirror, registry = closed_port(), closed_port()
    ctx = context(tmp_path, pki, **emulated(server, artifact_mirror=f"https://127.0.0.1:{mirror}/aks",
                                            pause_image=f"127.0.0.1:{registry}/pause:3.9"))
    failed = [r for r in egress_results(ctx) if r.status == "error"]
    assert [(r.name, str(mirror) in r.message, str(registry) in r.message) for r in failed] == [
        ("artifact-hosts", True, False), ("image-registry", False, True)]


def test_one_origin_is_probed_once_whichever_checks_ask(tmp_path, pki, server):
    """ARM, Entra ID, the mirror and the registry on one server: one request for them all."""
    ctx = context(tmp_path, pki, **emulated(server))
    assert all(r.status == "pass" for r in egress_results(ctx))
    assert len(server.requests) == 1


def test_a_dropped_connection_that_lasts_is_transient(tmp_path, pki, server):
    server.mode = "drop"
    ctx = context(tmp_path, pki, **emulated(server))
    results = egress_results(ctx)
    failed = [r for r in results if r.status == "error"]
    # ARM and Entra ID (one origin, one probe) are two endpoints; the mirror and the registry two more.
    assert [r.name for r in failed] == ["azure-endpoints", "azure-endpoints", "artifact-hosts", "image-registry"]
    assert all(r.transient for r in failed)
    with pytest.raises(preflight.PreflightTransientError) as caught:
        preflight.raise_for(failed)
    assert caught.value.exit_code == ExitCode.TEMPFAIL


def test_ignored_as_the_other_checks(tmp_path, pki, server):
    ctx = context(tmp_path, pki, **emulated(server, pause_image=f"127.0.0.1:{closed_port()}/pause:3.9"))
    assert "image-registry" in preflight.parse_ignored("image-registry,artifact-hosts,arc-services")
    results = egress_results(ctx, preflight.parse_ignored("image-registry"))
    assert {r.name: r.status for r in results}["image-registry"] == "ignored"
    preflight.raise_for(results)  # nothing left to stop the run


def test_through_a_restricted_proxy_arc_mode_names_what_to_allow(tmp_path, pki, proxy):
    """The public cloud's endpoints through an egress proxy that allows none of them: each is
    named as reached through the proxy, with its hosts; each host is asked for once."""
    ctx = context(tmp_path, pki, https_proxy=proxy.url, artifact_mirror="file:///media/usb/aks-flex-node")
    results = egress_results(ctx)
    failed = {}
    for r in results:
        failed.setdefault(r.name, []).append(r)
    assert {name: [r.status for r in rs] for name, rs in failed.items()} == {
        "azure-endpoints": ["error", "error"], "arc-services": ["error"], "cluster-api": ["pass"],
        "artifact-hosts": ["pass"], "image-registry": ["error"]}
    arc, = failed["arc-services"]
    assert "https://gbl.his.arc.azure.com/" in arc.message and proxy.url in arc.message and "403" in arc.message
    assert "gbl.his.arc.azure.com" in arc.remedy and "*.his.arc.azure.com" in arc.remedy
    assert not arc.transient
    registry, = failed["image-registry"]
    assert "mcr.microsoft.com" in registry.remedy and "*.data.mcr.microsoft.com" in registry.remedy
    assert "management.azure.com" in failed["azure-endpoints"][0].remedy
    assert "login.microsoftonline.com" in failed["azure-endpoints"][1].remedy
    assert sorted(proxy.connects()) == sorted(["management.azure.com:443", "login.microsoftonline.com:443",
                                               "gbl.his.arc.azure.com:443", "mcr.microsoft.com:443"])


def test_through_a_restricted_proxy_what_it_allows_passes(tmp_path, pki, server, proxy):
    """Azure, the mirror and a registry on the allowed host answer through the proxy; a
    registry it filters is the one error, named as reached through the proxy."""
    ctx = context(tmp_path, pki, **emulated(server, https_proxy=proxy.url,
                                            pause_image="registry.blocked.example/pause:3.9"))
    results = egress_results(ctx)
    assert {r.name: r.status for r in results} == {"azure-endpoints": "pass", "arc-services": "pass", "cluster-api": "pass",
                                                   "artifact-hosts": "pass", "image-registry": "error"}
    registry, = [r for r in results if r.status == "error"]
    assert proxy.url in registry.message and "registry.blocked.example" in registry.remedy
    address = server.url.split("://", 1)[1]
    assert sorted(proxy.connects()) == sorted([address, "registry.blocked.example:443"])


def test_a_mirrored_registry_is_probed_at_its_mirror_with_its_ca(tmp_path, pki, server):
    """registry_mirrors names a mirror for the pause image's registry: the mirror is asked
    (with registry_ca_file, its own CA), never mcr.microsoft.com, which nothing here reaches."""
    (tmp_path / "mirror-pki").mkdir()
    _ca, mirror_pki = tls.ensure_pki(tmp_path / "mirror-pki")  # a CA ca_bundle does not hold
    mirror = Server(mirror_pki)
    try:
        ctx = context(tmp_path, pki, files=[(mirror_pki["ca"], "/etc/aks-flex-node/registry-ca.crt", 0o644)], **emulated(server, pause_image="mcr.microsoft.com/oss/kubernetes/pause:3.9",
                                                registry_mirrors=f"mcr.microsoft.com={mirror.url}",
                                                registry_ca_file="/etc/aks-flex-node/registry-ca.crt"))
        results = egress_results(ctx)
        assert {r.name: r.status for r in results}["image-registry"] == "pass", results
        assert mirror.requests == ["/v2/"]
    finally:
        mirror.close()


def test_an_api_server_that_refuses_is_named_with_its_host(tmp_path, pki, server):
    """bootstrap-token mode: no Azure; the API server the configuration names, the mirror
    and the registry. The API server refuses: one error naming it and its host."""
    token = tmp_path / "token"
    token.write_text("abcdef.0123456789abcdef\n")
    port = closed_port()
    values = emulated(server, join_mode="bootstrap-token", api_server=f"https://127.0.0.1:{port}",
                      bootstrap_token_file="/etc/aks-flex-node/bootstrap-token", cluster_ca_file=CA_NODE_PATH)
    ctx = context(tmp_path, pki, files=[(str(token), "/etc/aks-flex-node/bootstrap-token", 0o600)], **values)
    results = egress_results(ctx)
    assert {r.name: r.status for r in results} == {"azure-endpoints": "pass", "arc-services": "pass",
                                                   "cluster-api": "error", "artifact-hosts": "pass",
                                                   "image-registry": "pass"}
    failed, = [r for r in results if r.status == "error"]
    assert f"https://127.0.0.1:{port}/readyz" in failed.message and "directly" in failed.message
    assert "127.0.0.1" in failed.remedy and not failed.transient
