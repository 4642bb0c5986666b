"""`make bench`'s WAN part (issue 30): the figures that matter where round trips cost tens of
milliseconds, RBAC takes its time and the agent runs for the node's whole life.

The WAN profile is the emulator's (tests/emulator/wan.py, `wan.BENCH`; its README says where
each figure comes from). For each run the emulator's request log gives the request count
and the chain depth (tests/request_chains.py): the longest chain of requests each sent only
after the one before it was answered, whose round trips are a floor no concurrency lifts.

Measured here, each beside its goal:
- cold join on the WAN profile against its critical-path lower bound: each step weighs what
  it costs alone (its duration in the --sequential run of the same profile), except
  rbac-propagation, which weighs RBAC propagation plus one API server round trip (the
  roles step's assignment write is its last action; the first check after propagation can
  pass); plus the process's fixed cost outside the runner. The downloads share the one link,
  so the bound is also at least the path to the first download plus every real size over
  the link's rate;
- converged re-run on the WAN profile: chain depth and time;
- `agent --once` on the converged node (a full, cloud pass): count, depth, time;
- the agent at its default intervals (60 s local, 1800 s cloud): CPU time per hour, from
  the parent's and its reaped children's CPU (/proc/PID/stat utime, stime, cutime, cstime)
  over LOCAL_PASSES local passes (the drift probe off), LOCAL_PASSES intervals with the probe
  on (its probes, after one local pass) and CLOUD_PASSES cloud passes at short intervals, each
  interval charged to what status.json says ended it, scaled to an hour's passes and probes
  (agent_cost). The host commands a pass runs are stand-ins here, Python scripts whose
  interpreter start is not what systemctl (C) or azcmagent (Go) cost on a host: each call
  the passes made is weighed apart (its argv run again when it only reads) and printed, and
  the goal is judged on the rest, the agent's own CPU; its resident memory (the parent's
  VmRSS) between passes;
- `token` cold: HIMDS round trips of one call; `token` cached: requests (none) and the
  modules it imports beyond an interpreter's start (python -X importtime), and of those the
  ones that `import json, os, time` does not load itself (json loads re, re loads enum);
- a small fleet (tests/fleet) with ARM's buckets scaled down until writes bind: join wall
  time against the floor the write bucket imposes, and every 429 waited out.
"""

import json
import os
import re
import subprocess
import sys
import time

from tests import harness
from tests.emulator import wan
from tests.request_chains import chain_depth, describe, window

RTT = {server: wan.BENCH[setting] for server, setting in wan.RTT_SETTINGS.items()}
LOCAL_PASSES = 20
CLOUD_PASSES = 5
PASS_INTERVAL = 1.0  # seconds between the measured passes (the agent's --interval)
DEFAULT_INTERVAL, DEFAULT_CLOUD_INTERVAL = 60.0, 1800.0  # agent.run's defaults
# Issue 30: a cached token loads nothing more than this does (os.fdopen imports io when it
# runs, and Python 3.14 no longer loads io at its start: what os's own functions load is os's).
TOKEN_ALLOWED = "import sys, json, os, time\nos.fdopen(os.open(os.devnull, os.O_RDONLY), 'rb').close()"
FLEET_NODES = 12
FLEET_SCALE = 10  # ARM's documented buckets divided by this (tests/fleet/__main__.py scaled_figures)

GOALS = {
    "WAN join / lower bound": 1.05,
    "WAN converged re-run (s)": 0.5,
    "WAN converged re-run depth": 4,
    "agent CPU per hour (s)": 3.6,
    "agent resident (parent, MB)": 20,
    "token cold: HIMDS round trips": 1,
    "token cached: requests": 0,
    "fleet / write floor": 1.2,
}


def wan_settings(emu):
    emu.settings(**wan.BENCH)


def run_requests(emu, since):
    """The requests of a run that began at `since` (time.time()): the node's own, not the
    bench's admin calls nor the kubelet stand-in's heartbeats (the kubelet is not the run;
    the Arc agent stand-in's requests are: they stand for azcmagent connect)."""
    return [r for r in window(emu.requests(), since)
            if r["server"] != "admin" and not (r.get("user_agent") or "").startswith("kubelet/")]


