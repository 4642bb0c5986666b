"""`make demo`: the package's main job, end to end, on this machine and nothing beyond loopback.

    python3 -m tests.e2e.demo up     [--dir demo-root] [--repo build/repo] [--release trixie|bookworm]
    python3 -m tests.e2e.demo shell  [--dir demo-root] [CMD...]   a root shell (or CMD) on the node
    python3 -m tests.e2e.demo azure  [--dir demo-root]            what Azure (the emulator) holds now
    python3 -m tests.e2e.demo down   [--dir demo-root]            power off, stop, remove everything

`up` starts the Azure emulator and the artifact mirror in a background process of their own
(`serve`), boots a Debian machine with systemd-nspawn (the e2e tests' cached root and
harness: tests/e2e/container.py; Debian 13 "trixie", the stable release, unless --release
bookworm asks for Debian 12), points its apt at the signed repository `make repo`
published, preseeds the debconf answers, installs the Arc agent (its stand-in), then runs
`apt-get install aks-flex-node` with its output on the terminal (the join, phase by
phase, comes from the postinst), and shows the
node from inside (systemd, `aks-flex-node status`) and from Azure's side. Then it leaves
the node and the services running to look around, says how to end them (`down`), and ends
with `kubectl get nodes -o wide` (this machine's kubectl) as the cluster's operator runs it:
with the kubeconfig `az aks get-credentials` gives (listClusterUserCredential), signed in as
the operator service principal.

Everything lives under --dir: services.json and services.log (the background process),
emulator/ (its state), node/ (the container's overlay and pid files), operator.kubeconfig
(0600: it holds the operator's token) and kubectl/ (kubectl's cache).
"""

import argparse
import base64
import json
import os
import pathlib
import signal
import subprocess
import shutil
import sys
import time
import types
import uuid

import yaml

from aks_flex_node.azure import roles
from aks_flex_node.paths import PENDING as PENDING_MARKER
from tests.demo import kubectl_get_nodes
from tests.e2e import container as ct
from tests.e2e import node as n
from tests.e2e.repository import Repo
from tests.emulator import constants as C

DEFAULT_DIR = ct.REPO / "demo-root"
DEFAULT_REPO = ct.REPO / "build" / "repo"
MACHINE_NAME = "demo-node-1"
HOSTNAME = "demo-node"
SERVICES_TIMEOUT = 300  # the emulator and the mirror's repacked runtime: minutes on a busy 2-core host
UNITS = ("himdsd", "containerd", "kubelet", "aks-flex-node-agent")
OPERATOR_KUBECONFIG = "operator.kubeconfig"
RBAC_WAIT = 60
ROLE_NAMES = {role.guid: role.name for role in (roles.READER, roles.AKS_RBAC_CLUSTER_ADMIN,
                                                roles.AKS_CLUSTER_ADMIN_ROLE, roles.AKS_FLEX_NODE_AGENT)}


class DemoError(Exception):
    pass


def banner(text):
    print(f"\n\033[1m== {text}\033[0m" if sys.stdout.isatty() else f"\n== {text}", flush=True)


def say(text=""):
    print(text, flush=True)


# ---- the services: the emulator and the artifact mirror, in a process of their own ----------

def serve(directory, release=ct.DEFAULT_RELEASE):
    """Run the emulator and the mirror until SIGTERM; write their endpoints to services.json.

    The emulator is this process's child with --exit-with-parent: it ends with us, however
    we end. The mirror serves Debian's containerd, runc and CNI plugins (from the cached
    base root's suite) and the emulator's stand-in kubelet."""
    from tests.e2e.mirror import Mirror
    from tests.emulator_fixtures import start_emulator

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    base = ct.BaseRoot(release)
    debs = base.runtime_debs()
    emulator = start_emulator(directory / "emulator")
    mirror = Mirror(debs, emulator)
    try:
        info = {"pid": os.getpid(), "emulator": emulator.endpoints,
                "mirror": {"url": mirror.url, "versions": mirror.versions, "digests": mirror.digests()}}
        partial = directory / "services.json.partial"
        partial.write_text(json.dumps(info, indent=2) + "\n")
        os.replace(partial, directory / "services.json")
        while not stop:
            time.sleep(0.25)
            if emulator.process.poll() is not None:
                print(f"the emulator exited {emulator.process.returncode}", file=sys.stderr)
                return 1
    finally:
        mirror.stop()
        emulator.stop()
    return 0


