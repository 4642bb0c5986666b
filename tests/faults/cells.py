"""The cells of the fault matrix: what each one breaks, how, and what it records.

A cell is a name, a group and a function that drives one scratch node (tests/faults/node.py)
through a fault and its recovery, filling a CellResult. Comparisons with the clean run's
reference (tests/faults/matrix.py) happen once every cell has finished, so cells run in
parallel, the reference among them.
"""

import dataclasses
import hashlib
import json
import os
import pathlib
import time
import typing

from aks_flex_node.steps.workflow import PHASE_NAMES
from tests import harness
from tests.emulator import constants as C
from tests.faults.node import AGENT_POOL_MODES

# A bootstrap after a fault cleared gets this many tries (the agent's would be endless).
ATTEMPTS = 4
BURST = 3  # a transient fault answers this many requests, then the endpoint recovers
STALL = 30.0  # the "30 s stall"
KILL_POINT_TIMEOUT = 90.0
ARTIFACT_FILES = {"runc": r"runc-v[^/]*\.amd64$", "containerd": r"containerd-[^/]*\.tar\.gz$",
                  "kubernetes": r"kubernetes-node-[^/]*\.tar\.gz$", "cni": r"cni-plugins-[^/]*\.tgz$"}


@dataclasses.dataclass
class CellResult:
    group: str
    name: str
    fault: str
    converged: bool = False
    seconds: typing.Optional[float] = None  # from the fault clearing to the first good bootstrap
    retries: str = "-"
    exit_failing: list = dataclasses.field(default_factory=list)
    corrupted: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    unbootstrap_clean: typing.Optional[bool] = None  # kill cells only
    mode: str = "arc"  # the join mode the cell's node is configured for
    # Compared with the reference once every cell is done (matrix.evaluate):
    pre: dict = dataclasses.field(default_factory=dict, repr=False)
    failing: list = dataclasses.field(default_factory=list, repr=False)  # snapshots while failing
    served: set = dataclasses.field(default_factory=set, repr=False)  # sha256 of whole bodies a fault served
    final: dict = dataclasses.field(default_factory=dict, repr=False)
    wall: float = 0.0

    @property
    def ok(self):
        return self.converged and not self.corrupted and self.unbootstrap_clean is not False


@dataclasses.dataclass
class Cell:
    group: str
    name: str
    fault: str
    run: typing.Callable  # run(cell_node, result)
    fast: bool = False  # in the pytest subset (tests/integration/test_faults.py)
    seconds_hint: float = 15.0  # longest first, so the pool's tail is short
    mode: str = "arc"  # "agent-pool": the node joins its pool (tests/faults/node.py AGENT_POOL_CONFIG)


def short(text, limit=140):
    """One line of at most `limit` characters, cut in the middle: an error's start says what
    failed and its end why (a long scratch path in between is what goes)."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]


def error_of(summary, stderr):
    if summary and summary.get("error"):
        error = summary["error"]
        # A run's summary holds {"error": {...}}; an error before any run starts is the CLI's
        # {"error": "<code>", "message": ...}.
        return error.get("message", "") if isinstance(error, dict) else summary.get("message", "")
    lines = [l for l in (stderr or "").splitlines() if l.strip()]
    return lines[-1] if lines else ""


def capture_failing(cell, result):
    """What is on the root while the fault holds: compared later with the old and the new
    content (nothing may be half-written), and the run state must still parse."""
    result.failing.append(cell.snapshot())
    for path in ("/var/lib/aks-flex-node/ledger.json", "/var/lib/aks-flex-node/status.json",
                 "/var/lib/aks-flex-node/metrics.json", "/var/lib/aks-flex-node/node-report.json",
                 "/var/lib/kubelet/bootstrap-kubeconfig"):
        if not cell.json_is_whole(path):
            result.corrupted.append(f"{path} (not whole JSON while failing)")


def converge(cell, result, started=None):
    """Bootstrap until it succeeds (ATTEMPTS at most); record exit codes of the failures."""
    started = time.monotonic() if started is None else started
    for _ in range(ATTEMPTS):
        code, summary, stderr, _secs = cell.cli("bootstrap")
        if code == 0 and summary and summary.get("state") == "succeeded":
            result.converged = True
            result.seconds = time.monotonic() - started
            break
        result.exit_failing.append(code)
        note = short(error_of(summary, stderr), 160)
        if note and note not in result.notes:
            result.notes.append(note)
        capture_failing(cell, result)
    result.final = cell.snapshot()
    return result.converged


def pool_machines(state):
    """Names of the Machines of every agent pool in an emulator's state."""
    return sorted(m["name"] for pool in state.get("agentpool_machines", {}).values() for m in pool)


def check_azure_joined(cell, result):
    """Arc mode: our Arc machine and our Node. Agent-pool mode: our pool Machine and our
    Node, and no Arc machine."""
    state = cell.emu.state()
    arc = [m["name"] for m in state["machines"]]
    pool = pool_machines(state)
    nodes = [n["metadata"]["name"] for n in state["nodes"].get(C.CLUSTER_NAME, [])]
    machines = pool if cell.mode in AGENT_POOL_MODES else arc
    if machines != [harness.MACHINE_NAME] or nodes != [harness.MACHINE_NAME] or (
            cell.mode in AGENT_POOL_MODES and arc):
        result.converged = False
        result.notes.append(f"Azure holds machines {machines}, Arc machines {arc}, nodes {nodes} "
                            "after convergence")


