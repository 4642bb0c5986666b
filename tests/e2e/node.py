"""A booted container used as an operator uses a machine: the APT source, the Arc agent's
settings, the configuration and the preseed written before `apt-get install`, and what
the scenarios read back (dpkg, systemd, files, `aks-flex-node status --json`).

Nothing here reaches past loopback: the node's only APT source is the test repository,
bound read-only into the container (REPO_MOUNT), and every Azure endpoint is the emulator.
"""

import json
import os
import pty
import re
import select
import shlex
import subprocess
import time

from aks_flex_node.paths import PENDING as PENDING_MARKER
from tests import harness
from tests.deb import debtools
from tests.e2e.container import system_env
from tests.emulator import constants as C
from tests.waiting import wait_for

REPO_MOUNT = "/srv/aks-flex-node-repo"
UPSTREAM_KEYS_MOUNT = "/var/lib/himdsd-upstream-keys"
KEYRING = "/usr/share/keyrings/aks-flex-node-archive-keyring.gpg"
SOURCES = "/etc/apt/sources.list.d/aks-flex-node.sources"
CONF = "/etc/aks-flex-node/aks-flex-node.conf"
# The emulator's CA, put where an operator keeps a private CA: outside our directory, so
# that a purge (which removes /etc/aks-flex-node) leaves it, as it must.
CA = "/usr/local/share/aks-e2e/emulator-ca.pem"
# The digests of what the mirror serves (tests/e2e/mirror.py, Mirror.digests), pinned as an
# operator pins their own builds' (artifact_digests_file); conftest's boot_node writes it.
DIGESTS = "/usr/local/share/aks-e2e/artifact-digests"
ARC_SETTINGS = "/etc/default/azcmagent-standin"
# needrestart (in the base root, its apt hook off): a configuration snippet of ours, which it
# evaluates as Perl at every run (needrestart's conf.d), appends one line per run here.
NEEDRESTART_RUNS = "/run/e2e-needrestart-runs"
MACHINE_NAME = "e2e-node-1"
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}
APT_OPTS = ("-y", "-q", "-o", "Dpkg::Use-Pty=0", "-o", "APT::Color=0")
# Where a purge must leave nothing of ours; the rest of the file list is compared too.
OURS = ("/etc/aks-flex-node", "/var/lib/aks-flex-node", "/var/cache/aks-flex-node", "/usr/share/aks-flex-node",
        "/etc/systemd/system/kubelet.service", "/etc/systemd/system/containerd.service",
        "/usr/local/bin/kubelet", "/usr/local/bin/containerd", "/usr/local/bin/runc", "/opt/cni/bin",
        "/usr/local/lib/aks-flex-node")


def preseed_answers(cluster_id=C.CLUSTER_ID, machine_name=MACHINE_NAME, on_join_failure="retry-in-background",
                    join=True):
    """{question: (type, value)} of an unattended install against the emulator."""
    return {
        "join": ("boolean", "true" if join else "false"),
        "tenant_id": ("string", C.TENANT_ID),
        "cluster_resource_id": ("string", cluster_id),
        "cloud": ("select", "custom"),
        "auth_method": ("select", "service-principal"),
        "sp_client_id": ("string", C.SP_CLIENT_ID),
        "sp_client_secret": ("password", C.SP_CLIENT_SECRET),
        "subscription_id": ("string", C.SUBSCRIPTION_ID),
        "machine_name": ("string", machine_name),
        "tags": ("string", "env=e2e"),
        "role_preset": ("select", "legacy"),
        "on_join_failure": ("select", on_join_failure),
    }


def endpoint_settings(emulator, mirror):
    """What debconf does not ask and a node outside Azure's public cloud must be told: the
    emulator's endpoints, its CA, the artifact mirror and the runtime versions it serves."""
    return {
        "cloud": "custom",
        "arm_endpoint": emulator.arm,
        "authority_host": emulator.authority,
        "ca_bundle": CA,
        "artifact_mirror": mirror.url,
        # preflight probes the pause image's registry (its image-registry check): the mirror
        # answers there, the only server besides the emulator the node reaches.
        "pause_image": f"{mirror.url.split('://', 1)[1]}/oss/kubernetes/pause:3.9",
        "artifact_digests_file": DIGESTS,
        "containerd_version": mirror.versions["containerd"],
        "runc_version": mirror.versions["runc"],
        "cni_version": mirror.versions["cni"],
        "node_ready_timeout": "120",
    }


