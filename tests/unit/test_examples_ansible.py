"""examples/ansible: Debian's ansible-lint finds nothing at its default profile and never
reaches the network, both playbooks pass `ansible-playbook --syntax-check`, the secret's
task is never logged, and the role's converge check (run on this host against a fake
`aks-flex-node` command) tells a joined, Ready node from one that is not.

tests/e2e/test_ansible.py runs the playbooks for real, on three booted nodes.

Every run keeps Ansible's and ansible-lint's files in the test's tmp dir (HOME,
ANSIBLE_HOME, ANSIBLE_LOCAL_TEMP, XDG_CACHE_HOME): the host's ~/.ansible and ~/.cache are
never touched. The tree is linted from a copy outside the git work tree, with the files
named on the command line, so ansible-lint never runs git to find them.
"""

import json
import pathlib
import shutil
import subprocess

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ansible"
ROLE = EXAMPLE / "roles" / "aks_flex_node"
PLAYBOOKS = ("join.yml", "upgrade.yml")
LINTED = (*PLAYBOOKS, "inventory.example.yml", "roles/aks_flex_node/meta/main.yml",
          "roles/aks_flex_node/defaults/main.yml")
SYSPATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# What Debian 12 ships: the tools and the package each comes in.
TOOLS = {"ansible-lint": "ansible-lint", "ansible-playbook": "ansible-core"}

# Loaded by every Python process ansible-lint starts (PYTHONPATH): any IP socket's connect
# and any name lookup is written down and refused before a packet leaves. A numeric loopback
# address is no lookup (getaddrinfo parses it, AI_NUMERICHOST: no resolver is asked), so it is
# answered: ansible-core 2.19 resolves '127.0.0.1' when imported (Debian 13's).
NETWORK_GUARD = '''
import errno, ipaddress, os, socket

_LOG = os.environ["NETWORK_GUARD_LOG"]


def _refuse(what):
    with open(_LOG, "a") as log:
        log.write(f"{os.getpid()} {what}\\n")
    raise OSError(errno.ENETUNREACH, f"network access refused by the test: {what}")


def _guarded(method):
    def call(self, address, *args):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _refuse(f"{method.__name__} {address!r}")
        return method(self, address, *args)
    return call


def _numeric_loopback(host):
    try:
        return isinstance(host, str) and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_resolve = socket.getaddrinfo


def _getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    if _numeric_loopback(host):
        return _resolve(host, port, family, type, proto, flags | socket.AI_NUMERICHOST)
    _refuse(f"getaddrinfo {host!r}")


socket.socket.connect = _guarded(socket.socket.connect)
socket.socket.connect_ex = _guarded(socket.socket.connect_ex)
socket.getaddrinfo = _getaddrinfo
'''


@pytest.fixture(scope="module")
def tools():
    missing = {tool: package for tool, package in TOOLS.items() if not shutil.which(tool, path=SYSPATH)}
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: install Debian's {' and '.join(sorted(set(missing.values())))} "
                    f"(apt-get install {' '.join(sorted(set(missing.values())))}; `make test` does)")


@pytest.fixture
def workdir(tmp_path, tools):
    """A copy of examples/ansible, a scratch HOME and a network guard, under tmp_path."""
    copy = tmp_path / "ansible"
    shutil.copytree(EXAMPLE, copy)
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(NETWORK_GUARD)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": SYSPATH, "LANG": "C.UTF-8", "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
           "ANSIBLE_HOME": str(home / ".ansible"), "ANSIBLE_LOCAL_TEMP": str(home / ".ansible" / "tmp"),
           "ANSIBLE_NOCOLOR": "1", "NO_COLOR": "1", "PYTHONPATH": str(guard),
           "NETWORK_GUARD_LOG": str(tmp_path / "network.log")}
    return copy, env, tmp_path / "network.log"


def run(argv, cwd, env, timeout=300):
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def network_log(path):
    return path.read_text().splitlines() if path.exists() else []


