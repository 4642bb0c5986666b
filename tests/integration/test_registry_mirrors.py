"""registry_mirrors on a scratch root, through the CLI against the emulator: the hosts.toml
files and the mirrors' CA, their modes, their ledger records; no containerd restart for
them (containerd reads hosts.toml at each pull); a changed and a removed mirror; undo,
which puts back a hosts.toml the operator had and removes only what we wrote."""

import json
import os
import urllib.parse

import pytest

from tests import harness

tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python 3.11 and later")

CERTS = "/etc/containerd/certs.d"
MCR = f"{CERTS}/mcr.microsoft.com"
LOCAL = f"{CERTS}/registry.example:5000"
CA_NAME = "aks-flex-node-ca.crt"
CA_NODE_PATH = "/etc/aks-flex-node/registry-ca.crt"


def mirror(node, host="127.0.0.1"):
    """The emulator's origin under `host`, as a mirror: preflight may ask it (the pause
    image's mirror), and it answers with a certificate of the emulator's CA."""
    return f"https://{host}:{urllib.parse.urlsplit(node.emu.arm).port}"


def two_mirrors(node):
    return f"mcr.microsoft.com={mirror(node)}, registry.example:5000={mirror(node)}"


def ca_pem(node):
    with open(node.emu.ca_bundle, "rb") as f:
        return f.read()


def configure(node, **extra):
    harness.write_config(node.root, node.emu, node.wrapper, extra=extra)


def with_ca(node, content=None):
    content = ca_pem(node) if content is None else content
    path = node.path(CA_NODE_PATH)
    with open(path, "wb") as f:
        f.write(content)
    os.chmod(path, 0o644)
    return CA_NODE_PATH


def hosts(node, directory):
    return tomllib.loads(node.read(f"{directory}/hosts.toml").decode())


def ledger_files(node, step="registry-mirrors"):
    with open(node.path("/var/lib/aks-flex-node/ledger.json")) as f:
        entries = json.load(f)["entries"]
    return {e["id"]: e for e in entries if e["step"] == step}


def changes(summary, phase="registry-mirrors"):
    [found] = [p for p in summary["phases"] if p["name"] == phase]
    return found["changes"]


def restarts_of(node, unit):
    return len([a for a in node.fake.calls("systemctl") if a[1:] == ["restart", f"{unit}.service"]])