def unbootstrap_and_compare(cell, result, before_raw):
    """Unbootstrap, then the root must be as before the first bootstrap (byte for byte),
    save what an unbootstrap keeps on purpose, and Azure must hold nothing of ours."""
    code, summary, stderr, _ = cell.cli("unbootstrap")
    after = cell.snapshot(raw=True)
    problems = []
    if code != 0:
        problems.append(f"unbootstrap exit {code}: {short(error_of(summary, stderr))}"
                        + (f" leftovers {summary.get('leftovers')}" if summary else ""))
    from tests.faults.node import KEPT_AFTER_UNBOOTSTRAP
    added = sorted(set(after) - set(before_raw) - KEPT_AFTER_UNBOOTSTRAP)
    changed = sorted(p for p in set(after) & set(before_raw) if after[p] != before_raw[p])
    removed = sorted(set(before_raw) - set(after))
    for label, paths in (("left", added), ("changed", changed), ("removed", removed)):
        if paths:
            problems.append(f"{label} {len(paths)}: {', '.join(paths[:4])}")
    if cell.mode in AGENT_POOL_MODES:
        # deleteMachines leaves the Node to the agent, whose kubelet identity may not delete
        # it; the RP's fallback removes it once its kubelet has been silent for
        # stale_node_grace (tests/emulator/agentpools.py): move the emulator's clock there.
        cell.emu.advance_clock(cell.emu.state()["settings"]["stale_node_grace"])
    state = cell.emu.state()
    principals = {m["principal_id"] for m in state["machines"]}
    if state["machines"] or pool_machines(state) or state["nodes"].get(C.CLUSTER_NAME) or any(
            a["principal_id"] in principals for a in state["role_assignments"]):
        problems.append("Azure still holds our machine, node or role assignments")
    result.unbootstrap_clean = not problems
    result.notes.extend(problems)


# -- kill -9 ------------------------------------------------------------------------------

class Hang:
    """Hold the run in a stand-in host command (tests/fakes/fakelib.py's hang-<cmd>[-<verb>])."""

    def __init__(self, command, verb=None):
        self.name = f"hang-{command}" + (f"-{verb}" if verb else "")
        self.what = f"in `{command}{' ' + verb if verb else ''}`"

    def arm(self, cell):
        open(os.path.join(cell.node.state_dir, self.name), "w").close()  # held until release removes it

    def reached(self, cell, run):
        return os.path.exists(os.path.join(cell.node.state_dir, self.name + ".waiting"))

    def release(self, cell):
        for suffix in ("", ".waiting"):
            try:
                os.remove(os.path.join(cell.node.state_dir, self.name + suffix))
            except FileNotFoundError:
                pass


class Stall:
    """Hold the run in an emulator request (a `hold` rule: until release clears the faults),
    after `let_through` requests matching it went through; with `phase`, also wait until that
    phase has started."""

    def __init__(self, match, what, let_through=0, phase=None):
        self.match, self.what, self.let_through, self.phase = match, what, let_through, phase

    def arm(self, cell):
        rules = []
        if self.let_through:
            rules.append({"match": dict(self.match, times=self.let_through), "delay": 0})
        rules.append({"match": dict(self.match), "hold": True})
        cell.emu.faults(rules)

    def reached(self, cell, run):
        if self.phase and not run.phase_started(self.phase):
            return False
        return any(r.get("hold") and r["hits"] > 0 for r in cell.emu.admin("GET", "faults"))

    def release(self, cell):
        cell.emu.clear_faults()


class Actions:
    """Kill once `count` of the phase's actions were logged (a phase that only writes files
    has nothing outside to hold it: the kill lands between or during its writes)."""

    def __init__(self, phase, count):
        self.phase, self.count = phase, count
        self.what = f"after its action {count} began"

    def arm(self, cell):
        pass

    def reached(self, cell, run):
        return run.actions_logged(self.phase) >= self.count

    def release(self, cell):
        pass


def _arm_path(method, path_regex):
    return {"server": "arm", "method": method, "path_regex": path_regex}


MIDDLE = {
    "preflight": Hang("azcmagent", "show"),
    "cluster": Stall(_arm_path("GET", r"managedClusters/[^/]+$"), "in the cluster GET"),
    "arc": Hang("azcmagent", "connect"),
    "roles": Stall(_arm_path("PUT", r"roleAssignments/"), "in the 2nd role assignment PUT", let_through=1),
    "system": Hang("modprobe"),
    **{phase: Stall({"server": "artifacts", "path_regex": regex}, "in the download")
       for phase, regex in ARTIFACT_FILES.items()},
    "containerd-config": Actions("containerd-config", 3),
    "cni-config": Actions("cni-config", 2),
    "kubelet": Actions("kubelet", 7),
    "credentials": Stall(_arm_path("POST", r"listClusterUserCredential$"), "in listClusterUserCredential"),
    "rbac-propagation": Stall({"server": "apiserver", "method": "GET"}, "in its API server check"),
    "services": Hang("systemctl", "daemon-reload"),
    "node-ready": Stall({"server": "apiserver", "method": "POST", "path_regex": r"/api/v1/nodes$"},
                        "waiting for the node (registration stalled)", phase="node-ready"),
}