def test_ansible_lint_finds_nothing_at_its_default_profile_and_stays_offline(workdir):
    copy, env, netlog = workdir
    lint = run(["ansible-lint", "-vv", "-f", "pep8", *LINTED], copy, env)
    assert lint.returncode == 0, f"{lint.stdout}\n{lint.stderr}"
    assert "0 failure(s), 0 warning(s)" in lint.stderr, lint.stderr[-3000:]
    # .ansible-lint's `offline: true` is what ansible-lint runs with: no schema refresh
    # (which, online, rewrites its __store__.json under /usr/lib) and no galaxy install.
    assert "offline=True" in lint.stderr, lint.stderr[-3000:]
    assert network_log(netlog) == [], "ansible-lint reached for the network"


def test_ansible_lint_reaches_the_role_files(workdir):
    """A violation in the role's check.yml is found: the clean run above did lint them."""
    copy, env, _ = workdir
    check = copy / "roles/aks_flex_node/tasks/check.yml"
    check.write_text(check.read_text() + "\n- ansible.builtin.command: aks-flex-node version\n")
    lint = run(["ansible-lint", "-f", "pep8", *LINTED], copy, env)
    assert lint.returncode != 0
    assert "roles/aks_flex_node/tasks/check.yml" in lint.stdout, lint.stdout
    assert "name[missing]" in lint.stdout and "no-changed-when" in lint.stdout, lint.stdout


def test_the_network_guard_refuses_and_records(workdir):
    """The guard the lint runs under does catch a Python process reaching out."""
    copy, env, netlog = workdir
    probe = run(["python3", "-c", "import urllib.request; urllib.request.urlopen('http://deb.debian.org/', timeout=5)"],
                copy, env)
    assert probe.returncode != 0 and "network access refused by the test" in probe.stderr, probe.stderr
    assert network_log(netlog) and "getaddrinfo 'deb.debian.org'" in network_log(netlog)[0]


PROBE_LOOKUPS = """
import socket
for host in ("127.0.0.1", "::1", "localhost", "127.0.0.1.nip.io", "10.0.0.1"):
    try:
        print(host, sorted({a[4][0] for a in socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)}))
    except OSError as err:
        print(host, "refused" if "refused by the test" in str(err) else err)
"""


def test_the_network_guard_answers_numeric_loopback_only(workdir):
    """Numeric loopback addresses resolve (no resolver is asked: what ansible-core 2.19 does
    at import); every name, /etc/hosts' localhost included, and any other address is refused."""
    copy, env, netlog = workdir
    probe = run(["python3", "-c", PROBE_LOOKUPS], copy, env)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines() == ["127.0.0.1 ['127.0.0.1']", "::1 ['::1']", "localhost refused",
                                         "127.0.0.1.nip.io refused", "10.0.0.1 refused"]
    assert [line.split(" ", 1)[1] for line in network_log(netlog)] == [
        "getaddrinfo 'localhost'", "getaddrinfo '127.0.0.1.nip.io'", "getaddrinfo '10.0.0.1'"]


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax_check(workdir, playbook):
    copy, env, netlog = workdir
    check = run(["ansible-playbook", "--syntax-check", "-i", "inventory.example.yml", playbook], copy, env)
    assert check.returncode == 0, f"{check.stdout}\n{check.stderr}"
    assert f"playbook: {playbook}" in check.stdout
    assert network_log(netlog) == []


def tasks_of(path):
    """Every task of a task file, blocks opened."""
    out = []
    for task in yaml.safe_load(path.read_text()) or []:
        out.append(task)
        for key in ("block", "rescue", "always"):
            out.extend(task.get(key, []))
    return out


def test_every_task_that_handles_the_secret_is_never_logged():
    tasks = [t for f in sorted((ROLE / "tasks").glob("*.yml")) for t in tasks_of(f)]
    secret = [t for t in tasks if "aks_flex_node_sp_client_secret" in json.dumps({k: v for k, v in t.items()
                                                                                   if k != "ansible.builtin.assert"})]
    assert [t["name"] for t in secret] == ["Preseed the client secret"]
    assert all(t.get("no_log") is True for t in secret)
    debconf = secret[0]["ansible.builtin.debconf"]
    assert debconf["vtype"] == "password" and debconf["question"] == "aks-flex-node/sp_client_secret"


