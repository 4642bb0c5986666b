"""A join through a real HTTP proxy (Debian's tinyproxy on loopback), issue 9 defect 8;
and (defect 6) the Arc agent's token files a killed run left behind.

Every HTTP path of ours takes the config's https_proxy unless no_proxy covers the host:
ARM and Entra (the SDK clients and the credential), the API server (the kube client) and
the Arc agent (its own proxy.url setting) show up as CONNECTs in the proxy's log; the
artifacts, reached under a name listed in no_proxy, never do. containerd and the kubelet get
the proxy through systemd drop-ins, removed again when the config drops the proxy. The
process environment's proxy variables point at a dead port: nothing of ours reads them.
"""

import os
import urllib.parse

import pytest

from tests import harness
from tests.proxy_fixtures import TINYPROXY, Tinyproxy, free_port

UNITS = ("containerd", "kubelet")


@pytest.fixture
def proxy(tmp_path):
    if TINYPROXY is None:
        pytest.skip("tinyproxy is not installed (Debian package tinyproxy-bin)")
    p = Tinyproxy(str(tmp_path))
    yield p
    p.stop()


def host_port(url):
    parts = urllib.parse.urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def restarts_of(node, unit):
    return len([a for a in node.fake.calls("systemctl") if a[1:] == ["restart", f"{unit}.service"]])


def configure(node, **extra):
    harness.write_config(node.root, node.emu, node.wrapper, extra=extra)


