"""N scratch nodes join ONE emulator (one subscription, ARM's documented throttling) at
once, then all leave; what ARM saw per node, the throttling, and what is left.

Each node is what tests/faults/node.py builds for a fault cell (scratch_node: its own root,
stand-in host commands, the real CLI in a subprocess), with its own machine name, hence its
own Arc machine and managed identity, and its own HIMDS on the shared emulator
(/hosts/<name>/..., tests/emulator/himds.py). "At once": `parallel` bootstraps in flight
(a thread per node waits on its subprocess), the next starting as one ends; by default 10
per CPU (default_parallel says why), all N when --parallel N is given.

ARM calls are attributed to nodes from the emulator's throttling ledger
(GET /_emulator/throttling): our CLI's SDK clients append AZURE_HTTP_USER_AGENT to their
User-Agent (azure-core's UserAgentPolicy, azure/core/pipeline/policies/_universal.py), set
here to `aks-flex-node-fleet/<name>`; the Arc agent stand-in's calls name the node's
machine in their path. A 429 is "honoured" when the same client (node and User-Agent) sent
that request again (its method and path) no sooner than Retry-After seconds after the refused
one: a node's concurrent runner sends other requests of the same kind meanwhile, each waiting
out its own 429, and those are not retries of it.

join_mode "agent-pool" (docs/design.md, "Join modes"): every node joins the emulator's
FlexNodes pool with ONE service principal, the pool's identity, which holds only the Flex
Node Agent Role on the pool (one assignment for the whole fleet, made once by the operator).
ARM throttles per principal, so the fleet shares one set of buckets. That role may not
delete Machines and no node may delete its own Node, so the nodes' unjoins leave both; the
operator then deletes them all with one deleteMachines call, as `az aks nodepool
delete-machines` does, and only then is nothing left.
"""

import collections
import concurrent.futures
import dataclasses
import datetime
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

from aks_flex_node.azure import roles as role_presets
from tests import harness
from tests.emulator import constants as C
from tests.emulator import throttling
from tests.emulator_fixtures import start_emulator, stop_fake_units
from tests.faults.node import scratch_node

USER_AGENT_TAG = "aks-flex-node-fleet/"
CLI_TIMEOUT = 1800
# The kubelet stand-in's status PATCH interval (tests/fakes/kubelet.py, 2 s by default):
# 200 kubelets at 2 s would be the emulator's main load, and Ready needs only the first.
KUBELET_INTERVAL = "20"
PER_CPU = 10
# The emulator rewrites state.json (1.7 MB with 160 nodes joined) at most this often instead
# of after every change: per-change rewrites stalled answers past preflight's 5 s probes.
STATE_SAVE_INTERVAL = 5.0
AGENT_ATTEMPTS = 3
AGENT_BACKOFF = 10.0  # the agent's first retry after a failure (agent.py: min(10, interval))
_MACHINE_IN_PATH = re.compile(r"/providers/Microsoft\.HybridCompute/machines/([^/]+)", re.IGNORECASE)


@dataclasses.dataclass
class NodeRun:
    name: str
    join_code: int = None
    join_seconds: float = None
    join_error: str = ""
    unjoin_code: int = None
    unjoin_seconds: float = None
    unjoin_error: str = ""
    join_attempts: int = 0
    unjoin_attempts: int = 0