def chain_floor(path):
    """Seconds of round trip along a chain: what it costs on the WAN profile with free work."""
    return sum(RTT.get(r["server"], 0.0) for r in path)


def chain_figures(emu, since):
    requests = run_requests(emu, since)
    depth, path = chain_depth(requests)
    return {"count": len(requests), "depth": depth, "path": path, "floor": chain_floor(path),
            "by_server": _count_by(requests), "repeats": repeats(path)}


def repeats(path):
    """The links of a chain that ask what an earlier link asked (same server, method and path)."""
    seen, out = set(), []
    for r in path:
        key = (r["server"], r["method"], r["path"])
        if key in seen:
            out.append(r)
        seen.add(key)
    return out


def _count_by(requests):
    out = {}
    for r in requests:
        out[r["server"]] = out.get(r["server"], 0) + 1
    return out


# ---- the lower bound of the WAN join ---------------------------------------------------------


def wan_lower_bound(sequential_wall, sequential, longest_path, durations):
    """(bound, fixed, path, weights, link floor): the critical path of the step graph under
    the WAN profile, and the shared link's floor."""
    from aks_flex_node.steps.artifacts import ArtifactStep
    from aks_flex_node.steps.workflow import STEP_CLASSES

    alone = durations(sequential)
    weights = dict(alone)
    weights["rbac-propagation"] = wan.BENCH["rbac_propagation_delay"] + RTT["apiserver"]
    fixed = max(0.0, sequential_wall - sequential["duration_s"])
    length, path = longest_path(weights)
    # The link: no download starts before its step's needs are done; all of them together
    # take every real size over the rate (the stand-ins' own bytes are a rounding error).
    artifact_steps = [cls for cls in STEP_CLASSES if issubclass(cls, ArtifactStep)]
    first = min(longest_path(weights, until=cls.name)[0] - weights.get(cls.name, 0.0) for cls in artifact_steps)
    link = first + sum(wan.REAL_SIZES.values()) / wan.BENCH["artifact_rate"]
    return fixed + max(length, link), fixed, path, weights, fixed + link


# ---- the agent over many passes ---------------------------------------------------------------


def _stat(pid):
    """(CPU seconds of the process and of its reaped children, VmRSS MiB)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks  # utime stime cutime cstime
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    return cpu, rss


def _status_stamp(node):
    """status.json's (mtime_ns, state, what ended the interval): a pass ends with a rewrite of
    it, and so does the drift probe that stood in for one (agent.py), which changes only
    its `checked` and `probes` and leaves the pass's `started`: "pass" or "probe"."""
    path = node.path("/var/lib/aks-flex-node/status.json")
    try:
        with open(path) as f:
            doc = json.load(f)
        return os.stat(path).st_mtime_ns, doc.get("state"), (doc.get("started"), doc.get("probes"))
    except (OSError, ValueError):
        return None, None, None


def agent_passes(node, passes, cloud, probe_max_age=0, timeout=300):
    """Run the agent until it has ended `passes` intervals after its first pass (all cloud
    passes when `cloud`; with `probe_max_age`, the drift probe stands in for the local passes
    it can); ({"pass" or "probe": [CPU seconds, intervals, the stand-in commands' argv]} over
    them, VmRSS samples between them). Each interval's CPU is charged to what ended it."""
    argv = [sys.executable, "-m", "aks_flex_node", "agent", "--root", node.root, "--interval", str(PASS_INTERVAL),
            "--cloud-interval", "0.01" if cloud else "3600", "--probe-max-age", str(probe_max_age)]
    errors = open(os.path.join(node.root, "..", "agent-stderr.log"), "w+")
    proc = subprocess.Popen(argv, env=node.env, cwd=harness.REPO, stdout=subprocess.DEVNULL, stderr=errors)
    seen, which, counted, rss = _status_stamp(node)[0], _status_stamp(node)[2], -1, []
    kinds = {"pass": [0.0, 0, []], "probe": [0.0, 0, []]}
    last_cpu = last_calls = None
    try:
        deadline = time.monotonic() + timeout
        while counted < passes and time.monotonic() < deadline:
            if proc.poll() is not None:
                errors.seek(0)
                raise SystemExit(f"the agent exited {proc.returncode}:\n{errors.read()[-2000:]}")
            stamp, state, now = _status_stamp(node)
            if stamp != seen and state == "succeeded":
                kind = "probe" if which is not None and now[0] == which[0] and now[1] else "pass"
                seen, which = stamp, now
                counted += 1
                time.sleep(PASS_INTERVAL / 4)  # well inside the wait before the next pass
                cpu, mb = _stat(proc.pid)
                calls = len(node.fake.calls())
                if counted > 0:  # the first pass (imports, the first full pass) is not counted
                    kinds[kind][0] += cpu - last_cpu
                    kinds[kind][1] += 1
                    kinds[kind][2] += node.fake.calls()[last_calls:calls]
                    rss.append(mb)
                last_cpu, last_calls = cpu, calls
            time.sleep(0.02)
    finally:
        proc.terminate()
        proc.wait(30)
        errors.close()
    if counted < passes:
        raise SystemExit(f"the agent finished {counted} of {passes} intervals in {timeout} s")
    return kinds, rss