def bootstrap(node, *args):
    proc, summary = node.cli_json("bootstrap", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return summary


def test_each_registry_gets_a_hosts_toml_naming_its_mirror_and_the_ca_beside_it(node):
    configure(node, registry_mirrors=two_mirrors(node), registry_ca_file=with_ca(node))
    summary = bootstrap(node)
    for directory in (MCR, LOCAL):
        settings = {"capabilities": ["pull", "resolve"], "ca": f"{directory}/{CA_NAME}"}
        assert hosts(node, directory) == {"server": mirror(node), **settings, "host": {mirror(node): settings}}
        assert node.read(f"{directory}/{CA_NAME}") == ca_pem(node)
        assert node.mode(f"{directory}/hosts.toml") == 0o644 and node.mode(f"{directory}/{CA_NAME}") == 0o644
    # In the ledger as the phase's, with the directories it made; none owes a restart.
    recorded = ledger_files(node)
    assert {path for path, e in recorded.items() if e["kind"] == "file"} == {
        f"{MCR}/hosts.toml", f"{MCR}/{CA_NAME}", f"{LOCAL}/hosts.toml", f"{LOCAL}/{CA_NAME}"}
    assert {path for path, e in recorded.items() if e["kind"] == "parent_dir"} == {CERTS, MCR, LOCAL}
    assert all("owes" not in change for change in changes(summary))

    again = bootstrap(node)
    assert changes(again) == []


def test_a_changed_mirror_is_rewritten_without_restarting_containerd(node):
    configure(node, registry_mirrors=two_mirrors(node), registry_ca_file=with_ca(node))
    bootstrap(node)
    restarts = restarts_of(node, "containerd")
    # Another name of the mirror, and a CA file with one more certificate (a rotation).
    rotated = ca_pem(node) + ca_pem(node)
    configure(node, registry_mirrors=f"mcr.microsoft.com={mirror(node, 'localhost')}, "
                                     f"registry.example:5000={mirror(node)}",
              registry_ca_file=with_ca(node, rotated))
    summary = bootstrap(node)
    assert hosts(node, MCR)["server"] == mirror(node, "localhost")
    assert node.read(f"{LOCAL}/{CA_NAME}") == rotated
    assert sorted(c["what"] for c in changes(summary)) == [
        f"write {MCR}/{CA_NAME} (mode 0644)", f"write {MCR}/hosts.toml (mode 0644)",
        f"write {LOCAL}/{CA_NAME} (mode 0644)"]
    # containerd reads hosts.toml at each pull (containerd docs/hosts.md): nothing restarts it.
    assert restarts_of(node, "containerd") == restarts


def test_a_removed_mirror_loses_its_files_and_directory_at_the_next_bootstrap(node):
    configure(node, registry_mirrors=two_mirrors(node), registry_ca_file=with_ca(node))
    bootstrap(node)
    # No CA file either: the mirror is then checked against the system's CAs, which know
    # nothing of the emulator's, so the name left is one preflight never asks (not the
    # pause image's registry).
    configure(node, registry_mirrors=f"registry.example:5000={mirror(node)}")
    summary = bootstrap(node)
    assert not os.path.lexists(node.path(MCR))
    assert not os.path.lexists(node.path(f"{LOCAL}/{CA_NAME}"))
    settings = {"capabilities": ["pull", "resolve"]}
    assert hosts(node, LOCAL) == {"server": mirror(node), **settings, "host": {mirror(node): settings}}
    assert set(ledger_files(node)) == {CERTS, LOCAL, f"{LOCAL}/hosts.toml"}
    assert changes(bootstrap(node)) == []

    configure(node)  # no mirror at all
    summary = bootstrap(node)
    assert not os.path.lexists(node.path(CERTS))
    assert ledger_files(node) == {}
    assert changes(summary) and changes(bootstrap(node)) == []


def test_what_the_operator_put_in_certs_d_is_kept_and_put_back_exactly(node):
    theirs = b'server = "https://their-mirror.example"\n'
    os.makedirs(node.path(MCR))
    with open(node.path(f"{MCR}/hosts.toml"), "wb") as f:
        f.write(theirs)
    os.chmod(node.path(f"{MCR}/hosts.toml"), 0o600)
    with open(node.path(f"{MCR}/notes.txt"), "wb") as f:
        f.write(b"the operator's\n")
    configure(node, registry_mirrors=two_mirrors(node), registry_ca_file=with_ca(node))
    bootstrap(node)
    assert hosts(node, MCR)["server"] == mirror(node)
    # The directories were there: not ours to record, nor to remove.
    assert {p for p, e in ledger_files(node).items() if e["kind"] == "parent_dir"} == {LOCAL}

    configure(node, registry_mirrors=f"registry.example:5000={mirror(node)}")
    bootstrap(node)  # mcr.microsoft.com's mirror dropped: the operator's file is back
    assert node.read(f"{MCR}/hosts.toml") == theirs and node.mode(f"{MCR}/hosts.toml") == 0o600
    assert sorted(os.listdir(node.path(MCR))) == ["hosts.toml", "notes.txt"]


def test_unbootstrap_removes_only_what_it_wrote(node):
    theirs = b'server = "https://their-mirror.example"\n'
    os.makedirs(node.path(MCR))
    with open(node.path(f"{MCR}/hosts.toml"), "wb") as f:
        f.write(theirs)
    before = node.files()
    configure(node, registry_mirrors=two_mirrors(node), registry_ca_file=with_ca(node))
    before.add(CA_NODE_PATH)
    bootstrap(node)
    proc, summary = node.cli_json("unbootstrap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["leftovers"] == []
    assert node.read(f"{MCR}/hosts.toml") == theirs
    left = {p for p in node.files() - before
            if not p.startswith("/var/lib/aks-flex-node") and not p.startswith("/etc/aks-flex-node")}
    assert left == set(), sorted(left)


def test_a_dry_run_shows_the_files_and_writes_none(node):
    configure(node, registry_mirrors=two_mirrors(node), registry_ca_file=with_ca(node))
    summary = bootstrap(node, "--dry-run")
    assert f"write {MCR}/hosts.toml (mode 0644)" in [c["what"] for c in changes(summary)]
    assert not os.path.lexists(node.path(CERTS))


def test_a_bad_mirror_changes_nothing(node):
    before = node.files()
    configure(node, registry_mirrors="mcr.microsoft.com=https://registry.example:5000/v2/mcr")
    proc, summary = node.cli_json("bootstrap")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert [(p["key"], p["value"]) for p in summary["problems"]] == [
        ("registry_mirrors", "mcr.microsoft.com=https://registry.example:5000/v2/mcr")]
    new = node.files() - before
    assert {p for p in new if not p.startswith("/var/lib/aks-flex-node")} == set(), sorted(new)