@dataclasses.dataclass
class FleetResult:
    nodes_wanted: int
    parallel: int
    date: str
    figures: dict
    role_assignment_limit: int
    join_wall: float = 0.0
    unjoin_wall: float = 0.0
    runs: list = dataclasses.field(default_factory=list)
    arm: dict = dataclasses.field(default_factory=dict)  # phase -> kind -> [count per node]
    throttled: dict = dataclasses.field(default_factory=dict)  # phase -> {"seen", "honoured"}
    not_honoured: list = dataclasses.field(default_factory=list)
    # phase -> {principal: ARM writes admitted}: the writes each principal's bucket let through
    # (the floor the buckets impose is per principal: tests/bench_wan.py).
    writes_by_principal: dict = dataclasses.field(default_factory=dict)
    unattributed: int = 0
    assignments_per_node: list = dataclasses.field(default_factory=list)
    preexisting_assignments: int = 0
    leftovers: dict = dataclasses.field(default_factory=dict)
    base: str = ""
    join_mode: str = "arc"
    kept_by_nodes: dict = dataclasses.field(default_factory=dict)  # agent-pool: left for the operator
    operator_cleanup_seconds: float = None

    @property
    def joined(self):
        return sum(1 for r in self.runs if r.join_code == 0)

    @property
    def unjoined(self):
        return sum(1 for r in self.runs if r.unjoin_code == 0)

    @property
    def ok(self):
        return (self.joined == self.nodes_wanted and self.unjoined == self.nodes_wanted
                and not any(self.leftovers.values()))

    def slowest(self, phase="join"):
        timed = [r for r in self.runs if getattr(r, f"{phase}_seconds") is not None]
        return max(timed, key=lambda r: getattr(r, f"{phase}_seconds"), default=None)

    def ceilings(self):
        """Per role preset: assignments per node and the nodes one subscription holds (Arc
        mode; an agent pool's nodes share one assignment)."""
        room = self.role_assignment_limit - self.preexisting_assignments
        return {name: {"assignments_per_node": len(preset), "max_nodes": room // len(preset)}
                for name, preset in sorted(role_presets.PRESETS.items())}

    def as_dict(self):
        out = dataclasses.asdict(self)
        out.update(joined=self.joined, unjoined=self.unjoined, ok=self.ok, ceilings=self.ceilings())
        for phase in ("join", "unjoin"):
            slow = self.slowest(phase)
            out[f"slowest_{phase}"] = {"name": slow.name, "seconds": getattr(slow, f"{phase}_seconds")} if slow else None
        return out


# -- running it ---------------------------------------------------------------------------


def node_name(i):
    return f"fleet-{i:03d}"


def _make_node(base, emu, name, join_mode="arc"):
    key_dir = os.path.join(emu.himds_key_dir, "hosts", name)
    os.makedirs(key_dir, mode=0o700, exist_ok=True)
    himds = emu.himds.replace("/metadata/", f"/hosts/{name}/metadata/", 1)
    # node_ready_timeout: the product's default (configspec.ini), not the harness's 60 s:
    # 20 nodes share 2 cores, a kubelet may start late.
    config = {"machine_name": name, "himds_endpoint": himds, "node_ready_timeout": "300"}
    if join_mode == "agent-pool":
        config.update(join_mode="agent-pool", agent_pool=C.FLEX_POOL, sp_client_id=C.NODE_SP_CLIENT_ID,
                      arc_tags="", himds_endpoint="")
    node = scratch_node(os.path.join(base, name), emu, himds_key_dir=key_dir, config=config,
                        env={"AZURE_HTTP_USER_AGENT": USER_AGENT_TAG + name,
                             "FAKE_KUBELET_INTERVAL": KUBELET_INTERVAL})
    if join_mode == "agent-pool":  # the pool's identity, not the harness's operator
        with open(node.path(harness.SECRET_PATH), "w") as f:
            f.write(C.NODE_SP_CLIENT_SECRET + "\n")
    return node


def _cli_as_agent(node, verb):
    """`_cli`, run again after exit 75 (temporary: an endpoint did not answer in time, the
    Node not Ready yet) as aks-flex-node-agent retries a pending join (aks_flex_node/agent.py),
    up to AGENT_ATTEMPTS runs; (code, seconds in all, error, runs)."""
    total, attempts = 0.0, 0
    while True:
        code, seconds, error = _cli(node, verb)
        total, attempts = total + seconds, attempts + 1
        if code != 75 or attempts >= AGENT_ATTEMPTS:
            return code, total, error, attempts
        time.sleep(AGENT_BACKOFF)


def _cli(node, verb):
    """(exit code, seconds, last stderr lines) of `aks-flex-node <verb> --json`."""
    started = time.monotonic()
    try:
        proc = node.cli(verb, "--json", timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - started, f"timed out after {CLI_TIMEOUT}s"
    error = ""
    if proc.returncode != 0:
        try:
            error = json.loads(proc.stdout).get("error", {}).get("message", "") or proc.stderr[-300:]
        except (ValueError, AttributeError):
            error = (proc.stderr or proc.stdout)[-300:]
    return proc.returncode, time.monotonic() - started, error


def _all(nodes, runs, verb, parallel, progress):
    """Run `verb` on every node, `parallel` at a time; wall seconds."""
    done, lock = [0], threading.Lock()

    def one(i):
        code, seconds, error, attempts = _cli_as_agent(nodes[i], verb)
        setattr(runs[i], f"{verb_phase(verb)}_attempts", attempts)
        setattr(runs[i], f"{verb_phase(verb)}_code", code)
        setattr(runs[i], f"{verb_phase(verb)}_seconds", round(seconds, 1))
        setattr(runs[i], f"{verb_phase(verb)}_error", error)
        with lock:
            done[0] += 1
            if progress and (done[0] % max(1, len(nodes) // 10) == 0 or code != 0):
                progress(f"{verb}: {done[0]}/{len(nodes)} done"
                         + (f"; {runs[i].name} failed ({code}): {error}" if code != 0 else ""))

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(one, range(len(nodes))))
    return time.monotonic() - started


def verb_phase(verb):
    return "join" if verb == "bootstrap" else "unjoin"


def default_parallel(n):
    """Bootstraps in flight at a time: every node of a real fleet has its own CPUs, here N
    Python processes share this machine's with the one emulator; past ~10 per core the
    emulator is starved (TLS handshakes time out: a test-machine limit, not ARM's), so
    "at once" means this many in flight, the next starting as one ends."""
    return min(n, PER_CPU * (os.cpu_count() or 1))


def run(n, parallel=None, settings=None, keep=False, progress=None, parent=None, node_niceness=0,
        join_mode="arc"):
    """Join `n` nodes, report, unjoin them; a FleetResult. `settings` are emulator settings
    to apply first (tests make the buckets tiny to force 429s). `node_niceness` > 0 renices
    this process once the emulator runs, so the nodes it starts yield the CPU to the
    emulator (`python3 -m tests.fleet` does; a test leaves its own process alone)."""
    parallel = parallel or default_parallel(n)
    base = tempfile.mkdtemp(prefix="fleet-", dir=parent)
    emu = start_emulator(os.path.join(base, "emulator"))
    # The nodes (started from here from now on) yield the CPU to the emulator: one
    # emulator stands for all of ARM, it must not be what limits the fleet.
    if node_niceness > 0:
        os.nice(node_niceness)
    nodes = []
    try:
        emu.settings(state_save_interval=STATE_SAVE_INTERVAL, **(settings or {}))
        world = emu.state()
        figures = {k: {"bucket": world["settings"][f"arm_{k}_bucket"],
                       "refill_per_second": world["settings"][f"arm_{k}_refill"]} for k in throttling.KINDS}
        result = FleetResult(n, parallel, datetime.date.today().isoformat(), figures,
                             world["settings"]["role_assignment_limit"], base=base, join_mode=join_mode)
        result.preexisting_assignments = len(world["role_assignments"])
        names = [node_name(i) for i in range(n)]
        nodes = [_make_node(base, emu, name, join_mode) for name in names]
        result.runs = [NodeRun(name) for name in names]
        if progress:
            progress(f"{n} nodes prepared under {base}; joining {parallel} at a time")

        result.join_wall = round(_all(nodes, result.runs, "bootstrap", parallel, progress), 1)
        joined_state = emu.state()
        mark = emu.throttling()["next"]
        if join_mode == "agent-pool":
            principals = {name: C.NODE_SP_OBJECT_ID for name in names}
        else:
            principals = {m["name"]: m["principal_id"] for m in joined_state["machines"] if m["name"] in names}
        per_principal = collections.Counter(a["principal_id"] for a in joined_state["role_assignments"])
        result.assignments_per_node = sorted(set(per_principal[principals[name]] for name in principals))

        result.unjoin_wall = round(_all(nodes, result.runs, "unbootstrap", parallel, progress), 1)
        for node in nodes:
            stop_fake_units(node.state_dir)
        calls = emu.throttling()["calls"]
        _analyse(result, calls[:mark], calls[mark:], set(names))
        if join_mode == "agent-pool":
            # The pool's role assignment is the operator's, for the pool, not the nodes'.
            left = leftovers(emu.state(), set(names), set())
            result.kept_by_nodes = {"pool_machines": left["pool_machines"], "nodes": left["nodes"]}
            result.operator_cleanup_seconds = operator_delete_machines(emu, left["pool_machines"])
            # deleteMachines leaves each Node to its agent (upstream docs/design/agent-and-aks.md);
            # these kubelets are stopped, so the RP's fallback removes the Nodes once they have
            # been silent for stale_node_grace: the emulator's clock moves there.
            emu.advance_clock(world["settings"]["stale_node_grace"])
            result.leftovers = leftovers(emu.state(), set(names), set())
        else:
            result.leftovers = leftovers(emu.state(), set(names), set(principals.values()))
        return result
    finally:
        for node in nodes:
            stop_fake_units(node.state_dir)
        emu.stop()
        failed = "result" not in locals() or not result.ok
        if not keep and not failed:
            shutil.rmtree(base, ignore_errors=True)


def attribute(call, names):
    """The node a ledger entry belongs to, or None."""
    ua = call["user_agent"]
    if USER_AGENT_TAG in ua:
        name = ua.split(USER_AGENT_TAG, 1)[1].split()[0]
        return name if name in names else None
    match = _MACHINE_IN_PATH.search(call["path"])
    return match.group(1) if match and match.group(1) in names else None


def _analyse(result, join_calls, unjoin_calls, names):
    for phase, calls in (("join", join_calls), ("unjoin", unjoin_calls)):
        counts = {name: collections.Counter() for name in names}
        by_client = collections.defaultdict(list)
        seen = honoured = 0
        writes = result.writes_by_principal.setdefault(phase, collections.Counter())
        for call in calls:
            if call["kind"] == "writes" and call["status"] != 429:
                writes[call["principal"] or ""] += 1
            name = attribute(call, names)
            if name is None:
                result.unattributed += 1
                continue
            if call["status"] != 429:
                counts[name][call["kind"]] += 1
            by_client[(name, call["user_agent"], call["kind"], call["method"], call["path"])].append(call)
        for (name, _ua, kind, _method, _path), series in by_client.items():
            series.sort(key=lambda c: c["time"])
            for i, call in enumerate(series):
                if call["status"] != 429:
                    continue
                seen += 1
                following = series[i + 1] if i + 1 < len(series) else None
                waited = following["time"] - call["time"] if following else None
                if waited is not None and waited >= call["retry_after"]:
                    honoured += 1
                else:
                    result.not_honoured.append({"node": name, "kind": kind, "retry_after": call["retry_after"],
                                                "waited": None if waited is None else round(waited, 3)})
        result.arm[phase] = {kind: sorted(counts[name][kind] for name in names) for kind in throttling.KINDS}
        result.throttled[phase] = {"seen": seen, "honoured": honoured}


def operator_delete_machines(emu, names, timeout=300):
    """The operator's cleanup of an agent pool's fleet: one POST deleteMachines naming every
    Machine (what `az aks nodepool delete-machines --machine-names ...` sends), its
    Azure-AsyncOperation polled to the end; seconds taken (None when there was nothing)."""
    if not names:
        return None
    started = time.monotonic()
    status, headers, body = emu.arm_call("POST", f"{C.FLEX_POOL_ID}/deleteMachines", C.AGENTPOOL_API,
                                         {"machineNames": list(names)})
    if status != 202:
        raise RuntimeError(f"deleteMachines answered {status}: {body}")
    monitor = headers["Azure-AsyncOperation"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, body = emu.http("GET", monitor, headers={"Authorization": f"Bearer {emu.arm_token()}"})
        if status == 200 and body.get("status") != "InProgress":
            if body.get("status") != "Succeeded":
                raise RuntimeError(f"deleteMachines ended {body}")
            return round(time.monotonic() - started, 1)
        time.sleep(1)
    raise RuntimeError(f"deleteMachines still running after {timeout} s")


def leftovers(state, names, principals):
    """What the emulator still holds of the fleet's nodes."""
    return {
        "arc_machines": sorted(m["name"] for m in state["machines"] if m["name"] in names),
        "pool_machines": sorted(m["name"] for pool in state.get("agentpool_machines", {}).values()
                                for m in pool if m["name"] in names),
        "role_assignments": sorted(a["name"] for a in state["role_assignments"] if a["principal_id"] in principals),
        "nodes": sorted(n["metadata"]["name"] for nodes in state["nodes"].values() for n in nodes
                        if n["metadata"]["name"] in names),
    }


# -- the report -----------------------------------------------------------------------------


def _spread(values):
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi} (mean {sum(values) / len(values):.1f})"


def render(result):
    at_once = ("all at once" if result.parallel >= result.nodes_wanted
               else f"at most {result.parallel} at a time")
    fig = result.figures
    lines = [
        f"fleet simulation, {result.date}: {result.nodes_wanted} nodes, one subscription, bootstraps started {at_once}"
        + (f", join_mode agent-pool (one service principal for the pool {C.FLEX_POOL}: one set of buckets)"
           if result.join_mode == "agent-pool" else ""),
        "ARM buckets per principal: reads {r[bucket]} +{r[refill_per_second]:g}/s, writes {w[bucket]} "
        "+{w[refill_per_second]:g}/s, deletes {d[bucket]} +{d[refill_per_second]:g}/s".format(
            r=fig["reads"], w=fig["writes"], d=fig["deletes"]),
        "",
        "| | join | unjoin |",
        "|---|---|---|",
        f"| wall time (s) | {result.join_wall:.1f} | {result.unjoin_wall:.1f} |",
        f"| nodes done | {result.joined}/{result.nodes_wanted} | {result.unjoined}/{result.nodes_wanted} |",
    ]
    for kind in throttling.KINDS:
        lines.append(f"| ARM {kind} per node | {_spread(result.arm.get('join', {}).get(kind))} | "
                     f"{_spread(result.arm.get('unjoin', {}).get(kind))} |")
    t = result.throttled
    lines.append(f"| 429s seen / honoured | {t.get('join', {}).get('seen', 0)} / {t.get('join', {}).get('honoured', 0)} | "
                 f"{t.get('unjoin', {}).get('seen', 0)} / {t.get('unjoin', {}).get('honoured', 0)} |")
    lines.append(f"| runs retried after exit 75, as the agent would | "
                 f"{sum(r.join_attempts - 1 for r in result.runs if r.join_attempts)} | "
                 f"{sum(r.unjoin_attempts - 1 for r in result.runs if r.unjoin_attempts)} |")
    slow_join, slow_unjoin = result.slowest("join"), result.slowest("unjoin")
    lines.append(f"| slowest node (s) | {slow_join.name if slow_join else '-'} {slow_join.join_seconds if slow_join else ''} | "
                 f"{slow_unjoin.name if slow_unjoin else '-'} {slow_unjoin.unjoin_seconds if slow_unjoin else ''} |")
    if result.join_mode == "agent-pool":
        lines += ["", f"role assignments held by the pool's identity: {result.assignments_per_node} for the whole "
                      "fleet (made once by the operator; a node adds none, so the subscription's "
                      f"{result.role_assignment_limit} assignments do not bound the fleet)",
                  "kept by the nodes' unjoins (the pool's role may not delete Machines; no node may delete its "
                  f"own Node): {len(result.kept_by_nodes.get('pool_machines', []))} Machines, "
                  f"{len(result.kept_by_nodes.get('nodes', []))} Nodes; the operator's one deleteMachines "
                  f"took {result.operator_cleanup_seconds} s"]
    else:
        lines += ["", f"role assignments per node measured: {result.assignments_per_node}; "
                      f"limit {result.role_assignment_limit} per subscription, {result.preexisting_assignments} there before",
                  "| role preset | assignments per node | max nodes per subscription |", "|---|---|---|"]
        for name, c in result.ceilings().items():
            lines.append(f"| {name} | {c['assignments_per_node']} | {c['max_nodes']} |")
    lines.append("")
    left = {k: v for k, v in result.leftovers.items() if v}
    lines.append("left in the emulator after unjoin: " + (json.dumps(left) if left else "nothing"))
    failed = [r for r in result.runs if r.join_code != 0 or r.unjoin_code != 0]
    for r in failed[:10]:
        lines.append(f"FAILED {r.name}: join {r.join_code} {r.join_error} / unjoin {r.unjoin_code} {r.unjoin_error}")
    if result.not_honoured:
        lines.append(f"429s not honoured: {len(result.not_honoured)}, e.g. {result.not_honoured[:3]}")
    if result.unattributed:
        lines.append(f"ARM calls not attributed to a node: {result.unattributed}")
    if not result.ok:
        lines.append(f"kept {result.base}")
    lines.append("PASS" if result.ok else "FAIL")
    return "\n".join(lines)