# Stand-in calls that only read (a converged pass's), safe to run again to weigh them.
READ_ONLY_VERBS = {"systemctl": ("show", "is-active", "is-enabled", "status"), "azcmagent": ("show",)}


def _children_cpu(run):
    before = os.times()
    run()
    after = os.times()
    return after.children_user + after.children_system - before.children_user - before.children_system


def stand_in_cpu(node, calls, runs=5):
    """CPU seconds the stand-in commands of `calls` (argv lists) took: each distinct read-only
    argv run again `runs` times and its mean charged per call; any other call (none on a
    converged node) at the mean of `systemctl is-active kubelet`. The stand-ins are Python
    scripts here; on a host systemctl is a C program and azcmagent a Go one."""
    cost = {}

    def weigh(argv):
        key = tuple(argv)
        if key not in cost:
            cost[key] = _children_cpu(lambda: [subprocess.run(argv, env=node.env, capture_output=True)
                                               for _ in range(runs)]) / runs
        return cost[key]

    total = 0.0
    for argv in calls:
        read_only = len(argv) > 1 and argv[1] in READ_ONLY_VERBS.get(argv[0], ())
        total += weigh(argv if read_only else ["systemctl", "is-active", "kubelet"])
    return total


def pass_imports_cpu():
    """CPU seconds a pass's child spends importing what the parent does not hold (the parent
    holds cli, agent and the host package, for its resident size: agent.py): median of 3. The
    modules are those a converged local pass loads (config, the lifecycle, operations and the
    step modules with it; pool_follow in agent-pool mode), not the Azure SDK, which only a
    cloud pass loads (tests/integration/test_agent_local_pass_imports.py)."""
    code = ("import time; import aks_flex_node.cli, aks_flex_node.agent; from aks_flex_node.host import Host; "
            "Host('/'); t = time.process_time(); "
            "import aks_flex_node.config, aks_flex_node.lifecycle, aks_flex_node.operations, "
            "aks_flex_node.pool_follow; print(time.process_time() - t)")
    runs = sorted(float(subprocess.run([sys.executable, "-c", code], cwd=harness.REPO, capture_output=True,
                                       text=True, check=True).stdout) for _ in range(3))
    return runs[1]


def resident_with_pass_imports():
    """VmRSS (MiB) of an interpreter that holds what the agent's parent holds and what a
    local pass imports: the parent's size if it imported them for its children to share."""
    code = ("import aks_flex_node.cli, aks_flex_node.agent; from aks_flex_node.host import Host; Host('/'); "
            "import aks_flex_node.config, aks_flex_node.lifecycle, aks_flex_node.operations, aks_flex_node.pool_follow; "
            "print(next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1])")
    out = subprocess.run([sys.executable, "-c", code], cwd=harness.REPO, capture_output=True, text=True, check=True)
    return int(out.stdout) / 1024