def start_services(directory, release):
    """serve() in the background (its own session: it outlives `up`); its endpoints."""
    from tests.emulator_fixtures import Emulator

    log = open(directory / "services.log", "ab")
    env = ct.system_env(PYTHONPATH=str(ct.REPO))
    process = subprocess.Popen([sys.executable, "-m", "tests.e2e.demo", "serve", "--dir", str(directory),
                                "--release", release],
                               cwd=str(ct.REPO), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               start_new_session=True)
    log.close()
    (directory / "services.pid").write_text(f"{process.pid}\n")
    info_path = directory / "services.json"
    deadline = time.monotonic() + SERVICES_TIMEOUT
    while not info_path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            tail = (directory / "services.log").read_text(errors="replace")[-3000:]
            raise DemoError(f"the emulator and mirror did not start (see {directory}/services.log):\n{tail}")
        time.sleep(0.2)
    info = json.loads(info_path.read_text())
    emulator = Emulator(info["emulator"], process, directory / "emulator")
    # The mirror runs in serve()'s process: what `up` needs of it, as serve() wrote it down.
    mirror = types.SimpleNamespace(url=info["mirror"]["url"], versions=info["mirror"]["versions"],
                                   digests=lambda: info["mirror"]["digests"])
    return emulator, mirror


def attach_services(directory):
    """The running services' client objects, from services.json; None when none run."""
    from tests.emulator_fixtures import Emulator

    pid = _services_pid(directory)
    if pid is None:
        return None
    info = json.loads((directory / "services.json").read_text())
    return Emulator(info["emulator"], None, directory / "emulator")


def _services_pid(directory):
    """The pid of our serve process when it still runs (pids are reused: check its argv)."""
    try:
        pid = int((directory / "services.pid").read_text())
        argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if b"tests.e2e.demo" in argv and b"serve" in argv and ct.pid_alive(pid) else None


def stop_services(directory, timeout=20):
    pid = _services_pid(directory)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while ct.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if ct.pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    return True


# ---- up --------------------------------------------------------------------------------

