"""Preflight checks, kubeadm style: each says what it found and what to do about it.

A check returns None (pass) or a Finding. Errors stop a bootstrap unless named in
--ignore-preflight-errors (or `all`); warnings never do. Checks only read.
"""

import dataclasses
import os
import platform
import shutil
import socket
from concurrent.futures import ThreadPoolExecutor

from aks_flex_node.artifact_digests import ArtifactDigestUnknown
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.errors import FlexNodeError, PreflightError, TemporaryError, UsageError
from aks_flex_node.host.kernel import Unknown
from aks_flex_node.http_policy import DIRECT, ProxySettingError
from aks_flex_node.steps import cloud_reads, gpu, kubelet_auth
from aks_flex_node.steps.artifacts import ARCHES, node_arch
from aks_flex_node.steps.kinds import Kind
from aks_flex_node.steps.kubelet_paths import CA_PATH
from aks_flex_node.steps.preflight import egress, identity, reachability
from aks_flex_node.steps.system import MODULES

ERROR = "error"
WARNING = "warning"
MIN_FREE_BYTES = 2 * 1024**3  # binaries, images and logs of a small node
# The releases the project proves, each by its own stack (docs/testing.md, "What each release
# is proven by"): the suite on the release's Python and SDKs, and for Debian the package and
# the booted lifecycle. One of these passes; an older release of the family, a newer one, or
# one without a VERSION_ID (Debian testing and unstable) is warned about, never refused:
# nothing proves it, and nothing known stops it.
TESTED_RELEASES = {
    "debian": ("12", "13"),
    "ubuntu": ("22.04", "24.04", "26.04"),
}
NAMES = {"debian": "Debian", "ubuntu": "Ubuntu"}
TESTED = ", or ".join(f"{NAMES[family]} {', '.join(releases[:-1])} or {releases[-1]}"
                    for family, releases in TESTED_RELEASES.items())


class PreflightTransientError(TemporaryError):
    """Every failed check failed in a way that passes on its own (a timeout, a dropped
    connection): exit 75, so the agent tries the join again instead of waiting for a fix."""

    code = "preflight"


@dataclasses.dataclass
class Finding:
    severity: str
    message: str
    remedy: str = ""
    transient: bool = False  # may pass on its own: see _is_transient


@dataclasses.dataclass
class Result:
    name: str
    status: str  # pass | warning | error | ignored | skipped
    message: str = ""
    remedy: str = ""
    transient: bool = False

    def to_dict(self):
        return dataclasses.asdict(self)