def agent_cost(node):
    """The agent's CPU per hour at its default intervals, from three runs: real local passes
    (the probe off), local intervals with the drift probe at its default age (the probes,
    after one real local pass), and cloud passes. An hour at the defaults has
    3600 / DEFAULT_INTERVAL intervals: 3600 / DEFAULT_CLOUD_INTERVAL cloud passes, a real
    local pass every PROBE_MAX_AGE seconds but where a cloud pass falls, and probes in the
    rest (on a converged node; drift or a failure adds real passes)."""
    from aks_flex_node.agent import PROBE_MAX_AGE

    local, rss = agent_passes(node, LOCAL_PASSES, cloud=False)
    probed, rss_probe = agent_passes(node, LOCAL_PASSES, cloud=False, probe_max_age=PROBE_MAX_AGE)
    cloud, rss_cloud = agent_passes(node, CLOUD_PASSES, cloud=True)
    (local_cpu, local_n, local_calls), (cloud_cpu, cloud_n, cloud_calls) = local["pass"], cloud["pass"]
    probe_cpu, probe_n, probe_calls = probed["probe"]
    per_local, per_cloud, per_probe = local_cpu / local_n, cloud_cpu / cloud_n, probe_cpu / max(probe_n, 1)
    cloud_per_hour = 3600 / DEFAULT_CLOUD_INTERVAL
    local_per_hour = 3600 / PROBE_MAX_AGE - cloud_per_hour
    probes_per_hour = 3600 / DEFAULT_INTERVAL - local_per_hour - cloud_per_hour
    local_stand_ins = stand_in_cpu(node, local_calls) / local_n
    cloud_stand_ins = stand_in_cpu(node, cloud_calls) / cloud_n
    probe_stand_ins = stand_in_cpu(node, probe_calls) / max(probe_n, 1)
    per_hour = per_local * local_per_hour + per_cloud * cloud_per_hour + per_probe * probes_per_hour
    stand_ins = (local_stand_ins * local_per_hour + cloud_stand_ins * cloud_per_hour
                 + probe_stand_ins * probes_per_hour)
    # Without the probe (as before it): every local interval a real local pass.
    unprobed = (per_local - local_stand_ins) * (3600 / DEFAULT_INTERVAL - cloud_per_hour) \
        + (per_cloud - cloud_stand_ins) * cloud_per_hour
    return {"per_local": per_local, "per_cloud": per_cloud, "per_probe": per_probe, "local_n": local_n,
            "cloud_n": cloud_n, "probe_n": probe_n, "probe_run_passes": probed["pass"][1],
            "per_hour": per_hour, "ours_per_hour": per_hour - stand_ins, "ours_unprobed_per_hour": unprobed,
            "ours_local": per_local - local_stand_ins, "ours_cloud": per_cloud - cloud_stand_ins,
            "ours_probe": per_probe - probe_stand_ins, "probe_max_age": PROBE_MAX_AGE,
            "local_per_hour": local_per_hour, "cloud_per_hour": cloud_per_hour, "probes_per_hour": probes_per_hour,
            "calls_per_local": len(local_calls) / local_n, "local_commands": sorted({" ".join(argv[:2]) for argv in local_calls}),
            "calls_per_probe": len(probe_calls) / max(probe_n, 1),
            "stand_ins_local": local_stand_ins, "stand_ins_probe": probe_stand_ins, "stand_ins_per_hour": stand_ins,
            "rss": rss + rss_probe + rss_cloud, "imports": pass_imports_cpu(),
            "resident_with_imports": resident_with_pass_imports()}


# ---- token ------------------------------------------------------------------------------------


IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+\d+ \|( *)(\S+)$")
MODULES_MARK = "\nMODULES "


def loaded(python, code, args, env):
    """(the modules in sys.modules once `code` ran, {module: its own import microseconds})."""
    code += f"; sys.stderr.write({MODULES_MARK!r} + ' '.join(sorted(sys.modules)) + '\\n')"
    proc = subprocess.run([python, "-X", "importtime", "-c", code, *args], env=env, cwd="/",
                          capture_output=True, text=True)
    modules = set(proc.stderr.rsplit(MODULES_MARK, 1)[1].split()) if MODULES_MARK in proc.stderr else set()
    costs = {m.group(3): int(m.group(1)) for m in map(IMPORT_LINE.match, proc.stderr.splitlines()) if m}
    return modules, costs