# Agent-pool mode holds its phases elsewhere: the pool's bootstrap data, the Machine's PUT,
# the kubelet's certificate signing request (docs/design.md, "Join modes").
LIST_BOOTSTRAP_DATA = r"agentPools/[^/]+/listBootstrapData$"
MACHINE_PUT = r"agentPools/[^/]+/machines/[^/]+$"
CSR_POST = r"/apis/certificates\.k8s\.io/v1/certificatesigningrequests$"
MIDDLE_AGENT_POOL = {
    "cluster": Stall(_arm_path("POST", LIST_BOOTSTRAP_DATA), "in listBootstrapData"),
    "machine": Stall(_arm_path("PUT", MACHINE_PUT), "in the Machine's PUT"),
    "node-ready": Stall({"server": "apiserver", "method": "POST", "path_regex": CSR_POST},
                        "waiting for the node (the kubelet's CSR stalled)", phase="node-ready"),
}


class PhaseStart:
    def __init__(self, phase):
        self.phase, self.what = phase, "as it started"

    def arm(self, cell):
        pass

    def reached(self, cell, run):
        return run.phase_started(self.phase)

    def release(self, cell):
        pass


def bootstrap_killed_at(cell, result, point, command=("bootstrap",)):
    """Start `bootstrap` (or `command`: the agent's pass), kill -9 its process group once
    `point` is reached (or the run ended, or KILL_POINT_TIMEOUT passed), and note what
    happened; then what the killed run left on the root."""
    point.arm(cell)
    watched = cell.watched(*command)
    deadline = time.monotonic() + KILL_POINT_TIMEOUT
    reached = False
    while watched.alive() and time.monotonic() < deadline:
        watched.pump()
        if point.reached(cell, watched):
            reached = True
            break
    code = watched.kill()
    point.release(cell)
    if not reached:
        result.notes.append(f"kill point not reached (the run {'ended' if code >= 0 else 'timed out'}, "
                            f"exit {code}): {short(watched.stderr().splitlines()[-1:] or '')}")
    result.exit_failing.append("kill -9" if code == -9 else code)
    capture_failing(cell, result)


def kill_cell(phase, when, mode="arc"):
    middle = MIDDLE_AGENT_POOL.get(phase) if mode == "agent-pool" else None
    point = PhaseStart(phase) if when == "start" else (middle or MIDDLE[phase])

    def run(cell, result):
        before_raw = cell.snapshot(raw=True)
        result.pre = cell.snapshot()
        bootstrap_killed_at(cell, result, point)
        if converge(cell, result):
            check_azure_joined(cell, result)
            unbootstrap_and_compare(cell, result, before_raw)

    if mode == "agent-pool":
        return Cell("agent-pool", f"kill -9 {phase} ({when})", f"kill -9 {point.what}", run,
                    seconds_hint=20, mode=mode)
    return Cell("kill -9", f"{phase} ({when})", f"kill -9 {point.what}", run,
                seconds_hint=20 if when == "middle" else 15)


# -- ENOSPC -------------------------------------------------------------------------------

def bootstrap_short_of_space(cell, result, node_path, fit):
    """Bootstrap with the file system at `node_path` full: a failure must say that a file
    under it could not be written for lack of space. `fit` is the note when it succeeds.
    Whether it failed."""
    code, summary, stderr, _ = cell.cli("bootstrap")
    if code == 0:
        result.notes.append(fit)
        return False
    result.exit_failing.append(code)
    message = error_of(summary, stderr)
    if "No space left" not in message or node_path not in message:
        result.notes.append(f"UNCLEAR: the error does not say that a file under {node_path} "
                            "could not be written for lack of space")
    result.notes.append(short(message, 160))
    capture_failing(cell, result)
    return True


def enospc_cell(node_path, size, leave, fast=False):
    def run(cell, result):
        target = cell.mount_tmpfs(node_path, size)
        filler = cell.fill(target, leave)
        result.pre = cell.snapshot()
        bootstrap_short_of_space(cell, result, node_path,
                                 "the bootstrap fit in the space left (nothing it writes lives there)")
        os.remove(filler)  # the space is freed
        if converge(cell, result):
            check_azure_joined(cell, result)

    return Cell("ENOSPC", f"{node_path} full", f"tmpfs {size} at {node_path}, {leave} B free", run, fast=fast)


# -- Azure endpoints ----------------------------------------------------------------------