class Node:
    def __init__(self, container, emulator):
        self.c = container
        self.emulator = emulator

    # -- setup, as an operator would do it ---------------------------------------------------

    def add_repository(self, repo):
        """The test repository as the node's only APT source, with its key (Signed-By)."""
        self.c.copy_in(repo.keyring, KEYRING, 0o644)
        stanza = repo.sources_text(f"file:{REPO_MOUNT}")
        self.c.write(SOURCES, stanza, 0o644)
        return self.apt_get("update")

    def configure_arc_agent(self):
        """The Arc stand-in's settings: the emulator's ARM and HIMDS (tests/e2e/arc-agent)."""
        self.c.copy_in(self.emulator.ca_bundle, CA, 0o644)
        self.c.write(ARC_SETTINGS, (
            f"AZCMAGENT_STANDIN_ARM={self.emulator.arm}\n"
            f"AZCMAGENT_STANDIN_CA_BUNDLE={CA}\n"
            f"HIMDSD_UPSTREAM={self.emulator.himds}\n"
            f"HIMDSD_UPSTREAM_KEY_DIR={UPSTREAM_KEYS_MOUNT}\n"), 0o644)

    def write_config(self, values):
        self.c.write(CONF, harness.render_config(values), 0o600)

    def preseed(self, answers):
        """debconf-set-selections from stdin: the secret never shows on a command line."""
        text = "".join(f"aks-flex-node aks-flex-node/{q} {t} {v}\n" for q, (t, v) in answers.items())
        self.c.run(["debconf-set-selections"], input=text)

    # -- apt and dpkg ----------------------------------------------------------------------

    def apt_get(self, *args, check=True, timeout=900, env=None):
        return self.c.run(["apt-get", *APT_OPTS, *args], check=check, timeout=timeout,
                          env={**APT_ENV, **(env or {})})

    def dpkg_status(self, package="aks-flex-node"):
        """dpkg's Status and Version of a package ("" when dpkg does not know it)."""
        proc = self.c.run(["dpkg-query", "-W", "-f=${Status}|${Version}", package], check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def debconf_entries(self, package="aks-flex-node"):
        """Lines of the debconf databases that mention the package."""
        proc = self.c.run("grep -h -i -- " + shlex.quote(package)
                          + " /var/cache/debconf/config.dat /var/cache/debconf/passwords.dat "
                            "/var/cache/debconf/templates.dat || true")
        return proc.stdout.splitlines()

    def debconf_get(self, question):
        """The answer debconf holds for aks-flex-node/QUESTION (None when it has none)."""
        proc = self.c.run(["debconf-communicate", "aks-flex-node"], input=f"GET aks-flex-node/{question}\n")
        code, _, value = proc.stdout.strip().partition(" ")
        return value if code == "0" else None

    def ucf_entries(self, path=CONF):
        proc = self.c.run("grep -h -F -- " + shlex.quote(path) + " /var/lib/ucf/hashfile /var/lib/ucf/registry "
                          "|| true")
        return proc.stdout.splitlines()

    # -- the node's state ------------------------------------------------------------------

    def status(self):
        proc = self.c.run(["aks-flex-node", "status", "--json"], check=False)
        try:
            return json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"aks-flex-node status --json printed no JSON (exit {proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")

    def conf_value(self, key):
        return debtools.conf_value((self.c.read(CONF) or b"").decode(), key)

    def set_conf_value(self, key, value):
        """Edit one key of the configuration file in place, as an operator with an editor."""
        path = self.c.path(CONF)
        lines, found = [], False
        for line in path.read_text().splitlines():
            name, sep, _ = line.partition("=")
            if sep and name.strip() == key:
                line, found = f"{key} = {value}", True
            lines.append(line)
        if not found:
            raise AssertionError(f"{key} is not in {CONF}")
        path.write_text("\n".join(lines) + "\n")

    def mode(self, node_path):
        return self.c.path(node_path).stat().st_mode & 0o7777

    def file_list(self):
        """Every path on the node's root filesystem, but for what changes by itself (logs,
        caches of apt and debconf backups, runtime dirs) and the apt lists."""
        proc = self.c.run(
            "find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp "
            "-o -path /var/log -o -path /var/cache/apt -o -path /var/lib/apt/lists -o -path /var/tmp "
            "-o -path /var/lib/systemd -o -path /var/cache/man -o -path /var/cache/ldconfig "
            f"-o -path {UPSTREAM_KEYS_MOUNT} -o -path {REPO_MOUNT} -o -name __pycache__ \\) -prune "
            "-o -print", timeout=120)
        return set(proc.stdout.splitlines())

    # -- needrestart, as on an Ubuntu server ---------------------------------------------------

    def enable_needrestart(self):
        """Turn needrestart's apt hook on (DPkg::Post-Invoke: after each dpkg run that unpacked
        something) and count its runs: each appends the NEEDRESTART_MODE it ran under."""
        self.c.run(["chmod", "a+x", "/usr/lib/needrestart/apt-pinvoke"])
        self.c.write("/etc/needrestart/conf.d/e2e-witness.conf",
                     f"if (open(my $w, '>>', '{NEEDRESTART_RUNS}')) "
                     "{ print {$w} ($ENV{NEEDRESTART_MODE} // 'unset') . \"\\n\"; close($w); }\n", 0o644)

    def needrestart_runs(self):
        """The NEEDRESTART_MODE of each needrestart run so far, oldest first."""
        # Read inside: /run is the booted system's own tmpfs, which the host's view of the
        # root does not show.
        return self.c.run(["cat", NEEDRESTART_RUNS], check=False).stdout.split()

    def journals(self, units=("aks-flex-node-agent", "himdsd", "containerd", "kubelet"), lines=25):
        """The last lines of each unit's journal, for a failure message."""
        return "\n".join(f"--- journal of {u}:\n{self.journal(u, lines)}" for u in units)

    def journal(self, unit, lines=60):
        return self.c.run(["journalctl", "--no-pager", "-n", str(lines), "-u", unit], check=False).stdout