def token_imports(bin_dir, env):
    """(modules a cached `token` loads beyond the interpreter's start and our package, those
    that json, os and time do not load themselves, the milliseconds their imports took)."""
    python = str(bin_dir / "python")
    base, _ = loaded(python, "import sys", [], env)
    allowed, _ = loaded(python, TOKEN_ALLOWED, [], env)
    run, costs = loaded(python, "import sys; from aks_flex_node.cli import main; main()", ["token"], env)
    extra = sorted(name for name in run - base if name.split(".")[0] != "aks_flex_node")
    beyond = [name for name in extra if name not in allowed]
    return extra, beyond, sum(costs.get(name, 0) for name in beyond) / 1000


def token_round_trips(emu, bin_dir, env, cache):
    """(requests of one cold call by server, its chain depth; requests of 5 cached calls)."""
    cli = str(bin_dir / "aks-flex-node")
    if os.path.exists(cache):
        os.remove(cache)
    since = time.time()
    subprocess.run([cli, "token"], env=env, cwd="/", check=True, capture_output=True)
    cold = run_requests(emu, since)
    since = time.time()
    for _ in range(5):
        subprocess.run([cli, "token"], env=env, cwd="/", check=True, capture_output=True)
    cached = run_requests(emu, since)
    return _count_by(cold), chain_depth(cold)[0], len(cached)


# ---- the fleet --------------------------------------------------------------------------------


def fleet_goal(parent):
    """A FLEET_NODES fleet with ARM's buckets divided by FLEET_SCALE: (result, write floor s)."""
    from tests.fleet import simulation
    from tests.fleet.__main__ import scaled_figures

    settings = scaled_figures(FLEET_SCALE)
    result = simulation.run(FLEET_NODES, parallel=FLEET_NODES, settings=settings, parent=parent)
    # Each principal has its own write bucket (throttling.py): the floor is the busiest one's.
    # The writes counted are those admitted (a 429 takes no token).
    by_principal = result.writes_by_principal.get("join", {})
    writes = max(by_principal.values(), default=0)
    floor = max(0.0, (writes - settings["arm_writes_bucket"]) / settings["arm_writes_refill"])
    return result, floor, writes, settings


# ---- the report -------------------------------------------------------------------------------


def judge(value, goal, unit):
    return f"goal <= {goal:g}{unit}  {'met' if value <= goal else 'NOT MET'}"


def row(name, value, unit, goal_key=None, fmt="8.2f"):
    judged = judge(value, GOALS[goal_key], unit) if goal_key else ""
    print(f"  {name:<40} {value:{fmt}}{unit:<3} {judged}")


def chain_line(figures):
    servers = ", ".join(f"{k} {v}" for k, v in sorted(figures["by_server"].items()))
    return (f"    {figures['count']} requests ({servers}); chain depth {figures['depth']}, "
            f"whose round trips alone are {figures['floor']:.2f} s")


def print_chain(figures, limit=12):
    steps = describe(figures["path"])
    shown = steps if len(steps) <= limit else steps[:limit] + [f"... {len(steps) - limit} more"]
    print("    the chain: " + " -> ".join(shown))


def report_profile():
    b = wan.BENCH
    print(f"\nthe WAN profile (tests/emulator/wan.py BENCH): ARM {b['wan_arm_rtt'] * 1000:.0f} ms, Entra "
          f"{b['wan_entra_rtt'] * 1000:.0f} ms, API server {b['wan_apiserver_rtt'] * 1000:.0f} ms, HIMDS "
          f"{b['wan_himds_rtt'] * 1000:.0f} ms, artifact host {b['wan_artifacts_rtt'] * 1000:.0f} ms per request; "
          f"artifacts at {b['artifact_rate'] / 1e6:g} MB/s on one link with their real sizes ("
          + ", ".join(f"{k} {v / 1e6:g} MB" for k, v in wan.REAL_SIZES.items())
          + f"); RBAC propagation {b['rbac_propagation_delay']:g} s; Arc connect {b['arc_connect_delay']:g} s")


