"""Scenario: a node joined on Debian 12 is upgraded to Debian 13 as an operator does it.

A bookworm node installs the package from the repository and joins (Arc machine, Node
Ready). Then Debian's documented procedure (trixie's release notes, chapter 4, "Upgrades
from Debian 12 (bookworm)": https://www.debian.org/releases/trixie/release-notes/upgrading.html):
the APT sources switched from bookworm to trixie, `apt-get update`, the minimal upgrade
(`upgrade --without-new-pkgs`), `full-upgrade`, all non-interactive, then a reboot (the
container powered off and booted again on the same disk). The node's only way out is its
forwarded loopback ports (tests/e2e/netns.py), so the archive is reached through a proxy on
this host that relays to Debian's mirrors and nothing else (tests/e2e/archive_proxy.py).

What must hold after the reboot:
- the node is the same to Azure: the same Arc machine (id, vmId), the same Node (uid),
  Ready, and nothing written to ARM since the upgrade began;
- the agent runs on trixie's Python (3.13), our modules are compiled for it (python3.13's
  rtinstall hook, /usr/share/python3/runtime.d/public_modules.rtinstall, runs py3compile
  over dist-packages), and once the obsolete packages are removed as the release notes
  then have it ("Obsolete packages": `apt autoremove`), nothing of ours is left compiled for
  3.11: python3.11 is removed with them and its rtremove hook runs py3clean for 3.11. Until
  then the 3.11 bytecode stays, as every Python package's does, since 3.11 can still run it;
- the kubelet was restarted by nothing of ours: nothing it reads changed, so the agent's
  pass after the boot restarted nothing, and `aks-flex-node status` says so (the services
  phase unchanged, "no restart owed"); systemd started it once, at boot.

It reaches Debian's archive and downloads a release's worth of packages: by far the longest
scenario (docs/testing.md gives its time), so `make e2e` leaves it out and
`make e2e-release-upgrade` runs it. It runs on bookworm nodes only (it starts on 12).
"""

import datetime
import json
import re

import pytest

from tests.e2e import container as ct
from tests.e2e import node as n
from tests.e2e.archive_proxy import ArchiveProxy
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.release_upgrade, pytest.mark.releases("bookworm")]

DEBIAN_SOURCES = "/etc/apt/sources.list.d/debian.sources"
PROXY_CONF = "/etc/apt/apt.conf.d/80e2e-archive-proxy"
# Conffiles a package changes keep the local version when it was modified, else take the
# new one (dpkg(1) --force-confdef, --force-confold): no question is asked, as in an
# unattended upgrade.
UPGRADE_OPTS = ("-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold")


def sources(suite):
    """The node's Debian sources, as a bookworm machine's installer writes them (deb822)."""
    return (f"Types: deb\nURIs: {ct.MIRROR}\nSuites: {suite} {suite}-updates\nComponents: main\n"
            f"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {ct.SECURITY_MIRROR}\nSuites: {suite}-security\nComponents: main\n"
            f"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")


@pytest.fixture
def archive_proxy():
    proxy = ArchiveProxy([ct.MIRROR, ct.SECURITY_MIRROR])
    yield proxy
    proxy.stop()


def our_pyc(node, version):
    """The .pyc files compiled for cpython-<version> anywhere under the package's own
    directories (those `dpkg -L` lists that are ours alone: aks_flex_node/, its egg-info,
    /usr/share/aks-flex-node, ..., not /usr or dist-packages)."""
    listed = node.c.run(["dpkg-query", "-L", "aks-flex-node"]).stdout.split()
    ours = [path for path in listed if "aks_flex_node" in path or "aks-flex-node" in path]
    dirs = node.c.run(["sh", "-c", 'for p; do if [ -d "$p" ] && [ ! -L "$p" ]; then echo "$p"; fi; done', "-",
                       *ours]).stdout.split()
    assert "/usr/lib/python3/dist-packages/aks_flex_node" in dirs, dirs
    found = node.c.run(["find", *dirs, "-name", f"*.cpython-{version}*.pyc"])
    return sorted(set(found.stdout.split()))


def agent_python(node):
    """The interpreter the agent's process runs (its /proc/PID/exe)."""
    pid = n.main_pid(node, "aks-flex-node-agent")
    assert pid != "0", node.journal("aks-flex-node-agent")
    return node.c.run(["readlink", f"/proc/{pid}/exe"]).stdout.strip()


def os_release(node):
    text = node.c.run(["cat", "/etc/os-release"]).stdout
    return dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', text, re.M))


def wait_for_pass_after(node, moment, timeout=300):
    """The status of the agent's first pass that started at or after `moment` (UTC)."""
    def fresh():
        status = n.wait_for_state(node, wanted=("succeeded", "failed"), timeout=timeout)
        started = status.get("started")
        return started and datetime.datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc) >= moment and status
    status = wait_for(fresh, timeout=timeout, interval=2)
    if status:
        return status
    raise AssertionError(f"no pass of the agent since {moment}:\n{node.status()}\n{node.journals()}")