def _leader(directory):
    try:
        pid = int((directory / "node" / "leader.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if ct.pid_alive(pid) else None


def up(directory, repo_dir, release=ct.DEFAULT_RELEASE):
    repo = Repo(repo_dir).check_published()
    down(directory, quiet=True)
    directory.mkdir(parents=True, exist_ok=True)

    banner("Azure, emulated on loopback: ARM, Entra ID, HIMDS, the cluster's API server, the artifacts")
    base = ct.BaseRoot(release)
    machine = f"Debian {ct.RELEASES[release]} ({release})"
    if not base.stamp.exists():
        say(f"first run: building the {machine} root the node boots from ({base.tarball.name}, "
            f"mmdebstrap, a few minutes; cached in {base.cache})")
    base.ensure()
    emulator, mirror = start_services(directory, release)
    say(f"ARM          {emulator.arm}\nEntra ID     {emulator.authority}\nAPI server   {emulator.apiserver}\n"
        f"artifacts    {mirror.url}  (containerd {mirror.versions['containerd']}, runc {mirror.versions['runc']}, "
        f"CNI {mirror.versions['cni']}: Debian's builds; the kubelet is a stand-in)\n"
        f"cluster      {C.CLUSTER_ID}")

    banner(f"a {machine} machine, booted with systemd-nspawn (it shares this host's loopback)")
    box = ct.Container(base.tree, directory / "node", name="aks-flex-demo", hostname=HOSTNAME,
                       binds=[(repo.path, n.REPO_MOUNT, True),
                              (emulator.himds_key_dir, n.UPSTREAM_KEYS_MOUNT, False)])
    box.start()
    say(f"systemd is pid {box.leader} on this host; {box.run(['systemctl', 'is-system-running']).stdout.strip()}")
    node = n.Node(box, emulator)

    banner(f"its APT source: the signed repository in {repo.path}")
    node.add_repository(repo)
    say(f"{n.SOURCES}:\n" + _indent(box.read(n.SOURCES).decode()))
    node.configure_arc_agent()

    banner("what the operator writes first: the endpoints (not asked by debconf), then the preseed")
    box.write(n.DIGESTS, mirror.digests(), 0o644)  # the digests of the mirror's builds (artifact_digests_file)
    node.write_config(n.endpoint_settings(emulator, mirror))
    say(f"{n.CONF} (0600):\n" + _indent(box.read(n.CONF).decode()))
    answers = n.preseed_answers(machine_name=MACHINE_NAME)
    node.preseed(answers)
    say("debconf-set-selections < preseed (the secret goes on stdin, never on a command line):")
    say(_indent("".join(f"aks-flex-node aks-flex-node/{q} {t} {'********' if t == 'password' else v}\n"
                        for q, (t, v) in answers.items())))

    banner("the Arc agent first, as Microsoft's docs have it (here: the stand-in package, same repository)")
    apt_install(box, "azcmagent")
    banner("apt-get install aks-flex-node (unattended; the postinst joins, phase by phase)")
    apt_install(box, "aks-flex-node")

    if box.read(PENDING_MARKER) is not None:
        banner("the join is pending: the agent service retries it; its journal")
        follow_agent(node)

    banner("the node, from inside")
    for unit in UNITS:
        say(f"  {unit:<20} {box.is_enabled(unit):<9} {box.is_active(unit)}")
    # --wait: the agent's first pass may be running; wait for a run's end, as an operator would.
    say("$ aks-flex-node status --wait")
    shown = box.run(["aks-flex-node", "status", "--wait", "--timeout", "300"], check=False, timeout=330)
    say(_indent(shown.stdout))
    if shown.returncode != 0 or "state: succeeded" not in shown.stdout:
        raise DemoError(f"aks-flex-node status --wait exited {shown.returncode}: {shown.stderr.strip()}\n"
                        f"{node.journals(('aks-flex-node-agent', 'kubelet'))}")

    banner("the node, from Azure's side")
    wait_ready(emulator)
    show_azure(emulator)

    banner("look around")
    say(f"""  make demo-shell                                    a root shell on the node (nsenter)
  make demo-shell CMD='aks-flex-node status --json'  one command on it
  make demo-azure                                    what Azure (the emulator) holds now
  on the node, for instance:
    systemctl status kubelet containerd aks-flex-node-agent himdsd
    journalctl -u aks-flex-node-agent      what the agent changed, and why
    cat /var/lib/aks-flex-node/status.json  the status contract
    cat /var/lib/kubelet/kubeconfig         an exec credential plugin, no secret
    aks-flex-node token | head -c 300       the kubelet's credential, from HIMDS
    ctr version                             Debian's containerd, running
    dpkg-reconfigure aks-flex-node          re-ask and rejoin
    apt-get remove aks-flex-node            unjoin (then: make demo-azure)
    apt-get purge aks-flex-node             nothing of ours left
  KUBECONFIG={_shown(directory / OPERATOR_KUBECONFIG)} kubectl get nodes -o wide   the operator's view (an hour's token)
clean up: make demo-clean   (powers the node off, stops the emulator, removes {_shown(directory)})""")

    banner("the cluster, as its operator sees it")
    kubeconfig = operator_kubeconfig(emulator, directory)
    env = ct.system_env(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    wait_authorized(kubeconfig, env, directory / "kubectl")
    rc = kubectl_get_nodes(str(kubeconfig), _shown(kubeconfig), env, str(directory / "kubectl"))
    if rc not in (None, 0):
        raise DemoError(f"kubectl get nodes -o wide exited {rc}")
    return 0


# ---- the operator's kubeconfig -----------------------------------------------------------------

def operator_kubeconfig(emulator, directory):
    """The kubeconfig an operator holds after `az aks get-credentials` and kubelogin's service
    principal login, as the operator SP (Owner on the subscription); written 0600 in `directory`.

    listClusterUserCredential gives an Azure RBAC cluster's user kubeconfig: no secret, its user
    an exec of kubelogin (Azure/kubelogin docs/book/src/concepts/aks.md). kubelogin is not on
    this machine, so we do what its `--login spn` does (docs/book/src/concepts/login-modes/sp.md)
    and put the result in the user entry: a client-credentials token of the SP for the AKS server
    application. Owner has no Kubernetes data actions: the operator first gives itself a role that
    has them, "Azure Kubernetes Service RBAC Cluster Admin" at the cluster (Learn, "Use Azure RBAC
    for Kubernetes Authorization": https://learn.microsoft.com/azure/aks/manage-azure-rbac), the
    built-in role with data actions that the emulator models."""
    say(f"$ az role assignment create --role 'Azure Kubernetes Service RBAC Cluster Admin' "
        f"--assignee {C.SP_CLIENT_ID} --scope {C.CLUSTER_ID}")
    assignment = f"{C.CLUSTER_ID}/providers/Microsoft.Authorization/roleAssignments/{uuid.uuid4()}"
    definition = (f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/Microsoft.Authorization/roleDefinitions/"
                  f"{roles.AKS_RBAC_CLUSTER_ADMIN.guid}")
    status, _, body = emulator.arm_call("PUT", assignment, C.AUTHORIZATION_API, {"properties": {
        "roleDefinitionId": definition, "principalId": C.SP_OBJECT_ID, "principalType": "ServicePrincipal"}})
    if status not in (200, 201):
        raise DemoError(f"the operator's role assignment failed: HTTP {status}: {body}")
    path = directory / OPERATOR_KUBECONFIG
    say(f"$ az aks get-credentials --resource-group {C.CLUSTER_RG} --name {C.CLUSTER_NAME} "
        f"--file {_shown(path)}; kubelogin convert-kubeconfig --login spn --kubeconfig {_shown(path)}")
    status, _, body = emulator.arm_call("POST", f"{C.CLUSTER_ID}/listClusterUserCredential",
                                        C.CONTAINERSERVICE_API_CURRENT)
    if status != 200:
        raise DemoError(f"listClusterUserCredential failed: HTTP {status}: {body}")
    config = yaml.safe_load(base64.b64decode(body["kubeconfigs"][0]["value"]))
    user = config["users"][0]["user"]
    if "exec" not in user:
        raise DemoError(f"listClusterUserCredential's kubeconfig has no kubelogin exec: {sorted(user)}")
    config["users"][0]["user"] = {"token": emulator.arm_token(scope=f"{C.AKS_SERVER_APP_ID}/.default")}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a kubeconfig left by an earlier run keeps its mode otherwise
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, default_flow_style=False)
    return path


def wait_authorized(kubeconfig, env, home, timeout=RBAC_WAIT):
    """Until the operator's new role has reached the API server (`kubectl auth can-i list nodes`),
    as an operator waits out Azure RBAC's propagation."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return
    env = dict(env, KUBECONFIG=str(kubeconfig), HOME=str(home))
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run([kubectl, "auth", "can-i", "list", "nodes"], env=env, capture_output=True,
                              text=True, timeout=60)
        if proc.stdout.strip() == "yes" or time.monotonic() > deadline:
            return
        time.sleep(1)


def apt_install(box, package):
    """`apt-get install PACKAGE` on the node, its output on this terminal."""
    say(f"$ DEBIAN_FRONTEND=noninteractive apt-get install -y {package}")
    rc = subprocess.run(box.command(["apt-get", *n.APT_OPTS, "install", package], n.APT_ENV),
                        env=ct.system_env()).returncode
    if rc != 0:
        raise DemoError(f"apt-get install {package} exited {rc}")


def follow_agent(node, timeout=300):
    """Show the agent's journal (what it changes, and why) until its join is over."""
    journal = subprocess.Popen(node.c.command(["journalctl", "--follow", "--lines=50", "--output=cat",
                                               "--unit=aks-flex-node-agent"]),
                               env=ct.system_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = node.status()
            if status.get("state") in ("succeeded", "failed") and node.c.read(PENDING_MARKER) is None:
                time.sleep(1)  # the last lines
                return status
            time.sleep(1)
        raise DemoError(f"the agent's join is not over after {timeout} s")
    finally:
        os.killpg(journal.pid, signal.SIGTERM)
        journal.wait()


def wait_ready(emulator, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = n.cluster_nodes(emulator).get(MACHINE_NAME)
        if found and n.is_ready(found):
            return found
        time.sleep(1)
    raise DemoError(f"node {MACHINE_NAME} is not Ready in the cluster after {timeout} s")


def show_azure(emulator):
    state = emulator.state()
    machines = state["machines"]
    if not machines:
        say("  no Arc machine")
    for machine in machines:
        say(f"  Arc machine   {machine['id']}\n                identity {machine['principal_id']}")
        for a in n.machine_role_assignments(emulator, machine["principal_id"]):
            say(f"  role          {ROLE_NAMES.get(a['role_guid'], a['role_guid'])} on {a['scope'].rsplit('/', 1)[-1]}")
    for cluster, nodes in state["nodes"].items():
        for found in nodes:
            ready = "Ready" if n.is_ready(found) else "NotReady"
            say(f"  node          {found['metadata']['name']} in {cluster}: {ready}, kubelet "
                f"{found['status'].get('nodeInfo', {}).get('kubeletVersion', '?')}")
    if not any(state["nodes"].values()):
        say("  no node in the cluster")


def _indent(text):
    return "".join(f"    {line}\n" for line in text.rstrip("\n").splitlines())


def _shown(path):
    try:
        return str(pathlib.Path(path).resolve().relative_to(pathlib.Path.cwd()))
    except ValueError:
        return str(path)


# ---- shell, azure, down ---------------------------------------------------------------------

def shell(directory, argv):
    leader = _leader(directory)
    if leader is None:
        raise DemoError(f"no demo node runs (nothing booted under {_shown(directory)}): `make demo` starts one")
    env = {"TERM": os.environ.get("TERM", "xterm")}
    return subprocess.run(ct.nsenter_argv(leader, argv or ["/bin/bash", "--login"], env),
                          env=ct.system_env()).returncode


def azure(directory):
    emulator = attach_services(directory)
    if emulator is None:
        raise DemoError(f"the emulator is not running (no services under {_shown(directory)}): `make demo` starts it")
    show_azure(emulator)
    return 0


def down(directory, quiet=False):
    """Power the node off (forcibly when it will not), stop the services, remove `directory`."""
    report = []
    run_dir = directory / "node"
    if run_dir.exists():
        if not ct.power_off_recorded(run_dir):
            report.append("the node did not power off in time: killed")
        report += ct.clean_run_dir(run_dir)
    if stop_services(directory):
        report.append("stopped the emulator and the mirror")
    if directory.exists():
        left = ct.mounts_under(directory)
        if left:
            raise DemoError(f"still mounted under {directory}: {left}; not removing it")
        shutil.rmtree(directory)
        report.append(f"removed {_shown(directory)}")
    if not quiet:
        say("\n".join(report) or "no demo to clean up")
    return 0


def main(argv=None):
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=pathlib.Path, default=DEFAULT_DIR, help="where the demo lives (demo-root)")
    parser = argparse.ArgumentParser(prog="python3 -m tests.e2e.demo", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up", parents=[common], help="build the node and join it")
    up_parser.add_argument("--repo", type=pathlib.Path, default=DEFAULT_REPO,
                           help="the published repository (build/repo)")
    up_parser.add_argument("--release", choices=tuple(ct.RELEASES), default=ct.DEFAULT_RELEASE,
                           help=f"the Debian release the node runs ({ct.DEFAULT_RELEASE})")
    serve_parser = sub.add_parser("serve", parents=[common],
                                  help="(internal) the emulator and the mirror, until SIGTERM")
    serve_parser.add_argument("--release", choices=tuple(ct.RELEASES), default=ct.DEFAULT_RELEASE)
    shell_parser = sub.add_parser("shell", parents=[common], help="a root shell on the node, or CMD")
    shell_parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="CMD")
    sub.add_parser("azure", parents=[common], help="what Azure (the emulator) holds now")
    sub.add_parser("down", parents=[common], help="power off, stop, remove everything")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    if args.command != "serve" and os.geteuid() != 0:
        parser.error("the demo mounts and boots a container: run it as root")
    try:
        if args.command == "up":
            return up(directory, args.repo.resolve(), args.release)
        if args.command == "serve":
            return serve(directory, args.release)
        if args.command == "shell":
            return shell(directory, args.argv)
        if args.command == "azure":
            return azure(directory)
        return down(directory)
    except (DemoError, ct.E2EError) as err:
        print(f"\ndemo: {err}", file=sys.stderr)
        if args.command == "up":
            print("demo: what runs is left for a look (make demo-shell); make demo-clean ends it", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