def report_join(join, sequential, bound, fixed, path, weights, link, cold, seq_chain):
    print("\ncold join on the WAN profile:")
    row("concurrent (default)", join, " s")
    print(chain_line(cold))
    row("--sequential", sequential, " s")
    print(chain_line(seq_chain))
    row("lower bound", bound, " s")
    print(f"    = {fixed:.2f} s outside the runner + the critical path "
          + " -> ".join(f"{name} {weights.get(name, 0):.2f}" for name in path if weights.get(name, 0) >= 0.005))
    print(f"    (the shared link's floor: {link:.2f} s: the path to the first download, then "
          f"{sum(wan.REAL_SIZES.values()) / 1e6:.0f} MB at {wan.BENCH['artifact_rate'] / 1e6:g} MB/s)")
    row("WAN join / lower bound", join / bound, "x", "WAN join / lower bound")


def rerun_imports(node, runs=5):
    """(interpreter start s, start and imports s): medians of `runs` fresh interpreters, one
    doing nothing, one importing every module a converged `bootstrap` has loaded when it ends
    (and nothing else): CPU that no order of the run's reads can take away."""
    code = ("import sys; from aks_flex_node.cli import main; code = main(); "
            f"sys.stderr.write({MODULES_MARK!r} + ' '.join(sorted(sys.modules)) + '\\n'); sys.exit(code)")
    env = dict(node.env, PYTHONPATH=harness.REPO)
    proc = subprocess.run([sys.executable, "-c", code, "bootstrap", "--root", node.root, "--json"],
                          env=env, cwd="/", capture_output=True, text=True)
    if proc.returncode != 0 or MODULES_MARK not in proc.stderr:
        raise SystemExit(f"the converged bootstrap failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    names = sorted(m for m in proc.stderr.rsplit(MODULES_MARK, 1)[1].split() if m != "__main__")
    importing = ("import importlib, os\nfor m in %r:\n    try:\n        importlib.import_module(m)\n"
                 "    except Exception:\n        pass\nos._exit(0)" % names)

    def median_of(argv):
        times = []
        for _ in range(runs):
            t0 = time.monotonic()
            subprocess.run(argv, env=env, cwd="/", check=True, capture_output=True)
            times.append(time.monotonic() - t0)
        return sorted(times)[len(times) // 2]

    return median_of([sys.executable, "-c", "pass"]), median_of([sys.executable, "-c", importing]), len(names)


def report_converged(wall, figures, walls=(), imports=None):
    print("\nconverged re-run on the WAN profile (whole process" + (f", median of {len(walls)}" if walls else "") + "):")
    row("WAN converged re-run (s)", wall, " s", "WAN converged re-run (s)")
    if walls:
        print("    runs " + ", ".join(f"{w:.2f}" for w in walls) + " s; the chain below is the run of the median depth")
    row("WAN converged re-run depth", figures["depth"], "", "WAN converged re-run depth", fmt="8d")
    print(chain_line(figures))
    print_chain(figures)
    if figures["depth"] > GOALS["WAN converged re-run depth"]:
        print(f"    why not: the run's own order is 3 answers in a row (steps/cloud_reads.py: Entra's discovery, "
              f"the token, then the ARM reads, the role assignments of the principal the join recorded among "
              f"them, and the Node at once; tests/integration/test_cloud_reads.py holds it); {figures['depth']} "
              "means a request sent beside them began only after another had ended (a preflight probe, or the "
              "Node read, delayed by a busy CPU): the chain counts any request that starts after another's answer")
    if imports is not None:
        start, imported, count = imports
        print(f"    a fresh interpreter: {start:.2f} s to start; {imported:.2f} s to start and import the {count} "
              "modules this run has loaded when it ends, and do nothing else (most of them the Azure SDK's: "
              "azure-identity with MSAL, requests and cryptography, and the three management clients)")
    if wall > GOALS["WAN converged re-run (s)"]:
        floor = figures["floor"] + (imports[1] if imports else 0.0)
        print(f"    why not: {figures['floor']:.2f} s of it is the chain's round trips, and "
              + (f"{imports[1]:.2f} s the interpreter's start and the imports alone, {floor:.2f} s together: "
                 if imports else "")
              + "this process's CPU, one interpreter lock, takes the rest: preflight's host checks and probes, "
              "the SDK's requests and answers, the steps' checks, status and metrics written (fsync'd), and the "
              "host-command stand-ins (Python scripts here); the management clients' imports run while the "
              "token is on its way and the local checks while ARM answers, so what is left is CPU, not waiting: "
              "`python3 -m tests.bench converged` shows the run's phases")


def report_agent_pass(wall, figures):
    print("\nthe agent's cloud pass on the converged node (agent --once, whole process, WAN profile):")
    row("agent cloud pass", wall, " s")
    print(chain_line(figures))


def report_agent_cost(cost):
    print(f"\nthe agent at its default intervals ({DEFAULT_INTERVAL:g} s local, {DEFAULT_CLOUD_INTERVAL:g} s cloud, "
          f"the drift probe standing in for local passes up to {cost['probe_max_age']:g} s), measured over "
          f"{cost['local_n']} local passes (probe off), {cost['probe_n']} probes (after {cost['probe_run_passes']} "
          f"real local pass in that run) and {cost['cloud_n']} cloud passes at {PASS_INTERVAL:g} s, each counted "
          "by what status.json says ended it (a pass's `started`, or a probe's `probes`):")
    row("agent CPU per hour, all", cost["per_hour"], " s")
    print(f"    = {cost['probes_per_hour']:.0f} probes x {cost['per_probe'] * 1000:.1f} ms + "
          f"{cost['local_per_hour']:.0f} local passes x {cost['per_local'] * 1000:.0f} ms + "
          f"{cost['cloud_per_hour']:.0f} cloud passes x {cost['per_cloud'] * 1000:.0f} ms CPU (the agent, its "
          "passes' children and the host commands they and the probes ran)")
    print(f"    of which the host commands' stand-ins: {cost['calls_per_local']:.1f} per local pass "
          f"({', '.join(cost['local_commands']) or 'none'}), {cost['stand_ins_local'] * 1000:.0f} ms a local pass, "
          f"{cost['calls_per_probe']:.1f} per probe, {cost['stand_ins_probe'] * 1000:.0f} ms a probe, "
          f"{cost['stand_ins_per_hour']:.2f} s per hour. They are Python scripts here (each an interpreter's start); "
          "on a host systemctl is a C program and azcmagent a Go one, whose CPU is theirs to weigh: the agent's own "
          "is what is left")
    row("agent CPU per hour (s)", cost["ours_per_hour"], " s", "agent CPU per hour (s)")
    print(f"    = {cost['probes_per_hour']:.0f} probes x {cost['ours_probe'] * 1000:.1f} ms + "
          f"{cost['local_per_hour']:.0f} local passes x {cost['ours_local'] * 1000:.0f} ms + "
          f"{cost['cloud_per_hour']:.0f} cloud passes x {cost['ours_cloud'] * 1000:.0f} ms (the agent and its passes, "
          "without the stand-ins); a real local pass every "
          f"{cost['probe_max_age']:g} s reads what the probe does not (the Node as the node, the clock's verdicts)")
    print(f"    without the probe (a real local pass every interval): {cost['ours_unprobed_per_hour']:.2f} s")
    imports = cost["imports"] * (cost["local_per_hour"] + cost["cloud_per_hour"])
    print(f"    of which each pass's imports: {cost['imports'] * 1000:.0f} ms in the forked child = {imports:.2f} s "
          f"per hour (config, lifecycle, operations and the step modules; no Azure SDK on a local pass); the "
          f"parent would hold {cost['resident_with_imports']:.1f} MB if it imported them itself")
    if cost["ours_per_hour"] > GOALS["agent CPU per hour (s)"]:
        work = cost["ours_local"] - cost["imports"]
        print(f"    why not: a local pass is a forked child that imports the config and step modules "
              f"({cost['imports'] * 1000:.0f} ms), then loads and validates the config, reads the ledger and "
              f"status, checks every step and writes status ({work * 1000:.0f} ms); a probe costs "
              f"{cost['ours_probe'] * 1000:.1f} ms. Importing in the parent instead, which forked children then "
              f"share, would cost the resident goal ({cost['resident_with_imports']:.1f} MB against "
              f"{GOALS['agent resident (parent, MB)']:g} MB)")
    row("agent resident (parent, MB)", max(cost["rss"]), " MB", "agent resident (parent, MB)")
    print("    samples " + ", ".join(f"{mb:.1f}" for mb in cost["rss"][:8]) + (" ..." if len(cost["rss"]) > 8 else ""))


def report_token(cold_by_server, cold_depth, cached_requests, extra, beyond, beyond_ms):
    print("\n`token` on the WAN profile (the installed wheel):")
    himds = cold_by_server.get("himds", 0)
    row("token cold: HIMDS round trips", himds, "", "token cold: HIMDS round trips", fmt="8d")
    print(f"    requests {cold_by_server}, chain depth {cold_depth}")
    if himds > GOALS["token cold: HIMDS round trips"]:
        print("    why not: HIMDS answers a token only to a request carrying the key of a challenge it has just "
              "issued (a 401 whose WWW-Authenticate realm names a new key file; Learn \"Authenticate against "
              "Azure resources with Azure Arc-enabled servers\"), and a key serves one token request: two round "
              "trips is the protocol's floor (at 1 ms each here)")
    row("token cached: requests", cached_requests, "", "token cached: requests", fmt="8d")
    print(f"    imports beyond the interpreter's start and aks_flex_node: {', '.join(extra) or 'none'}")
    print(f"    beyond what json, os and time load themselves: {len(beyond)}  goal: none  "
          f"{'met' if not beyond else 'NOT MET'}")
    if beyond:
        print(f"    why not: {', '.join(beyond)}; their imports took {beyond_ms:.1f} ms of the call. A hit is "
              "answered by aks_flex_node/cached_token.py before cli.main imports anything else: one of its "
              "modules (cached_token, paths, access_token, host/careful_read) has gained an import")


def report_fleet(result, floor, writes, settings):
    print(f"\n`make fleet` of {result.nodes_wanted} nodes with ARM's buckets divided by {FLEET_SCALE} (writes "
          f"{settings['arm_writes_bucket']} +{settings['arm_writes_refill']:g}/s, reads {settings['arm_reads_bucket']} "
          f"+{settings['arm_reads_refill']:g}/s):")
    row("join wall time", result.join_wall, " s")
    row("write floor", floor, " s")
    print(f"    = ({writes} writes admitted for the busiest principal - {settings['arm_writes_bucket']} burst) / "
          f"{settings['arm_writes_refill']:g} per s; nodes joined {result.joined}/{result.nodes_wanted}, "
          f"unjoined {result.unjoined}")
    row("fleet / write floor", result.join_wall / floor if floor else float("inf"), "x", "fleet / write floor")
    seen = sum(t.get("seen", 0) for t in result.throttled.values())
    honoured = sum(t.get("honoured", 0) for t in result.throttled.values())
    print(f"    429s seen {seen}, honoured (that request sent again no sooner than Retry-After) {honoured}, "
          f"retried early {len(result.not_honoured)}  goal: all honoured, none early  "
          f"{'met' if seen == honoured and not result.not_honoured else 'NOT MET'}")
    if not result.ok:
        print(f"    the fleet FAILED (kept under {result.base})")


# ---- the agent's part alone ---------------------------------------------------------------------


def agent_only():
    """`python3 -m tests.bench_wan`: the agent's CPU per hour and resident size alone (about
    three minutes), without the rest of `make bench`: a scratch node joined on the emulator,
    then its passes and probes on the WAN profile as `make bench` runs them."""
    import json
    import pathlib
    import tempfile

    from tests.emulator_fixtures import scratch_node, start_emulator, stop_fake_units

    base = pathlib.Path(tempfile.mkdtemp(prefix="aks-flex-node-bench-agent-"))
    emu = start_emulator(base / "emulator")
    try:
        emu.settings(rbac_propagation_delay=0)
        node = scratch_node(emu, base / "node")
        proc = node.cli("bootstrap", "--json")
        if proc.returncode != 0 or json.loads(proc.stdout).get("state") != "succeeded":
            raise SystemExit(f"the join failed:\n{proc.stdout}\n{proc.stderr}")
        wan_settings(emu)
        cost = agent_cost(node)
    finally:
        stop_fake_units(base / "node" / "fake-state")
        emu.stop()
    print(f"(load average {os.getloadavg()[0]:.1f})")
    report_agent_cost(cost)
    return 0


if __name__ == "__main__":
    sys.exit(agent_only())