ENDPOINT_FAULTS = {
    "429": {"respond": {"status": 429, "headers": {"Retry-After": "1"},
                        "body": {"error": {"code": "TooManyRequests", "message": "throttled (fault)"}}}},
    "500": {"respond": {"status": 500, "body": {"error": {"code": "InternalServerError", "message": "fault"}}}},
    "503": {"respond": {"status": 503, "body": {"error": {"code": "ServiceUnavailable", "message": "fault"}}}},
    "drop": {"drop": True},
    "stall 30s": {"delay": STALL},
}
ENDPOINTS = ("arm", "entra", "himds", "apiserver", "artifacts")


def faulted_requests(cell, server, path_regex=None):
    import re
    return [r for r in cell.emu.requests(server=server) if r["fault"]
            and (path_regex is None or re.search(path_regex, r["path"]))]


def rule_cell(group, name, fault, rule, count_server, fast=False, seconds_hint=15.0, mode="arc"):
    """Inject `rule` (it clears by itself: `times`, or it only slows), then bootstrap until
    converged; retries = the requests that met the fault."""

    def run(cell, result):
        result.pre = cell.snapshot()
        body = rule.get("respond", {}).get("body")
        if isinstance(body, str):  # a whole (if wrong) answer: a copy of it is no half-write
            result.served.add(hashlib.sha256(cell.normalize(body.encode())).hexdigest())
        cell.emu.faults([rule])
        converge(cell, result)
        if result.converged:
            check_azure_joined(cell, result)
        result.retries = str(len(faulted_requests(cell, count_server, rule["match"].get("path_regex"))))

    return Cell(group, name, fault, run, fast=fast, seconds_hint=seconds_hint, mode=mode)


def endpoint_cell(server, kind, fast=False):
    action = ENDPOINT_FAULTS[kind]
    times = 1 if kind.startswith("stall") else BURST
    rule = dict(action, match={"server": server, "times": times})
    what = f"{kind} x{times}, then recovered"
    return rule_cell("endpoint", f"{server} {kind}", what, rule, server, fast=fast,
                     seconds_hint=STALL + 10 if kind.startswith("stall") else 15)


def himds_down_cell():
    def run(cell, result):
        import socket
        result.pre = cell.snapshot()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/metadata/identity/oauth2/token"
        sock.close()  # nothing listens there now
        harness.write_config(cell.root, cell.emu, cell.wrapper, extra={"himds_endpoint": closed})
        code, summary, stderr, _ = cell.cli("bootstrap")
        if code == 0:
            result.notes.append("bootstrap succeeded with HIMDS down")
        else:
            result.exit_failing.append(code)
            result.notes.append(short(error_of(summary, stderr), 160))
            capture_failing(cell, result)
        harness.write_config(cell.root, cell.emu, cell.wrapper)  # HIMDS is back
        if converge(cell, result):
            check_azure_joined(cell, result)

    return Cell("endpoint", "himds down", "no listener, then back", run)


def artifact_cells():
    runc = ARTIFACT_FILES["runc"]
    bad = "0" * 64 + "  runc-v1.1.12.amd64\n"
    return [
        rule_cell("artifact", "truncated", "kubernetes tarball cut after 1000 B, once",
                  {"match": {"server": "artifacts", "path_regex": ARTIFACT_FILES["kubernetes"], "times": 1},
                   "truncate": 1000}, "artifacts", fast=True),
        rule_cell("artifact", "corrupt", "runc served damaged (same length), once",
                  {"match": {"server": "artifacts", "path_regex": runc, "times": 1}, "corrupt": True},
                  "artifacts"),
        # Never read since issue 26: the trusted digest (artifact_digests.py) is checked,
        # not the mirror's; the cell shows a lying checksum file changes nothing.
        rule_cell("artifact", "wrong checksum", "runc's .sha256 names another digest, once (ignored)",
                  {"match": {"server": "artifacts", "path_regex": r"runc-v[^/]*\.amd64\.sha256$", "times": 1},
                   "respond": {"status": 200, "body": bad}}, "artifacts"),
    ]