def proxied_node(node, proxy):
    """The node's config names the proxy; the artifacts are reached as `localhost`, which
    no_proxy lists (the same emulator port as ARM under another name)."""
    main = urllib.parse.urlsplit(node.emu.arm)
    mirror = f"https://localhost:{main.port}/artifacts"
    if node.emu.routed:
        pytest.skip("the authority is the public cloud's, routed to the emulator inside our processes only "
                    "(azure-identity 1.7.0: tests/sitehook/emulator_routes.py); tinyproxy would resolve "
                    f"{node.emu.authority} through the machine's DNS")
    configure(node, https_proxy=proxy.url, no_proxy="localhost", artifact_mirror=mirror)
    # An environment proxy that leads nowhere, and no NO_PROXY: the config is the only source.
    dead = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in node.env.items() if k.lower() != "no_proxy"}
    env.update({name: dead for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")})
    node.env = env
    return mirror


def test_a_join_goes_through_the_proxy_except_for_no_proxy_hosts(node, proxy):
    mirror = proxied_node(node, proxy)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["state"] == "succeeded"

    connects = proxy.connects()
    arm, apiserver = host_port(node.emu.arm), host_port(node.emu.apiserver)
    assert host_port(node.emu.entra) == arm  # the emulator serves Entra and ARM on one port
    assert arm in connects and apiserver in connects, connects
    assert host_port(mirror) not in connects and not any(c.startswith("localhost") for c in connects)
    assert set(connects) <= {arm, apiserver}, connects
    # The artifacts were fetched all the same: directly.
    downloads = [r for r in node.emu.requests(path_contains="/artifacts/") if not r["path"].endswith(".sha256")]
    assert len(downloads) == 4

    # The Arc agent: its own proxy setting, used for its calls (no bypass: localhost is not Azure).
    assert node.fake.fake_state("azcmagent-config.json") == {"proxy.url": proxy.url}
    assert node.fake.fake_state("azcmagent.json")["proxy"] == proxy.url
    set_calls = [argv for argv in node.fake.calls("azcmagent") if argv[1:3] == ["config", "set"]]
    connect_at = [i for i, argv in enumerate(node.fake.calls("azcmagent")) if argv[1] == "connect"]
    assert set_calls == [["azcmagent", "config", "set", "proxy.url", proxy.url]]
    assert node.fake.calls("azcmagent").index(set_calls[0]) < connect_at[0]

    # containerd and the kubelet: a drop-in naming a 0600 environment file.
    for unit in UNITS:
        directory = f"/etc/systemd/system/{unit}.service.d"
        dropin = node.read(f"{directory}/aks-flex-node-proxy.conf").decode()
        assert f"EnvironmentFile={directory}/aks-flex-node-proxy.env" in dropin
        assert node.mode(f"{directory}/aks-flex-node-proxy.conf") == 0o644
        assert node.mode(f"{directory}/aks-flex-node-proxy.env") == 0o600
        env = node.read(f"{directory}/aks-flex-node-proxy.env").decode()
        assert f"HTTPS_PROXY='{proxy.url}'" in env and f"http_proxy='{proxy.url}'" in env
        assert "NO_PROXY='localhost,127.0.0.1,::1,.svc,.cluster.local'" in env

    # Again: nothing to change, no setting rewritten.
    proc, again = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    assert {p["name"]: p["changes"] for p in again["phases"] if p["changes"]} == {}


def test_dropping_the_proxy_removes_it_everywhere(node, proxy):
    proxied_node(node, proxy)
    node.cli("bootstrap", check=True)
    restarts = {u: restarts_of(node, u) for u in UNITS}
    configure(node)  # no https_proxy any more
    before = len(proxy.connects())
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(proxy.connects()) == before, "nothing went through the proxy"
    for unit in UNITS:
        directory = f"/etc/systemd/system/{unit}.service.d"
        assert not os.path.exists(node.path(f"{directory}/aks-flex-node-proxy.conf"))
        assert not os.path.exists(node.path(f"{directory}/aks-flex-node-proxy.env"))
        assert restarts_of(node, unit) == restarts[unit] + 1, f"{unit} restarted once to drop the proxy"
    assert not os.path.exists(node.path("/etc/systemd/system/containerd.service.d"))
    assert node.fake.fake_state("azcmagent-config.json") == {}


def test_unbootstrap_removes_the_drop_ins_and_the_agent_setting(node, proxy):
    before = node.files()
    proxied_node(node, proxy)
    node.cli("bootstrap", check=True)
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["leftovers"] == []
    ours = {p for p in node.files() - before
            if not p.startswith("/var/lib/aks-flex-node") and not p.startswith("/etc/aks-flex-node")}
    assert ours == set(), sorted(ours)
    assert node.fake.fake_state("azcmagent-config.json") == {}


def test_a_proxy_with_a_password_is_refused_before_anything_changes(node, proxy):
    before = node.files()
    secret = "pr0xy-s3cret"
    # Where the suite routes the public authority's name to the emulator (azure-identity 1.7.0),
    # that name goes in no_proxy: through tinyproxy it would be looked up in the machine's DNS.
    routed = {"no_proxy": urllib.parse.urlsplit(node.emu.authority).hostname} if node.emu.routed else {}
    configure(node, https_proxy=f"http://user:{secret}@127.0.0.1:{proxy.port}", **routed)
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "https_proxy = 'http://***@127.0.0.1" in output and "authentication" in output
    assert secret not in output
    new = node.files() - before
    assert {p for p in new if not p.startswith("/var/lib/aks-flex-node")} == set(), sorted(new)
    assert not any(argv[1] == "config" for argv in node.fake.calls("azcmagent"))
    assert proxy.connects() == []


def test_a_token_file_left_by_a_killed_run_is_removed_by_the_next_one(node):
    """kill -9 during `azcmagent connect` skips the `finally` that removes its 0600 token
    file: the next run's arc phase removes such leftovers (ours by name, files only)."""
    node.cli("bootstrap", check=True)
    run_dir = node.path("/run/aks-flex-node")
    os.makedirs(run_dir, exist_ok=True)
    leftover = os.path.join(run_dir, "azcmagent-" + "0" * 32 + ".json")
    with open(os.open(leftover, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write('{"access-token": "emuat.left-behind"}')
    stranger = os.path.join(run_dir, "azcmagent-keep.json")
    open(stranger, "w").close()
    proc, summary = node.cli_json("bootstrap", "--dry-run")
    assert os.path.exists(leftover), "a dry run removes nothing"
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [arc] = [p for p in summary["phases"] if p["name"] == "arc"]
    assert [c["what"] for c in arc["changes"]] == [
        "remove 1 leftover azcmagent token file(s) from /run/aks-flex-node"]
    assert not os.path.exists(leftover) and os.path.exists(stranger)
