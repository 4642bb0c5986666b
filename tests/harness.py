"""A node under a root prefix, configured against the emulator, and the CLI run on it.

Shared by the integration tests and `make demo`. The CLI runs as a subprocess, as an
operator would run it; the host commands it calls (systemctl, sysctl, modprobe, swapoff,
azcmagent) are the stand-ins in tests/fakes/bin, the kubelet is the stand-in the emulator
serves inside the Kubernetes artifact, and Azure is the emulator.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

from tests import digest_fixtures
from tests.emulator import constants as C

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACHINE_NAME = "flex-node-1"
SECRET_PATH = "/etc/aks-flex-node/sp-client-secret"
CA_PATH = "/etc/aks-flex-node/emulator-ca.pem"
CONFIG_PATH = "/etc/aks-flex-node/aks-flex-node.conf"


def prepare_root(root):
    """The parts of a Debian 12 machine the preflight checks and steps look at."""
    files = {
        "/etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
                           'VERSION_ID="12"\nID=debian\n',
        "/etc/fstab": "# <file system> <mount point> <type> <options> <dump> <pass>\n"
                      "UUID=1234 / ext4 errors=remount-ro 0 1\n"
                      "/swapfile none swap sw 0 0\n",
        "/proc/swaps": "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                       "/swapfile                               file\t\t1048572\t\t0\t\t-2\n",
        "/proc/modules": "ext4 999424 1 - Live 0x0000000000000000\n",
        "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
    }
    for path, text in files.items():
        full = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    # Directories every Debian system has (base-files, systemd, procps, kmod).
    for path in ("/run", "/tmp", "/usr/local/bin", "/usr/local/sbin", "/opt", "/etc/default",
                 "/etc/systemd/system", "/etc/sysctl.d", "/etc/modules-load.d", "/var/lib",
                 "/var/cache", "/var/log"):
        os.makedirs(os.path.join(root, path.lstrip("/")), exist_ok=True)


def exec_plugin_wrapper(directory):
    """What the kubelet's kubeconfig runs: this checkout's CLI, with this interpreter."""
    path = os.path.join(directory, "aks-flex-node")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m aks_flex_node \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def write_config(root, emu, wrapper, cluster_id=None, extra=None, digests=()):
    """A config pointing at the emulator, the SP secret in its own 0600 file, the
    emulator's artifact digests pinned (tests/digest_fixtures.py; `digests`: lines of
    digest_fixtures.line for artifacts a test placed in the mirror)."""
    os.makedirs(os.path.join(root, "etc/aks-flex-node"), exist_ok=True)
    shutil.copy(emu.ca_bundle, os.path.join(root, CA_PATH.lstrip("/")))
    secret = os.path.join(root, SECRET_PATH.lstrip("/"))
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(C.SP_CLIENT_SECRET + "\n")
    os.chmod(secret, 0o600)
    values = {
        "subscription_id": C.SUBSCRIPTION_ID,
        "tenant_id": C.TENANT_ID,
        "cloud": "custom",
        "arm_endpoint": emu.arm,
        "authority_host": emu.authority,
        "ca_bundle": CA_PATH,
        "auth_method": "service-principal",
        "sp_client_id": C.SP_CLIENT_ID,
        "sp_client_secret_file": SECRET_PATH,
        "machine_name": MACHINE_NAME,
        "arc_tags": "env=test, owner=ci",
        "himds_endpoint": emu.himds,
        "cluster_resource_id": cluster_id or C.CLUSTER_ID,
        "artifact_mirror": emu.artifacts,
        # The pause image's registry is one more endpoint preflight probes (its
        # image-registry check): the emulator answers for it, as for the mirror.
        "pause_image": emu.pause_image,
        "artifact_digests_file": digest_fixtures.write_digests(root, digests),
        "node_labels": "team=edge",
        "node_ready_timeout": "60",
        "exec_plugin_command": wrapper,
    }
    values.update(extra or {})
    path = os.path.join(root, CONFIG_PATH.lstrip("/"))
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(render_config(values))
    return path


def render_config(values):
    """A configuration file with `values` in their sections (keys are unique across them)."""
    from aks_flex_node import config

    sections = {}
    for key, value in values.items():
        sections.setdefault(config.section_of(key), []).append(f"{key} = {value}")
    return "".join(f"[{section}]\n" + "\n".join(lines) + "\n\n" for section, lines in sections.items())


class Node:
    """A scratch node: root prefix, fake state dir, the environment for the CLI."""

    def __init__(self, root, state_dir, emu, env):
        self.root, self.state_dir, self.emu, self.env = root, state_dir, emu, env

    def cli(self, *args, check=False, timeout=300, input=None):
        argv = [sys.executable, "-m", "aks_flex_node", *args, "--root", self.root]
        proc = subprocess.run(argv, env=self.env, cwd=REPO, capture_output=True, text=True,
                              timeout=timeout, input=input)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def cli_json(self, *args, **kw):
        proc = self.cli(*args, "--json", **kw)
        try:
            return proc, json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"not JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def path(self, node_path):
        return os.path.join(self.root, node_path.lstrip("/"))

    def read(self, node_path):
        with open(self.path(node_path), "rb") as f:
            return f.read()

    def mode(self, node_path):
        return stat.S_IMODE(os.stat(self.path(node_path)).st_mode)

    def files(self):
        """Every file and directory under the root (relative node paths)."""
        out = set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                out.add("/" + os.path.relpath(os.path.join(dirpath, name), self.root))
        return out

    def calls(self):
        """The stand-ins' recorded calls."""
        path = os.path.join(self.state_dir, "calls.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]


def describe():
    return textwrap.dedent(__doc__)