def pin_digest(cell, artifact, version, arch, data):
    """Where the node's configuration pins artifact digests (artifact_digests_file, lines
    "<artifact> <version> <arch> sha256:<hex>"), pin `data` for `artifact` `version`, so
    what refuses it is not its digest: (the file, its text before) to put back, or None."""
    path = cell.node.path("/etc/aks-flex-node/artifact-digests")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        before = f.read()
    lines = [l for l in before.splitlines() if l.split()[:3] != [artifact, version, arch]]
    lines.append(f"{artifact} {version} {arch} sha256:{hashlib.sha256(data).hexdigest()}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return pathlib.Path(path), before


def hostile_archive_cell():
    """The mirror serves a bomb under the CNI tarball's name (and a .sha256 that matches it):
    a member that would inflate the archive past host/archive.py's cap, read while it
    downloads. The run is refused (the cap, or the trusted sha256 where that is pinned) with
    nothing staged and the bomb never inflated; once the mirror serves the real archive
    again, the bootstrap converges."""
    import tarfile

    from aks_flex_node.host.archive import MAX_ARCHIVE_BYTES
    from aks_flex_node.steps.artifacts import node_arch
    from tests.archive_fixtures import Zeros, tar_gz
    from tests.emulator import artifacts as mirror

    name = f"cni-plugins-linux-{node_arch()}-v1.9.1.tgz"  # configspec's default cni_version

    def run(cell, result):
        result.pre = cell.snapshot()
        bomb = cell.base / "bomb.tgz"
        bomb.write_bytes(tar_gz([("./", tarfile.DIRTYPE, ""), ("./bridge", b"#!/bin/sh\n"),
                                 ("./doc/zeros", Zeros(MAX_ARCHIVE_BYTES))]))
        cell.emu.admin("POST", "artifacts", {"name": name, "path": str(bomb)})
        pins = pin_digest(cell, "cni", "1.9.1", node_arch(), bomb.read_bytes())
        code, summary, stderr, _ = cell.cli("bootstrap")
        if code == 0:
            result.notes.append("bootstrap succeeded with a bomb for the CNI plugins")
        else:
            result.exit_failing.append(code)
            message = error_of(summary, stderr)
            if name not in message:
                result.notes.append("UNCLEAR: the error does not name the archive")
            if pins is not None and "archive-too-large" not in json.dumps(summary or {}) + stderr:
                result.notes.append("UNCLEAR: pinned, the bomb was not refused by the inflation cap")
            result.notes.append(short(message, 160))
            capture_failing(cell, result)
            staged = [p for p in result.failing[-1] if p.startswith("/opt/cni/bin/") and p not in result.pre]
            if staged:
                result.corrupted.append(f"staged while refused: {', '.join(sorted(staged))}")
        if not any(r["path"].endswith("/" + name) for r in cell.emu.requests(server="artifacts")):
            result.notes.append(f"UNCLEAR: {name} was never asked for (another cni_version?)")
        if pins is not None:
            pins[0].write_text(pins[1])
        good = cell.base / "good.tgz"
        good.write_bytes(mirror.build(name))
        cell.emu.admin("POST", "artifacts", {"name": name, "path": str(good)})
        if converge(cell, result):
            check_azure_joined(cell, result)

    return Cell("artifact", "hostile archive", "CNI tarball a 4 GiB gzip bomb, then the real one",
                run, seconds_hint=20)


def hostile_cloud_value_cell():
    """ARM's managed cluster GET answers once with a Kubernetes version that is a path
    ("1.30.4/x", issue 26 defect 7): the bootstrap is refused as a permanent error (exit 1,
    bad-cloud-value, naming properties.currentKubernetesVersion, not the temporary 75 an
    agent retries forever), nothing outside the run's own state changes, and the GET is not
    repeated within the run; ARM's next answer is good and the bootstrap converges."""
    cluster_get = r"managedClusters/[^/]+$"

    def run(cell, result):
        result.pre = cell.snapshot()
        cell.emu.faults([{"match": dict(_arm_path("GET", cluster_get), times=1),
                          "set": {"properties.currentKubernetesVersion": "1.30.4/x"}}])
        code, summary, stderr, _ = cell.cli("bootstrap")
        if code == 0:
            result.notes.append("bootstrap succeeded with a version that is a path")
        else:
            result.exit_failing.append(code)
            said = json.dumps(summary or {}) + stderr
            if code != 1 or "bad-cloud-value" not in said or "properties.currentKubernetesVersion" not in said:
                result.notes.append("UNCLEAR: not the permanent bad-cloud-value error naming the field")
            result.notes.append(short(error_of(summary, stderr), 160))
            capture_failing(cell, result)
            after = result.failing[-1]
            changed = sorted(p for p in set(after) | set(result.pre) if after.get(p) != result.pre.get(p)
                             and not (p + "/").startswith("/var/lib/aks-flex-node/"))
            if changed:
                result.corrupted.append(f"changed while refused: {', '.join(changed[:4])}")
        result.retries = str(len(faulted_requests(cell, "arm", cluster_get)))
        if converge(cell, result):
            check_azure_joined(cell, result)

    return Cell("cloud value", "bad version", "cluster GET says 1.30.4/x once, then the truth", run)


def hostile_local_file_cell():
    """A FIFO where the containerd phase writes its config (issue 26, defect 4): the drift
    check waited on it for ever. The run is not blocked: the FIFO is drift, replaced, and
    the bootstrap converges; unbootstrap puts the FIFO back (the root as before, byte for
    byte and file type for file type)."""
    config = "/etc/containerd/config.toml"

    def run(cell, result):
        real = cell.node.path(config)
        os.makedirs(os.path.dirname(real), exist_ok=True)
        os.mkfifo(real, 0o644)
        before_raw = cell.snapshot(raw=True)
        result.pre = cell.snapshot()
        if converge(cell, result):
            if cell.snapshot().get(config, ("special",))[0] != "file":
                result.converged = False
                result.notes.append(f"{config} is not our regular file after convergence")
            check_azure_joined(cell, result)
            unbootstrap_and_compare(cell, result, before_raw)

    return Cell("local file", "FIFO at a managed path", "/etc/containerd/config.toml a FIFO before the join",
                run)


# -- concurrency --------------------------------------------------------------------------

def two_bootstraps_cell():
    def run(cell, result):
        result.pre = cell.snapshot()
        started = time.monotonic()
        runs = [cell.watched("bootstrap") for _ in range(2)]
        codes = sorted(r.wait() for r in runs)
        result.exit_failing.extend(c for c in codes if c != 0)
        result.notes.append(f"exit codes {codes}")
        if 0 not in codes:
            capture_failing(cell, result)
        if converge(cell, result, started):
            check_azure_joined(cell, result)

    return Cell("concurrency", "two bootstraps", "two `bootstrap` at once", run, fast=True)


def agent_and_manual_cell():
    def run(cell, result):
        import signal
        from aks_flex_node import lifecycle
        from aks_flex_node.host import Host

        result.pre = cell.snapshot()
        lifecycle.mark_pending(Host(cell.root))
        started = time.monotonic()
        agent = cell.watched("agent", "--interval", "1", "--cloud-interval", "1")
        manual = cell.watched("bootstrap")
        code = manual.wait()
        result.notes.append(f"manual bootstrap exit {code}")
        if code != 0:
            result.exit_failing.append(code)
        deadline = time.monotonic() + 90
        status = {}
        while time.monotonic() < deadline and agent.alive():
            agent.pump(0.2)
            try:
                with open(cell.node.path("/var/lib/aks-flex-node/status.json")) as f:
                    status = json.load(f)
            except (OSError, ValueError):
                continue
            if status.get("state") == "succeeded" and not os.path.exists(
                    cell.node.path("/var/lib/aks-flex-node/join-pending")):
                break
        if status.get("state") == "succeeded":
            result.seconds = time.monotonic() - started
        agent.proc.send_signal(signal.SIGTERM)
        agent_code = agent.wait(timeout=60)
        result.notes.append(f"agent exit {agent_code} on SIGTERM")
        result.final = cell.snapshot()
        result.converged = status.get("state") == "succeeded" and agent_code == 0
        if result.converged:
            check_azure_joined(cell, result)

    return Cell("concurrency", "agent + manual", "`agent` and `bootstrap` at once", run)


def reference_cell(mode="arc"):
    def run(cell, result):
        before_raw = cell.snapshot(raw=True)
        result.pre = cell.snapshot()
        if converge(cell, result):
            check_azure_joined(cell, result)
            unbootstrap_and_compare(cell, result, before_raw)

    group = "agent-pool" if mode == "agent-pool" else "baseline"
    return Cell(group, REFERENCE, "none (the reference)", run, fast=True, mode=mode)


REFERENCE = "clean run"  # one per join mode: a cell is judged against its mode's


def agent_pool_cells():
    """The agent-pool join (docs/design.md, "Join modes") under its own faults: kill -9 where
    it talks to the pool or waits for the kubelet's certificate, and the pool's API
    answering 429 (Retry-After), 403 (a role assignment not yet in effect), 500."""
    arm_burst = {
        "429": ENDPOINT_FAULTS["429"],
        "403": {"respond": {"status": 403, "body": {"error": {
            "code": "AuthorizationFailed", "message": "does not have authorization to perform action "
            "'Microsoft.ContainerService/managedClusters/agentPools/listBootstrapData/action' (fault)"}}}},
        "500": ENDPOINT_FAULTS["500"],
    }
    cells = [reference_cell("agent-pool")]
    for phase, when in (("cluster", "middle"), ("machine", "start"), ("machine", "middle"),
                        ("kubelet", "middle"), ("node-ready", "middle")):
        cells.append(kill_cell(phase, when, mode="agent-pool"))
    for kind in ("429", "403", "500"):
        rule = dict(arm_burst[kind], match=dict(_arm_path("POST", LIST_BOOTSTRAP_DATA), times=BURST))
        cells.append(rule_cell("agent-pool", f"listBootstrapData {kind}", f"{kind} x{BURST}, then recovered",
                               rule, "arm", fast=kind == "429", mode="agent-pool"))
    rule = dict(ENDPOINT_FAULTS["500"], match=dict(_arm_path("PUT", MACHINE_PUT), times=BURST))
    cells.append(rule_cell("agent-pool", "Machine PUT 500", f"500 x{BURST}, then recovered", rule, "arm",
                           mode="agent-pool"))
    rule = dict(ENDPOINT_FAULTS["503"], match={"server": "apiserver", "method": "POST", "path_regex": CSR_POST,
                                                "times": BURST})
    cells.append(rule_cell("agent-pool", "CSR 503", f"the kubelet's CSR POST 503 x{BURST}, then recovered",
                           rule, "apiserver", mode="agent-pool"))
    return cells


# -- the kubelet upgrade ------------------------------------------------------------------

# A joined node is told to run the next patch release (the version-skew policy speaks of
# minors, so the emulated cluster's API server allows it); steps/kubelet_upgrade.py records
# each of its phases in the ledger before the change it makes.
UPGRADE_TO = "1.30.5"
UPGRADE_CONFIG = {"kubernetes_version": UPGRADE_TO, "node_ready_timeout": "20", "upgrade_drain_timeout": "30"}
LEDGER = "/var/lib/aks-flex-node/ledger.json"
KUBE_CURRENT = "/usr/local/lib/aks-flex-node/kubernetes/current"
EVICTION = r"/api/v1/namespaces/[^/]+/pods/[^/]+/eviction$"


def upgrade_record(cell):
    """The ledger's kubelet upgrade record and its owed obligations ((None, []) when unreadable)."""
    try:
        with open(cell.node.path(LEDGER)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None, []
    record = next((e for e in data.get("entries", []) if e.get("kind") == "kubelet_upgrade"), None)
    return record, data.get("owed", [])


class ReadyRefused:
    """Kill while the upgrade waits for the new kubelet to be Ready: once the switch and its
    restart are done, the API server refuses the new kubelet's status updates (503), so the
    Node cannot turn Ready at the new version until the cell releases it."""

    what = "waiting for Ready at the new version (its status updates refused)"
    RULE = {"match": {"server": "apiserver", "method": "PATCH", "path_regex": r"/api/v1/nodes/[^/]+/status$"},
            "respond": {"status": 503, "body": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                  "reason": "ServiceUnavailable", "code": 503}}}

    def __init__(self):
        self.armed = False
        self.refused_before = None  # refusals counted once the new kubelet was restarted

    def arm(self, cell):
        pass

    def _refused(self, cell):
        return sum(r["hits"] for r in cell.emu.admin("GET", "faults") if r.get("respond", {}).get("status") == 503)

    def reached(self, cell, run):
        record, owed = upgrade_record(cell)
        if not self.armed:
            if record is not None and record.get("phase") == "switch":
                cell.emu.faults([self.RULE])  # armed before the switch's restart can be settled
                self.armed = True
            return False
        if self.refused_before is None:
            link = cell.node.path(KUBE_CURRENT)
            switched = os.path.islink(link) and os.readlink(link) == f"v{UPGRADE_TO}"
            if switched and not any(o.get("unit") == "kubelet" for o in owed):
                self.refused_before = self._refused(cell)  # what the old kubelet was refused
            return False
        return self._refused(cell) > self.refused_before

    def release(self, cell):
        cell.emu.clear_faults()


def _workloads(emu):
    """A ReplicaSet's pod on the node: the drain has something to evict."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f",
                                             "uid": "uid-web-5d4f", "controller": True}]},
           "spec": {"nodeName": harness.MACHINE_NAME,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]},
           "status": {"phase": "Running"}}
    emu.admin("POST", "kube/objects", {"cluster_id": C.CLUSTER_ID, "object": pod})


def _joined_then_told_to_upgrade(cell, result):
    """Join (a clean bootstrap), then the config names the next version; the raw snapshot of
    the root before the join, with the new config in it (an unbootstrap keeps the config)."""
    before_raw = cell.snapshot(raw=True)
    code, summary, stderr, _ = cell.cli("bootstrap")
    if code != 0:
        result.notes.append(f"the join before the upgrade failed: {short(error_of(summary, stderr))}")
        return None
    harness.write_config(cell.root, cell.emu, cell.wrapper, extra=UPGRADE_CONFIG)
    config = "/etc/aks-flex-node/aks-flex-node.conf"
    before_raw[config] = cell.snapshot(raw=True)[config]
    _workloads(cell.emu)
    result.pre = cell.snapshot()
    return before_raw


def check_upgraded(cell, result):
    """The Node reports the new kubelet, is schedulable, the pod was evicted, and the ledger
    holds no upgrade and owes nothing."""
    state = cell.emu.state()
    node = {n["metadata"]["name"]: n for n in state["nodes"].get(C.CLUSTER_NAME, [])}.get(harness.MACHINE_NAME, {})
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
    record, owed = upgrade_record(cell)
    pods = state.get("kube_objects", {}).get(C.CLUSTER_ID.lower(), {}).get("pods", {})
    problems = []
    if version != f"v{UPGRADE_TO}":
        problems.append(f"the Node reports kubelet {version}")
    if (node.get("spec") or {}).get("unschedulable"):
        problems.append("the Node is left cordoned")
    if "default/web-1" in pods:
        problems.append("the pod was not evicted")
    if record is not None or owed:
        problems.append(f"the ledger still holds {record} and owes {owed}")
    if problems:
        result.converged = False
        result.notes.extend(problems)


def upgrade_kill_cell(name, point, seconds_hint=25, fast=False):
    def run(cell, result):
        before_raw = _joined_then_told_to_upgrade(cell, result)
        if before_raw is None:
            return
        bootstrap_killed_at(cell, result, point)
        record, _ = upgrade_record(cell)
        result.notes.append(f"killed with the upgrade in phase {record.get('phase') if record else None}")
        if converge(cell, result):
            check_azure_joined(cell, result)
            check_upgraded(cell, result)
            unbootstrap_and_compare(cell, result, before_raw)

    return Cell("upgrade", f"kill -9 {name}", f"kill -9 {point.what}", run, fast=fast, seconds_hint=seconds_hint,
                mode="upgrade")


def upgrade_reference_cell():
    def run(cell, result):
        before_raw = _joined_then_told_to_upgrade(cell, result)
        if before_raw is not None and converge(cell, result):
            check_azure_joined(cell, result)
            check_upgraded(cell, result)
            unbootstrap_and_compare(cell, result, before_raw)

    return Cell("upgrade", REFERENCE, "none (the reference: an upgrade that succeeds)", run,
                fast=True, seconds_hint=25, mode="upgrade")


def upgrade_enospc_cell():
    """The new version's binaries do not fit: the run fails before anything is switched,
    saying where; once space is freed the upgrade goes through."""
    def run(cell, result):
        target = cell.mount_tmpfs("/usr/local/lib", "4m")
        if _joined_then_told_to_upgrade(cell, result) is None:
            return
        filler = cell.fill(target, 0)
        if bootstrap_short_of_space(cell, result, "/usr/local/lib", "the upgrade fit in no space at all"):
            link = cell.node.path(KUBE_CURRENT)
            if os.path.islink(link) and os.readlink(link) == f"v{UPGRADE_TO}":
                result.notes.append("switched to a version whose binaries did not fit")
                result.corrupted.append(f"{KUBE_CURRENT} (switched while failing)")
        os.remove(filler)
        if converge(cell, result):
            check_azure_joined(cell, result)
            check_upgraded(cell, result)

    return Cell("upgrade", "ENOSPC /usr/local/lib", "tmpfs 4m at /usr/local/lib, 0 B free, during the upgrade",
                run, seconds_hint=25, mode="upgrade")


def upgrade_cells():
    """The kubelet upgrade (steps/kubelet_upgrade.py, docs/upgrade.md) killed in each of its
    phases and short of space, judged against an upgrade that succeeds."""
    return [
        upgrade_reference_cell(),
        upgrade_kill_cell("kubelet-upgrade (start)", PhaseStart("kubelet-upgrade")),
        upgrade_kill_cell("drain (in an eviction)", Stall({"server": "apiserver", "method": "POST",
                                                            "path_regex": EVICTION}, "in an eviction")),
        upgrade_kill_cell("switch (in the kubelet's restart)", Hang("systemctl", "restart"), fast=True),
        upgrade_kill_cell("switch (waiting for Ready)", ReadyRefused()),
        upgrade_enospc_cell(),
    ]


def all_cells():
    cells = [reference_cell()]
    # These join in Arc mode, where the machine phase does not run (agent_pool_cells); a join
    # has no kubelet to upgrade (tests/integration/test_kubelet_upgrade.py cuts an upgrade short);
    # the cells' config names no registry mirror, so registry-mirrors has nothing to be killed in
    # (tests/integration/test_registry_mirrors.py: its files, their undo, a changed mirror); the
    # cells' machine has no GPU, so the gpu phase writes nothing either (tests/integration/test_gpu.py).
    for phase in (p for p in PHASE_NAMES if p not in ("machine", "kubelet-upgrade", "registry-mirrors", "gpu")):
        for when in ("start", "middle"):
            cells.append(kill_cell(phase, when))
    # Each holds what its writes need 4 KiB pages of; `leave` is what the fault leaves free.
    cells += [enospc_cell("/var/lib", "2m", 0), enospc_cell("/etc", "2m", 4096, fast=True),
              enospc_cell("/etc/aks-flex-node", "1m", 0), enospc_cell("/usr/local/bin", "2m", 8192),
              enospc_cell("/var/cache", "2m", 4096)]
    for server in ENDPOINTS:
        for kind in ENDPOINT_FAULTS:
            cells.append(endpoint_cell(server, kind, fast=(server, kind) == ("arm", "429")))
    cells.append(himds_down_cell())
    cells.append(rule_cell("endpoint", "himds slow", "every HIMDS answer 5 s late",
                           {"match": {"server": "himds"}, "delay": 5.0}, "himds", seconds_hint=30))
    cells += artifact_cells()
    cells.append(hostile_archive_cell())
    cells.append(hostile_cloud_value_cell())
    # Issue 26 defect 6: HIMDS's token answer with an expiry time.gmtime cannot format. It
    # was cached by the kubelet's `token` call, and every later call died: never Ready.
    # Four requests are two exchanges: the run's own token, then the kubelet's `token` call.
    cells.append(rule_cell("cloud value", "himds expiry 1e17",
                           'HIMDS answers expires_on "1e17" to 4 requests (two exchanges), then the truth',
                           {"match": {"server": "himds", "times": 4}, "set": {"expires_on": "1e17"}}, "himds"))
    cells.append(hostile_local_file_cell())
    cells += [two_bootstraps_cell(), agent_and_manual_cell()]
    cells += agent_pool_cells()
    cells += upgrade_cells()
    from tests.faults.pool_cells import pool_follow_cells  # (it builds on this module's parts)

    cells += pool_follow_cells()
    # Kill points where no other branch is writing (a kill there is deterministic).
    for cell in cells:
        if cell.group == "kill -9" and cell.name in ("cluster (middle)", "services (middle)"):
            cell.fast = True
    return cells