# ---- the emulator's view ------------------------------------------------------------------

def arc_machines(emulator, name=MACHINE_NAME):
    return [m for m in emulator.state()["machines"] if m["name"] == name]


def machine_role_assignments(emulator, principal_id):
    return [a for a in emulator.state()["role_assignments"] if a["principal_id"] == principal_id]


def cluster_nodes(emulator, cluster=C.CLUSTER_NAME):
    return {n["metadata"]["name"]: n for n in emulator.state()["nodes"].get(cluster, [])}


def is_ready(node_object):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node_object["status"].get("conditions", []))


def arm_writes(emulator):
    """The ARM requests that change something (PUT, PATCH, DELETE, POST but token calls)."""
    return [r for r in emulator.state()["requests"]
            if r["server"] == "main" and r["method"] in ("PUT", "PATCH", "DELETE")
            and "/_emulator" not in r["path"]]


def install_joined(node, mirror, **answers):
    """Scenario 1's unattended install: the file the operator writes first, the preseed,
    then `apt-get install aks-flex-node`. Returns apt's CompletedProcess."""
    node.write_config(endpoint_settings(node.emulator, mirror))
    node.preseed(preseed_answers(**answers))
    return node.apt_get("install", "aks-flex-node", check=False)


def main_pid(node, unit):
    """systemd's MainPID of `unit` on the node, as a string ("0": not running)."""
    return node.c.run(["systemctl", "show", "-p", "MainPID", "--value", unit]).stdout.strip()