def test_a_node_joined_on_12_stays_joined_through_the_upgrade_to_13(boot_node, repo, mirror, archive_proxy):
    node = boot_node(repo, extra_ports=[archive_proxy.port])
    emu = node.emulator
    apt = n.install_joined(node, mirror)
    assert apt.returncode == 0, apt.stderr[-5000:]
    n.wait_for_state(node)
    assert os_release(node)["VERSION_CODENAME"] == "bookworm"
    [machine] = n.arc_machines(emu)
    registered = n.cluster_nodes(emu)[n.MACHINE_NAME]
    assert n.is_ready(registered), registered["status"]
    assert agent_python(node) == "/usr/bin/python3.11"
    # The check below is not blind: on 12 our modules are compiled for 3.11.
    assert our_pyc(node, "311"), "no cpython-311 .pyc of ours on bookworm: the check would prove nothing"
    version = node.dpkg_status()
    writes = len(n.arm_writes(emu))

    # ---- the upgrade, as trixie's release notes have it ---------------------------------------
    node.c.write(PROXY_CONF, f'Acquire::http::Proxy "http://127.0.0.1:{archive_proxy.port}";\n')
    node.c.write(DEBIAN_SOURCES, sources("bookworm"))
    node.c.run(["sed", "-i", "s/bookworm/trixie/g", DEBIAN_SOURCES])
    assert "trixie-security" in node.c.read(DEBIAN_SOURCES).decode()
    node.apt_get("update", timeout=600)
    minimal = node.apt_get(*UPGRADE_OPTS, "upgrade", "--without-new-pkgs", check=False, timeout=1800)
    assert minimal.returncode == 0, minimal.stdout[-4000:] + minimal.stderr[-4000:]
    full = node.apt_get(*UPGRADE_OPTS, "full-upgrade", check=False, timeout=1800)
    assert full.returncode == 0, full.stdout[-4000:] + full.stderr[-4000:]
    assert archive_proxy.refused == [], archive_proxy.refused
    # Ours was not upgraded (the repository has one version): the same .deb runs on 13.
    assert node.dpkg_status() == version
    assert os_release(node)["VERSION_ID"] == "13"

    # ---- the reboot ----------------------------------------------------------------------------
    booted_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    # The first boot of a new release does more (new units' first start, caches rebuilt).
    node.c.reboot(boot_timeout=300)
    status = wait_for_pass_after(node, booted_at)
    assert status["state"] == "succeeded", json.dumps(status, indent=1)[-4000:] + node.journals()

    # The same machine and Node to Azure; nothing written to ARM since the upgrade began.
    [after] = n.arc_machines(emu)
    assert (after["id"], after["vm_id"], after["principal_id"]) == (
        machine["id"], machine["vm_id"], machine["principal_id"])
    now = n.cluster_nodes(emu)
    assert list(now) == [n.MACHINE_NAME]
    assert now[n.MACHINE_NAME]["metadata"]["uid"] == registered["metadata"]["uid"]
    assert n.arm_writes(emu)[writes:] == []

    # trixie's Python runs the agent, on our modules compiled for it.
    assert agent_python(node) == "/usr/bin/python3.13"
    assert our_pyc(node, "313"), "our modules were not compiled for 3.13"
    for unit in ("aks-flex-node-agent", "himdsd", "containerd", "kubelet"):
        assert node.c.is_active(unit) == "active", node.journal(unit)

    # The kubelet: started once, by systemd at boot; the agent's pass restarted nothing, and
    # the status says so.
    services = {p["name"]: p for p in status["phases"]}["services"]
    assert services["status"] == "unchanged" and services["changes"] == [], services
    assert "no restart owed" in services["message"]
    restarts = [c["what"] for p in status["phases"] for c in p.get("changes", []) if "restart" in c["what"]]
    assert restarts == [], restarts
    assert status.get("owed", []) == []
    starts = node.c.run(["journalctl", "-b", "-u", "kubelet", "-o", "cat", "--no-pager"]).stdout
    assert len([line for line in starts.splitlines() if line.startswith("Started kubelet")]) == 1, starts[-3000:]
    shown = node.c.run(["aks-flex-node", "status"]).stdout
    assert "state: succeeded" in shown
    assert re.search(r"^\s+services\s+unchanged\s.*no restart owed", shown, re.M), shown
    assert n.is_ready(n.cluster_nodes(emu)[n.MACHINE_NAME])

    # ---- the obsolete packages removed, as the release notes then have it ----------------------
    autoremove = node.apt_get("autoremove", "--purge", check=False, timeout=600)
    assert autoremove.returncode == 0, autoremove.stdout[-4000:] + autoremove.stderr[-4000:]
    kept = node.c.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "python3.11"], check=False).stdout
    assert not kept.startswith("ii"), f"python3.11 is still installed ({kept!r}):\n{autoremove.stdout[-3000:]}"
    assert our_pyc(node, "311") == []
    assert our_pyc(node, "313")
    assert node.dpkg_status() == version
    assert node.c.is_active("aks-flex-node-agent") == "active", node.journal("aks-flex-node-agent")
    assert "state: succeeded" in node.c.run(["aks-flex-node", "status"]).stdout