def test_every_variable_is_documented_in_the_defaults_and_the_readme():
    used = set()
    for path in [*(ROLE / "tasks").glob("*.yml"), *(ROLE / "templates").glob("*")]:
        used |= {word for word in _words(path.read_text()) if word.startswith("aks_flex_node_")}
    defaults = set(yaml.safe_load((ROLE / "defaults/main.yml").read_text()))
    # Set by the role itself (register, loop_var, task vars), not by its user.
    internal = {"aks_flex_node_installed", "aks_flex_node_status", "aks_flex_node_section",
                "aks_flex_node_run", "aks_flex_node_ready"}
    assert used - internal <= defaults, f"used without a default: {sorted(used - internal - defaults)}"
    readme = (ROLE / "README.md").read_text()
    assert [v for v in sorted(defaults) if f"`{v}`" not in readme] == []


def _words(text):
    import re

    return re.findall(r"[a-z_][a-z0-9_]*", text)


# ---- the converge check, on this host ----------------------------------------------------

FAKE_CLI = """#!/bin/sh
# aks-flex-node as the converge check sees it: `version --json` and `status --json`.
case "$1" in
  version) echo '{"version": "0.2.0"}' ;;
  status) cat "$FAKE_STATUS" ;;
  *) exit 2 ;;
esac
"""
CHECK_PLAY = """
- name: The role's converge check alone
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Check
      ansible.builtin.include_role:
        name: aks_flex_node
        tasks_from: check.yml
"""
CLUSTER = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/aks-rg/providers/" \
          "Microsoft.ContainerService/managedClusters/aks-edge"
JOINED = {"state": "succeeded", "operation": "bootstrap", "version": "0.2.0", "machine_name": "edge-1",
          "cluster_resource_id": CLUSTER, "error": None, "exit_code": 0,
          "phases": [{"name": "services", "status": "unchanged"}, {"name": "node-ready", "status": "unchanged"}]}


def converge_check(workdir, status):
    copy, env, _ = workdir
    fake_bin = copy.parent / "bin"
    fake_bin.mkdir(exist_ok=True)
    (fake_bin / "aks-flex-node").write_text(FAKE_CLI)
    (fake_bin / "aks-flex-node").chmod(0o755)
    (copy.parent / "status.json").write_text(json.dumps(status))
    (copy / "check.yml").write_text(CHECK_PLAY)
    extra = {"aks_flex_node_check_retries": 1, "aks_flex_node_check_delay": 0, "aks_flex_node_machine_name": "edge-1",
             "aks_flex_node_cluster_resource_id": CLUSTER.lower()}
    return run(["ansible-playbook", "-i", "localhost,", "check.yml", "-e", json.dumps(extra)], copy,
               dict(env, PATH=f"{fake_bin}:{SYSPATH}", FAKE_STATUS=str(copy.parent / "status.json"),
                    ANSIBLE_ROLES_PATH=str(copy / "roles")))


def test_the_converge_check_passes_on_a_joined_ready_node_and_changes_nothing(workdir):
    play = converge_check(workdir, JOINED)
    assert play.returncode == 0, play.stdout
    assert "edge-1 joined " + CLUSTER in play.stdout
    assert "changed=0" in play.stdout and "failed=0" in play.stdout


@pytest.mark.parametrize("status, says", [
    (dict(JOINED, state="pending", error={"message": "himdsd does not answer", "remedy": "start himdsd"}),
     "state pending, recorded by version 0.2.0"),
    # A record of the version before the upgrade: the agent has not run the new one yet.
    (dict(JOINED, version="0.1.0"), "recorded by version 0.1.0 (installed: 0.2.0"),
    (dict(JOINED, phases=[{"name": "node-ready", "status": "failed"}]), "node-ready ['failed']"),
    (dict(JOINED, phases=[{"name": "node-ready", "status": "skipped"}]), "node-ready ['skipped']"),
    (dict(JOINED, machine_name="edge-2"), "machine edge-2"),
    ({"state": "unjoined", "message": "no bootstrap has run on this node"}, "state unjoined"),
], ids=["pending", "older-version", "not-ready", "node-ready-skipped", "other-machine", "never-joined"])
def test_the_converge_check_fails_saying_why(workdir, status, says):
    play = converge_check(workdir, status)
    assert play.returncode != 0
    assert "localhost is not joined and Ready" in play.stdout, play.stdout
    assert says in play.stdout, play.stdout
    if status.get("error"):
        assert "what to do: start himdsd" in play.stdout