def wait_for_state(node, wanted=("succeeded",), timeout=180, interval=2):
    """Poll `aks-flex-node status --json` until its state is one of `wanted`; the last status."""
    seen = {}

    def settled():
        seen["status"] = node.status()
        return seen["status"].get("state") in wanted and node.c.read(PENDING_MARKER) is None

    if wait_for(settled, timeout=timeout, interval=interval):
        return seen["status"]
    status = seen["status"]
    raise AssertionError(f"the node's state is still {status.get('state')!r} after {timeout} s, not one of "
                         f"{wanted}:\n{status}\n{node.journals()}")


def restarted_agent_pass(node, timeout=180, interval=1):
    """Restart the agent service and wait for its first pass, a full one (it asks Azure with
    the configured credential, from inside the unit's sandbox), to end; the status it left.
    The pass is told by its start: the agent is stopped when the node's clock is read, so
    every run that started since is the new agent's."""
    node.c.run(["systemctl", "stop", "aks-flex-node-agent"])
    since = node.c.run(["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"]).stdout.strip()
    # The stopped agent's last run: a pass of the old agent that began in the same second as
    # `since` (times are to the second) is not the new agent's, whatever its start says.
    old = {k: node.status().get(k) for k in ("started", "finished", "pid")}
    node.c.run(["systemctl", "start", "aks-flex-node-agent"])
    seen = {}

    def ended():
        seen["status"] = status = node.status()
        return (status.get("started") or "") >= since and status.get("pass") == "full" \
            and status.get("state") not in ("running", None) \
            and {k: status.get(k) for k in old} != old

    if wait_for(ended, timeout=timeout, interval=interval):
        return seen["status"]
    raise AssertionError(f"no full agent pass ended {timeout} s after the restart at {since}:\n"
                         f"{seen.get('status')}\n{node.journals()}")


def converse(container, argv, answers, env=None, timeout=600):
    """Run argv inside on a pseudo-terminal, as a person at a terminal would: for each
    (prompt regex, reply) in order, wait for the prompt, then clear the line, type the
    reply and Enter.
    Returns (exit code, transcript). Fails naming the prompt it waited for in vain."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(container.command(argv, {"TERM": "xterm", **(env or {})}), stdin=secondary,
                            stdout=secondary, stderr=secondary, env=system_env(), start_new_session=True)
    os.close(secondary)
    transcript, pending = b"", list(answers)
    seen = 0  # the transcript up to here has been matched already
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # the other end closed: the program ended
                    chunk = b""
                if not chunk and proc.poll() is not None:
                    break
                transcript += chunk
            if pending:
                pattern, reply = pending[0]
                match = re.search(pattern.encode(), transcript[seen:])
                if match:
                    seen += match.end()
                    time.sleep(0.2)  # let the program finish drawing the prompt
                    # ^U first: readline frontends put the current answer on the line;
                    # a reply of None keeps it (Enter alone).
                    typed = b"\r" if reply is None else b"\x15" + reply.encode() + b"\r"
                    os.write(primary, typed)
                    pending.pop(0)
            elif proc.poll() is not None and not ready:
                break
        else:
            raise AssertionError(f"{argv} still runs after {timeout} s; waiting for "
                                 f"{pending[0][0] if pending else 'its end'}:\n{transcript.decode(errors='replace')[-3000:]}")
        if pending:
            raise AssertionError(f"{argv} ended before asking {pending[0][0]!r}:\n"
                                 f"{transcript.decode(errors='replace')[-3000:]}")
        return proc.wait(30), transcript.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)


def files_holding(container, text, roots=("/etc", "/var", "/root", "/run", "/tmp", "/home", "/srv")):
    """{path: (mode, uid)} of every file under `roots` in the node that contains `text`.
    The text goes to grep on stdin: not even a test secret goes on a command line. grep -r
    follows no symlink below the roots, so a file reached by several links counts once."""
    found = container.run(["grep", "-r", "-l", "-F", "-f", "-", "--", *roots], check=False,
                          timeout=300, input=text + "\n")
    paths = found.stdout.splitlines()
    if not paths:
        return {}
    stats = container.run(["stat", "-c", "%a %u %n", "--", *paths]).stdout.splitlines()
    return {path: (int(mode, 8), int(uid)) for mode, uid, path in (line.split(" ", 2) for line in stats)}
