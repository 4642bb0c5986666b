"""Scenario: Ansible rolls aks-flex-node out to three machines at once, then upgrades it.

Three booted nodes of one release (bookworm or trixie), each in a network namespace of its
own (its own himdsd on 127.0.0.1:40342, its own sshd on port 22, exposed on a host loopback
port). Ansible is that release's own ansible-core (2.14 on bookworm, 2.19 on trixie), run
from an overlay of the same base root with systemd-nspawn, not booted and sharing this
host's network (so it reaches the exposed ports), as root over ssh with a key the test
makes, forks 3, from an inventory the test writes; the client secret comes from a
Vault-encrypted file.

- examples/ansible/join.yml joins all three (different machine names): Arc machines, Nodes
  Ready; a second run changes nothing; the secret is in no output and in no file on a node
  but /etc/aks-flex-node/sp-client-secret.
- A newer build is published; upgrade.yml runs with the first node's agent stopped (its
  check cannot see a run of the new version): the first batch fails and the rollout stops
  there, the two other nodes untouched. With the agent back, upgrade.yml again: every node
  on the new version, the same Arc machine and Node uid, no ARM write, the kubelet's
  MainPID unchanged.

Ansible's own files stay in the test's tmp dir (ANSIBLE_HOME, ANSIBLE_LOCAL_TEMP, the ssh
control sockets in a short dir of their own), bound into the controller at the same paths;
known hosts go to a file there too.
"""

import os
import shutil
import subprocess
import tempfile

import pytest
import yaml

from aks_flex_node.config import section_of
from tests.e2e import container as ct
from tests.e2e import node as n
from tests.e2e.node import REPO_MOUNT
from tests.emulator import constants as C

pytestmark = pytest.mark.e2e

EXAMPLE = ct.REPO / "examples" / "ansible"
NAMES = ("ansible-node-1", "ansible-node-2", "ansible-node-3")
CONTROLLER_TOOLS = ("ansible-playbook", "ansible-vault", "ssh", "ssh-keygen")


@pytest.fixture
def controller_root(base_root, tmp_path):
    """An overlay of the release's base root (the cache is never written), the controller's
    filesystem; the release's ansible-core and ssh are in it (container.BASE_PACKAGES)."""
    merged = ct.mount_overlay(base_root, tmp_path / "controller")
    try:
        missing = [tool for tool in CONTROLLER_TOOLS if not any(
            (merged / d / tool).exists() for d in ("usr/bin", "bin"))]
        if missing:
            pytest.fail(f"the base root {base_root} lacks {', '.join(missing)}: `make e2e-clean`, then again")
        yield merged
    finally:
        ct.unmount_all(merged)