def _os_release(host):
    raw = host.read_bytes("/etc/os-release") or host.read_bytes("/usr/lib/os-release")
    info = {}
    for line in (raw or b"").decode(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            info[key.strip()] = value.strip().strip('"')
    return info


def check_root(ctx):
    if os.geteuid() != 0:
        return Finding(ERROR, f"running as uid {os.geteuid()}, not root",
                       "run it as root (sudo aks-flex-node ...)")


def check_os(ctx):
    info = _os_release(ctx.host)
    family = info.get("ID", "")
    name = info.get("PRETTY_NAME") or family or "unknown"
    if family not in TESTED_RELEASES:
        if "debian" in info.get("ID_LIKE", "").split() or "ubuntu" in info.get("ID_LIKE", "").split():
            # A derivative may carry other SDK versions than its parent: never measured.
            return Finding(WARNING, f"{name} is not tested (a derivative of {info['ID_LIKE']})",
                           f"expect it to work only as far as it matches its parent; tested: {TESTED}")
        return Finding(ERROR, f"unsupported OS {name}", f"use {TESTED}")
    version = info.get("VERSION_ID", "")
    tested = TESTED_RELEASES[family]
    # Debian's VERSION_ID is the major release ("13"); a point release shows only in
    # /etc/debian_version. Ubuntu's is year.month ("24.04").
    if version in tested:
        return None
    if _release_key(version) is not None and _release_key(version) < _release_key(tested[0]):
        return Finding(WARNING, f"{name} is older than we test", f"use {TESTED}")
    return Finding(WARNING, f"{name} is not a release we test", f"expect it to work as far as it matches "
                   f"{NAMES[family]} {tested[-1]}; tested: {TESTED}")


def _release_key(version):
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return None


def check_arch(ctx):
    if platform.machine() not in ARCHES:
        return Finding(ERROR, f"CPU architecture {platform.machine()} has no Kubernetes release",
                       "use an x86_64 or aarch64 machine")


def check_cgroups(ctx):
    if not ctx.host.exists("/sys/fs/cgroup/cgroup.controllers"):
        return Finding(ERROR, "the unified cgroup hierarchy (cgroup v2) is not mounted",
                       "boot with systemd.unified_cgroup_hierarchy=1 (the default on Debian 11+ "
                       "and Ubuntu 21.10+)")


def check_swap(ctx):
    on = ctx.host.kernel.swap_on()
    if isinstance(on, Unknown):
        return Finding(WARNING, f"cannot tell whether swap is on: {on.reason}",
                       "the system phase comments swap out of /etc/fstab all the same")
    if on:
        return Finding(WARNING, "swap is on", "the system phase turns it off and comments it "
                       "out of /etc/fstab")


def check_modules(ctx):
    release = platform.release()
    dep = (ctx.host.read_bytes(f"/lib/modules/{release}/modules.dep") or b"").decode()
    states = {m: ctx.host.kernel.module_loaded(m) for m in MODULES}
    unknown = [m for m, state in states.items() if isinstance(state, Unknown)]
    missing = [m for m, state in states.items()
               if state is False and f"/{m}.ko" not in dep]
    if missing:
        return Finding(WARNING, f"kernel module(s) {', '.join(missing)} neither loaded nor found "
                       f"for kernel {release}", "install the kernel's modules package "
                       "(linux-image-*) or load them from the container host")
    if unknown:
        return Finding(WARNING, f"cannot tell whether kernel module(s) {', '.join(unknown)} are "
                       f"loaded: {states[unknown[0]].reason}",
                       "on a container, load them on its host (modprobe)")


def check_ip_forward(ctx):
    value = ctx.host.kernel.sysctl("net.ipv4.ip_forward")
    if not isinstance(value, Unknown) and value != "1":
        return Finding(WARNING, "net.ipv4.ip_forward is 0", "the system phase sets it to 1")


def check_port(ctx):
    if str(ctx.host.root) != "/":
        return None
    if ctx.host.systemd.is_active("kubelet") and ctx.ledger.has(Kind.UNIT, "kubelet"):
        return None  # our own kubelet holds it
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", 10250))
        except OSError:
            return Finding(ERROR, "port 10250 (the kubelet's) is in use",
                           "stop whatever listens there: ss -ltnp 'sport = :10250'")


def check_clock(ctx):
    if ctx.host.exists("/run/systemd/timesync/synchronized"):
        return None
    result = ctx.host.run_system(["timedatectl", "show", "-p", "NTPSynchronized", "--value"],
                                 ok_codes=range(256))
    if result.stdout.strip() == "yes" or getattr(result, "skipped", False):
        return None
    return Finding(WARNING, "the clock is not known to be synchronized",
                   "enable NTP (timedatectl set-ntp true): Entra tokens and TLS need a right clock")


def check_disk(ctx):
    path = ctx.host.path("/var")
    while not os.path.exists(path):
        path = os.path.dirname(path)
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        return Finding(ERROR, f"only {free // 1024**2} MiB free under /var",
                       f"free at least {MIN_FREE_BYTES // 1024**3} GiB")


def check_azcmagent(ctx):
    command = ctx.config.azcmagent
    installed = (os.path.exists(ctx.host.path(command)) if os.path.isabs(command)
                 else ctx.host.which(command))
    if not installed:
        return Finding(ERROR, f"the Azure Connected Machine agent ({command}) is not installed",
                       "install the azcmagent package from Microsoft's repository "
                       "(https://aka.ms/azcmagent-linux), then run again")


def _unreachable(what, failure, remedy):
    again = " (tried twice)" if failure.transient else ""
    return Finding(ERROR, f"{what} is unreachable{again}: {failure.why}", remedy, transient=failure.transient)


def check_arm(ctx):
    # ARM and Entra ID, each named with the hosts to allow when it does not answer (egress.py).
    return _verdicts(egress.azure_services(ctx))


def check_arc_services(ctx):
    return _verdicts(egress.arc_services(ctx))


def check_artifact_hosts(ctx):
    return _verdicts(egress.artifact_hosts(ctx))


def check_image_registry(ctx):
    return _verdicts(egress.registry_hosts(ctx))


def check_himds(ctx):
    # One `azcmagent show` per run, shared with the identity checks (identity.agent_shown).
    shown = identity.agent_shown(ctx) if check_azcmagent(ctx) is None else None
    if not shown or str(shown.get("status", "")).lower() != "connected":
        return None  # nothing to reach before the machine is connected
    # HIMDS is on this machine: always direct, whatever the proxy settings (azure/himds.py).
    failure = reachability.reachable(ctx.config.himds_endpoint, DIRECT)
    if failure:
        return _unreachable(f"HIMDS at {ctx.config.himds_endpoint}", failure,
                            "systemctl restart himdsd (the Azure Connected Machine agent)")


def check_cluster_api(ctx):
    cfg = ctx.config
    if cfg.is_set("api_server") and cfg.is_set("cluster_ca_file") and cfg.cluster_ca_file:
        # Given by the operator (bootstrap-token mode, or overriding the pool's): known now.
        server, ca_file = cfg.api_server_url, cfg.cluster_ca_file
    else:
        try:
            server, _ca = kubelet_auth.api_server_of(ctx.host, kubelet_auth.for_mode(ctx.mode))
        except FlexNodeError:
            return None  # not known before the credentials phase; it is checked there
        ca_file = CA_PATH
    if _api_server_answered(ctx, server, ca_file):
        return None
    # The CA's real path is handed to ssl, which opens it itself.
    endpoint = egress.api_server(server)
    failure = egress.reachable(ctx, endpoint.url, cafile=ctx.host.path(ca_file) if ctx.host.exists(ca_file) else None)
    if failure and failure.untrusted and ctx.mode.asks_azure and not cfg.is_set("cluster_ca_file"):
        # The CA is the one a past full pass read from Azure: after `az aks rotate-certs` it is
        # the old one (Learn, "Certificate rotation in AKS"). The credentials phase reads it
        # again and the kubelet's phase repairs it (steps/kubelet_auth.py): not a preflight error.
        return Finding(WARNING, f"the cluster's API server {server} presents a certificate the CA on this node "
                                f"does not verify ({failure.why}): were the cluster's certificates rotated?",
                       "nothing, on a full pass: the cluster's CA is read again from Azure and the kubelet's "
                       "credentials renewed (docs/operations.md, CA rotation)")
    if failure:
        return Finding(*egress.verdict(endpoint, failure, ctx.http_policy))


def _api_server_answered(ctx, server, ca_file):
    """Whether the run's shared read of the Node (steps/cloud_reads.py, steps/node.py) had an
    answer from `server` (its Node, or a refusal of the credential: an answer all the same)
    over TLS verified by the CA `ca_file` holds: then the API server is reachable, and no
    probe of its own is sent. Anything else (no such read, another server or CA, a read that
    failed) leaves it to the probe, whose verdict says why."""
    seen = cloud_reads.node(ctx)
    if seen is None or seen.server.rstrip("/") != server.rstrip("/"):
        return False
    if seen.error is not None and not seen.refused:
        return False
    return ctx.host.read_bytes(ca_file) == seen.ca_pem


def check_agent_pool(ctx):
    """Agent-pool mode: the node's identity holds what the join needs on the pool (the Flex
    Node Agent Role's actions, read through ARM's permissions API, which answers any caller
    about itself), and the pool is a FlexNodes pool where the identity may read it (the
    role does not grant agentPools/read; then listBootstrapData, in the cluster phase,
    answers 404 for a pool that does not exist)."""
    from aks_flex_node.azure import agentpool, permissions

    cfg = ctx.config
    clients, scope = ctx.azure.clients, agentpool.pool_id(cfg.cluster, cfg.agent_pool)
    blocks = permissions.pool_blocks(clients, cfg.cluster, cfg.agent_pool)
    missing = [a for a in permissions.POOL_ACTIONS if not permissions.allowed(a, blocks)]
    if missing:
        return Finding(ERROR, f"this node's identity lacks {', '.join(missing)} on agent pool {scope}",
                       f"az role assignment create --assignee <its client ID> --role {agentpool.ROLE_GUID} "
                       f"--scope {scope} ({agentpool.ROLE_NAME}; it can take minutes to apply)")
    if not permissions.allowed(permissions.POOL_READ, blocks):
        return None
    pool = agentpool.get_pool(clients, cfg.cluster, cfg.agent_pool)
    if pool is None:
        return Finding(ERROR, f"agent pool {cfg.agent_pool} does not exist in {cfg.cluster.resource_id}",
                       f"create it: az aks nodepool add --cluster-name {cfg.cluster.name} --resource-group "
                       f"{cfg.cluster.resource_group} --name {cfg.agent_pool} --vm-set-type FlexNodes, or set "
                       "agent_pool to an existing FlexNodes pool")
    if pool.type != agentpool.FLEX_NODES:
        return Finding(ERROR, f"agent pool {cfg.agent_pool} is of type {pool.type}, not {agentpool.FLEX_NODES}",
                       "set agent_pool to a FlexNodes pool (only those take machines from outside Azure)")


def check_proxy(ctx):
    """What the proxy settings cannot be handed to, found before anything changes: the Arc
    agent's limits (http_policy.HttpPolicy.check_for_azcmagent) and what a systemd
    environment file cannot hold."""
    policy = ctx.http_policy
    try:
        policy.check_for_azcmagent()
        policy.environment_file(ctx.config.cluster_domain)
    except ProxySettingError as err:
        return Finding(ERROR, str(err), "change https_proxy (and no_proxy) in the config")


def check_artifact_digests(ctx):
    """Every release the configuration names has a trusted digest (artifact_digests.py), so
    a version nothing vouches for stops the run before one binary is installed, not half
    way through the install branch. Not in agent-pool mode: the pool's bootstrap data names
    the versions, in the cluster phase (the install steps refuse one there)."""
    cfg, arch, unknown = ctx.config, node_arch(), []
    for artifact, key in (("kubernetes", "kubernetes_version"), ("containerd", "containerd_version"),
                          ("runc", "runc_version"), ("cni", "cni_version")):
        version = cfg[key]
        if not version:
            continue  # the cluster's, known later (the kubernetes phase checks it)
        try:
            cfg.artifact_digest(artifact, str(version), arch)
        except ArtifactDigestUnknown:
            unknown.append(f"{artifact} {version} ({key})")
    if unknown:
        return Finding(ERROR, f"no trusted digest for {', '.join(unknown)} on {arch}: neither this package's "
                              "table nor artifact_digests_file names it",
                       "choose versions this release lists (docs/configuration.md, \"Artifact digests\"), or "
                       "pin the digests of builds you trust in artifact_digests_file")


def check_joined_elsewhere(ctx):
    joined = ctx.ledger.joined.get("cluster_resource_id")
    wanted = ctx.config.cluster.resource_id
    if joined and joined.lower() != wanted.lower():
        return Finding(ERROR, f"this node is joined to {joined}, not to {wanted}",
                       "run `aks-flex-node unbootstrap` first (dpkg-reconfigure does it for you)")


def _verdict(verdict):
    return None if verdict is None else Finding(*verdict)


def _verdicts(verdicts):
    """A check's Findings, one per verdict (egress.py: one per missing endpoint)."""
    return [Finding(*verdict) for verdict in verdicts]


def check_machine_id(ctx):
    return _verdict(identity.machine_id_verdict(ctx))


def check_node_identity(ctx):
    if check_proxy(ctx) is not None:
        return None  # no request through a proxy the run refuses (the proxy check says why)
    return _verdict(identity.node_identity_verdict(ctx))


def check_gpu(ctx):
    """A GPU node's driver, toolkit and containerd (steps/gpu.py, docs/gpu.md)."""
    return _verdict(gpu.preflight_verdict(ctx))


def check_arc_identity(ctx):
    if check_proxy(ctx) is not None:
        return None  # as check_node_identity
    return _verdict(identity.arc_identity_verdict(ctx))


_ARC = (JoinMode.ARC,)  # the other modes use no Arc agent
_AZURE = tuple(mode for mode in JoinMode if mode.asks_azure)  # bootstrap-token calls no Azure endpoint
# (name, check, the join modes it applies in: None for every one); in the others it passes.
CHECKS = (
    ("root", check_root, None), ("os", check_os, None), ("arch", check_arch, None),
    ("cgroups", check_cgroups, None), ("swap", check_swap, None), ("kernel-modules", check_modules, None),
    ("ip-forward", check_ip_forward, None), ("port-10250", check_port, None), ("clock", check_clock, None),
    ("disk-space", check_disk, None), ("azcmagent", check_azcmagent, _ARC), ("himds", check_himds, _ARC),
    ("proxy", check_proxy, None), ("azure-endpoints", check_arm, _AZURE),
    # What a restricted network must let through (egress.py): one error per missing endpoint.
    ("arc-services", check_arc_services, _ARC), ("artifact-hosts", check_artifact_hosts, None),
    ("image-registry", check_image_registry, None),
    ("agent-pool", check_agent_pool, (JoinMode.AGENT_POOL,)), ("cluster-api", check_cluster_api, None),
    ("artifact-digests", check_artifact_digests, (JoinMode.ARC, JoinMode.BOOTSTRAP_TOKEN)),
    ("joined-elsewhere", check_joined_elsewhere, None),
    # Is the machine name another machine's? (identity.py: cloned images)
    ("machine-id", check_machine_id, None), ("node-identity", check_node_identity, None),
    ("arc-identity", check_arc_identity, _ARC), ("gpu", check_gpu, None),
)
CHECK_NAMES = tuple(name for name, _check, _modes in CHECKS)


def parse_ignored(value):
    """--ignore-preflight-errors: a comma list of check names, or `all`."""
    names = {n.strip() for n in (value or "").split(",") if n.strip()}
    unknown = names - set(CHECK_NAMES) - {"all"}
    if unknown:
        raise UsageError(f"--ignore-preflight-errors: unknown check(s) {', '.join(sorted(unknown))}; "
                         f"expected `all` or some of: {', '.join(CHECK_NAMES)}")
    return names


def _finding(check, modes, ctx):
    if modes is not None and ctx.mode not in modes:
        return None
    try:
        return check(ctx)
    except Exception as exc:  # a check that cannot run says so; it does not crash preflight
        return Finding(WARNING, f"could not check: {getattr(exc, 'message', None) or exc}")


def run_checks(ctx, ignored=()):
    """Every check, at once: each only reads, and most of the time goes to waiting on an
    endpoint (HIMDS, ARM, the API server), so the whole costs about the slowest check. The
    results keep CHECKS' order."""
    with ThreadPoolExecutor(max_workers=len(CHECKS), thread_name_prefix="preflight") as pool:
        findings = list(pool.map(lambda item: _finding(item[1], item[2], ctx), CHECKS))
    results = []
    for (name, _check, _modes), found in zip(CHECKS, findings):
        # A check finds one thing or, as the egress checks, a list: one Result each.
        for finding in found if isinstance(found, list) else [found]:
            results.append(_result(name, finding, ignored))
        if found == []:
            results.append(Result(name, "pass"))
    return results


def _result(name, finding, ignored):
    if finding is None:
        return Result(name, "pass")
    if finding.severity == ERROR and (name in ignored or "all" in ignored):
        return Result(name, "ignored", finding.message, finding.remedy, finding.transient)
    return Result(name, finding.severity, finding.message, finding.remedy, finding.transient)


def raise_for(results):
    """PreflightError (exit 3) when a check failed; PreflightTransientError (exit 75) when
    every failure may pass on its own (a timeout, a dropped connection)."""
    errors = [r for r in results if r.status == ERROR]
    if errors:
        lines = [f"{r.name}: {r.message}" + (f" ({r.remedy})" if r.remedy else "") for r in errors]
        message = f"{len(errors)} preflight check(s) failed:\n  " + "\n  ".join(lines)
        remedy = "fix them, or pass --ignore-preflight-errors=" + ",".join(r.name for r in errors)
        if all(r.transient for r in errors):
            raise PreflightTransientError(
                message, remedy="this may pass on its own: run again later (the agent, "
                "aks-flex-node-agent, retries a pending join); if it lasts, " + remedy)
        raise PreflightError(message, remedy=remedy)