class Controller:
    """Ansible from the release's root: a key, a vault, an inventory, and ansible-playbook
    runs, each command in `root` through systemd-nspawn (no boot, the host's network) with
    `binds` (the test's tmp dir, the control sockets' dir, the examples) at the same paths."""

    def __init__(self, root, tmp, control_dir, binds=()):
        self.root, self.tmp = root, tmp
        self.binds = (tmp, control_dir, EXAMPLE, *binds)
        self.key = tmp / "id_ed25519"
        self.home = tmp / "ansible-home"
        self.env = {
            "HOME": str(self.home), "ANSIBLE_HOME": str(self.home / ".ansible"),
            "ANSIBLE_LOCAL_TEMP": str(self.home / ".ansible" / "tmp"), "ANSIBLE_CONFIG": str(tmp / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "LANG": "C.UTF-8"}
        self.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "aks-e2e-ansible", "-f", str(self.key)],
                 check=True)
        # ssh's ControlPath is a unix socket (108 bytes at most): a short dir, not tmp_path.
        (tmp / "ansible.cfg").write_text(
            "[defaults]\nforks = 3\ninterpreter_python = /usr/bin/python3\nretry_files_enabled = false\n"
            f"[ssh_connection]\npipelining = true\ncontrol_path_dir = {control_dir}\n")
        self.vault_password = tmp / "vault-password"
        self.vault_password.write_text("e2e-vault-password\n")
        self.vault_password.chmod(0o600)
        vault = tmp / "vault.yml"
        vault.write_text(yaml.safe_dump({"aks_flex_node_sp_client_secret": C.SP_CLIENT_SECRET}))
        vault.chmod(0o600)
        self.run(["ansible-vault", "encrypt", "--vault-password-file", str(self.vault_password), str(vault)],
                 check=True, timeout=120)
        self.vault = vault
        self.inventory = tmp / "inventory.yml"
        self.outputs = []

    def write_inventory(self, nodes, group_vars, host_vars=None):
        hosts = {}
        for name, node in nodes.items():
            hosts[name] = {"ansible_host": "127.0.0.1", "ansible_port": node.c.expose(22),
                           "aks_flex_node_machine_name": name, **(host_vars or {}).get(name, {})}
        common = {
            "ansible_user": "root", "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": f"-o StrictHostKeyChecking=no -o UserKnownHostsFile={self.tmp / 'known_hosts'}",
            **group_vars}
        self.inventory.write_text(yaml.safe_dump({"aks_flex_nodes": {"hosts": hosts, "vars": common}}))

    def run(self, argv, check=False, timeout=1800):
        """argv in the controller's root: --as-pid2, so a stub init reaps ssh's and
        Ansible's forks; --keep-unit --register=no, as container.Container boots."""
        nspawn = ["systemd-nspawn", "-q", "-D", str(self.root), "--as-pid2", "--register=no", "--keep-unit",
                  f"--chdir={self.tmp}", *(f"--bind={path}" for path in self.binds),
                  *(f"--setenv={key}={value}" for key, value in self.env.items())]
        proc = subprocess.run([*nspawn, *argv], env=ct.system_env(), capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise ct.E2EError(f"in the controller: {' '.join(argv)} exited {proc.returncode}\n"
                              f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def version(self):
        return self.run(["ansible-playbook", "--version"], check=True).stdout.splitlines()[0]

    def playbook(self, name, timeout=1800):
        proc = self.run(["ansible-playbook", "-v", "-i", str(self.inventory), "-e", f"@{self.vault}",
                         "--vault-password-file", str(self.vault_password), str(EXAMPLE / name)], timeout=timeout)
        self.outputs.append(proc.stdout + proc.stderr)
        # The whole output, for a failure (the assertions show its end only).
        (self.tmp / f"ansible-{len(self.outputs)}-{name.replace('.yml', '')}.log").write_text(
            proc.stdout + proc.stderr)
        return proc


def recap(output):
    """{host: {ok, changed, failed, ...}} from ansible-playbook's PLAY RECAP."""
    out = {}
    for line in output.split("PLAY RECAP")[-1].splitlines():
        host, sep, counts = line.partition(" : ")
        if sep:
            out[host.strip()] = {k: int(v) for k, v in (c.split("=") for c in counts.split())}
    return out


def role_vars(emu, mirror, repo):
    settings = {}
    for key, value in n.endpoint_settings(emu, mirror).items():
        if key != "cloud":  # a debconf question: aks_flex_node_cloud
            settings.setdefault(section_of(key), {})[key] = value
    return {
        "aks_flex_node_repo_uri": f"file:{REPO_MOUNT}",
        "aks_flex_node_keyring_src": str(repo.keyring),
        "aks_flex_node_tenant_id": C.TENANT_ID,
        "aks_flex_node_cluster_resource_id": C.CLUSTER_ID,
        "aks_flex_node_cloud": "custom",
        "aks_flex_node_auth_method": "service-principal",
        "aks_flex_node_sp_client_id": C.SP_CLIENT_ID,
        "aks_flex_node_subscription_id": C.SUBSCRIPTION_ID,
        "aks_flex_node_tags": "env=e2e",
        "aks_flex_node_settings": settings,
        "aks_flex_node_check_delay": 3,
        "aks_flex_node_check_retries": 100,
    }


def boot_ssh_node(boot_node, repo, name, public_key):
    def with_sshd(box):
        for unit in ("ssh.service", "ssh.socket"):  # masked in the base (container.BASE_HOOKS)
            box.path(f"/etc/systemd/system/{unit}").unlink()
        box.write("/root/.ssh/authorized_keys", public_key, 0o600)
        os.chmod(box.path("/root/.ssh"), 0o700)

    node = boot_node(repo, private_network=True, before_boot=with_sshd, hostname=name, add_repository=False)
    assert node.c.is_active("ssh") == "active", node.journal("ssh")
    return node


# The ansible-core each release ships (Debian's packages; the first line of --version).
ANSIBLE_CORE = {"bookworm": "2.14.", "trixie": "2.19."}


def test_ansible_joins_three_nodes_at_once_then_upgrades_them_in_batches(release, controller_root, boot_node,
                                                                          fresh_repo, newer_deb, mirror, tmp_path):
    control_dir = tempfile.mkdtemp(prefix="aks-e2e-cp-")
    try:
        ansible = Controller(controller_root, tmp_path, control_dir)
        assert f"[core {ANSIBLE_CORE[release]}" in ansible.version(), ansible.version()
        _scenario(ansible, boot_node, fresh_repo, newer_deb, mirror, tmp_path)
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)


def _scenario(ansible, boot_node, fresh_repo, newer_deb, mirror, tmp_path):
    public_key = (tmp_path / "id_ed25519.pub").read_text()
    nodes = {name: boot_ssh_node(boot_node, fresh_repo, name, public_key) for name in NAMES}
    emu = next(iter(nodes.values())).emulator
    group_vars = role_vars(emu, mirror, fresh_repo)
    ansible.write_inventory(nodes, group_vars)

    # ---- join: all three at once --------------------------------------------------------
    join = ansible.playbook("join.yml")
    assert join.returncode == 0, join.stdout[-8000:] + join.stderr[-3000:]
    assert {h: r["failed"] for h, r in recap(join.stdout).items()} == dict.fromkeys(NAMES, 0)
    joined = {}
    for name, node in nodes.items():
        assert node.dpkg_status() == f"install ok installed|{newer_deb.old_version}"
        status = node.status()
        assert status["state"] == "succeeded" and status["machine_name"] == name, status
        [machine] = n.arc_machines(emu, name)
        registered = n.cluster_nodes(emu)[name]
        assert n.is_ready(registered), registered["status"]
        joined[name] = {"machine": machine["id"], "vm_id": machine["vm_id"], "uid": registered["metadata"]["uid"],
                        "kubelet": n.main_pid(node, "kubelet")}
        assert node.c.read(n.SOURCES).decode().count("Signed-By: /usr/share/keyrings/aks-flex-node-archive-keyring.gpg")
    assert len({j["machine"] for j in joined.values()}) == 3
    # The secret: censored in Ansible's output, moved out of debconf, in one file per node
    # (the pattern comes on stdin: not even a test secret goes on a command line).
    assert C.SP_CLIENT_SECRET not in "".join(ansible.outputs)
    assert "the output has been hidden due to the fact that 'no_log: true'" in join.stdout
    for node in nodes.values():
        leaks = node.c.run(["grep", "-r", "-l", "-F", "-f", "-", "/etc", "/var", "/root"], check=False,
                           input=C.SP_CLIENT_SECRET + "\n")
        assert leaks.stdout.split() == ["/etc/aks-flex-node/sp-client-secret"]
    # Nothing of Ansible's outside the tmp dir on this host.
    assert (ansible.home / ".ansible").is_dir()

    # A second run converges: nothing changed.
    again = ansible.playbook("join.yml")
    assert again.returncode == 0, again.stdout[-6000:]
    assert {h: r["changed"] for h, r in recap(again.stdout).items()} == dict.fromkeys(NAMES, 0), again.stdout[-6000:]

    writes = len(n.arm_writes(emu))
    fresh_repo.publish(newer_deb.deb)

    # ---- upgrade, first batch fails: the rollout stops there -------------------------------
    first = nodes[NAMES[0]]
    first.c.run(["systemctl", "stop", "aks-flex-node-agent"])
    ansible.write_inventory(nodes, group_vars, host_vars={NAMES[0]: {"aks_flex_node_check_retries": 3,
                                                                     "aks_flex_node_check_delay": 2}})
    stopped = ansible.playbook("upgrade.yml")
    assert stopped.returncode != 0
    assert "recorded by version " + newer_deb.old_version in stopped.stdout, stopped.stdout[-6000:]
    assert stopped.stdout.count("PLAY [Upgrade aks-flex-node, batch after batch]") == 1, stopped.stdout[-6000:]
    assert first.dpkg_status() == f"install ok installed|{newer_deb.new_version}"
    for name in NAMES[1:]:
        assert nodes[name].dpkg_status() == f"install ok installed|{newer_deb.old_version}", name

    # ---- upgrade, for real: batch after batch ----------------------------------------------
    first.c.run(["systemctl", "start", "aks-flex-node-agent"])
    ansible.write_inventory(nodes, group_vars)
    upgrade = ansible.playbook("upgrade.yml")
    assert upgrade.returncode == 0, upgrade.stdout[-8000:] + upgrade.stderr[-3000:]
    # serial [1, "25%"]: one node per batch for three.
    assert upgrade.stdout.count("PLAY [Upgrade aks-flex-node, batch after batch]") == 3
    for name, node in nodes.items():
        assert node.dpkg_status() == f"install ok installed|{newer_deb.new_version}", name
        status = node.status()
        assert status["state"] == "succeeded" and status["version"] == newer_deb.new_version, status
        [machine] = n.arc_machines(emu, name)
        registered = n.cluster_nodes(emu)[name]
        assert n.is_ready(registered), registered["status"]
        assert {"machine": machine["id"], "vm_id": machine["vm_id"], "uid": registered["metadata"]["uid"],
                "kubelet": n.main_pid(node, "kubelet")} == joined[name], name
    assert len(n.arc_machines(emu, NAMES[0]) + n.arc_machines(emu, NAMES[1]) + n.arc_machines(emu, NAMES[2])) == 3
    assert n.arm_writes(emu)[writes:] == []
