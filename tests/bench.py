"""`make bench`: how long a join takes against the lower bound of its own profile, what a
converged re-run costs, how fast the light commands are as installed, and what the agent
keeps resident. Every figure is printed beside its goal (issue 12); speed goals are judged
here, never by timing assertions in tests. Then the same questions where they are paid
(issue 30): on the emulator's WAN profile, the agent over many passes, `token`'s round trips
and imports, and a small fleet against ARM's scaled buckets: tests/bench_wan.py says what
each of those figures is.

The join profile: the emulator, with network-like latency injected where a real join
waits: each artifact download is delayed ARTIFACT_DELAY s and role assignments take
RBAC_DELAY s to reach the API server.

The join's lower bound is the longest path through the step graph (each step's `needs`,
aks_flex_node/steps/workflow.py), each step weighing what it costs alone: its duration in
the --sequential run of the same profile (one step at a time, nothing to contend with; an
artifact step's includes its download delay). The exception is rbac-propagation, which
waits RBAC_DELAY from the role assignment the roles step writes as its last action: it
weighs RBAC_DELAY plus its own --sequential duration (one successful check). Add the
process's fixed cost outside the runner (interpreter start, imports, config load: the
--sequential run's wall time less its runner's duration), and no schedule of these steps
can finish sooner. The floor of the injected delays alone (the same path with every step's
own work free) is printed too.

The light commands are measured as the kubelet and an operator meet them: a wheel of this
tree installed into a scratch venv (made with --system-site-packages, so Debian's azure
modules are there), its `aks-flex-node` console script run as a whole process, median of
CLI_RUNS; the venv's bare interpreter start is printed beside them as the floor.

The real-size profile: a BIG_MB MB kubernetes-node tarball (random bytes, so gzip cannot
shrink it) placed in the emulator's mirror, served at BIG_RATE bytes per second with a strong
ETag and Range support (tests/emulator/artifacts.py). Its floor is reading the bytes at that
rate and throwing them away; the figure is the kubernetes phase alone (`bootstrap --phase
kubernetes` on a fresh node pinned to that version: the download, with the sha256 taken and
the members unpacked beside their destinations as the bytes arrive, then the check of the
sha256 and the renames into place), from the run's own summary; the installed kubelet is
checked against the tarball's before the figure counts. Then the
same on a fresh node whose transfer the mirror cuts at half (the truncate fault, once): the
bytes the mirror sent in all, and the Range header of each GET.

`python3 -m tests.bench converged` measures the converged re-run alone (converged_main).

The agent's memory: `aks-flex-node agent` on the joined node, its VmRSS read from /proc while
it waits between passes (after its first, full pass and after a local one).
"""

import hashlib
import io
import json
import os
import pathlib
import re
import resource
import shutil
import ssl
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

from aks_flex_node.host import download
from tests import bench_wan, digest_fixtures, harness
from tests.emulator_fixtures import scratch_node, start_emulator, stop_fake_units

ARTIFACT_DELAY = 1.5
RBAC_DELAY = 3.0
CLI_RUNS = 15
COLD_TOKEN_CALLS = 5
ARTIFACT_PATHS = r"\.(tar\.gz|tgz|amd64|arm64)$"
PROPAGATION = "rbac-propagation"

# (figure, goal, how the goal reads): the goals of issue 12.
GOALS = {
    "join / lower bound": 1.15,
    "join / --sequential": 0.6,
    "converged re-run (s)": 0.5,
    "version (ms)": 60,
    "token --help (ms)": 80,
    "token, cached (ms)": 80,
    "agent resident (MB)": 35,
    "big artifact / plain read": 1.2,
}

# The real-size profile: a kubernetes-node tarball of BIG_MB MB, incompressible (random
# bytes, as a stripped Go binary nearly is), served at BIG_RATE bytes per second.
BIG_MB = 100
BIG_RATE = 50 * 1024 * 1024
BIG_VERSION = "1.30.9"
BIG_NAME = f"kubernetes-node-v{BIG_VERSION}-linux-amd64.tar.gz"


def timed_json(node, *args):
    """(wall seconds of the whole process, its --json summary)."""
    t0 = time.monotonic()
    proc = node.cli(*args, "--json")
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed:\n{proc.stdout}\n{proc.stderr}")
    return elapsed, json.loads(proc.stdout)


def join_profile(emu, base, *flags):
    """A node joined under the profile's delays: (node, wall, summary)."""
    emu.reset()
    emu.settings(rbac_propagation_delay=RBAC_DELAY)
    emu.faults([{"match": {"server": "artifacts", "path_regex": ARTIFACT_PATHS}, "delay": ARTIFACT_DELAY}])
    node = scratch_node(emu, base)
    wall, summary = timed_json(node, "bootstrap", *flags)
    return node, wall, summary


# ---- the lower bound -----------------------------------------------------------------------


def durations(summary):
    return {p["name"]: p.get("duration_s") or 0.0 for p in summary["phases"]}


def longest_path(weights, until=None):
    """(length, [step names]) of the heaviest path through the bootstrap step graph (ending
    with step `until` when given)."""
    from aks_flex_node.steps.workflow import STEP_CLASSES

    best = {}  # declared order is a topological order: every step comes after its needs
    for cls in STEP_CLASSES:
        before = max((best[d] for d in cls.needs), key=lambda b: b[0], default=(0.0, []))
        best[cls.name] = (before[0] + weights.get(cls.name, 0.0), before[1] + [cls.name])
    if until is not None:
        return best[until]
    return max(best.values(), key=lambda b: b[0])


def injected_delays():
    from aks_flex_node.steps.artifacts import ArtifactStep
    from aks_flex_node.steps.workflow import STEP_CLASSES

    delays = {cls.name: ARTIFACT_DELAY for cls in STEP_CLASSES if issubclass(cls, ArtifactStep)}
    delays[PROPAGATION] = RBAC_DELAY
    return delays


def lower_bound(sequential_wall, sequential):
    alone = durations(sequential)
    weights = dict(alone)
    weights[PROPAGATION] = RBAC_DELAY + alone.get(PROPAGATION, 0.0)
    fixed = max(0.0, sequential_wall - sequential["duration_s"])
    length, path = longest_path(weights)
    return fixed + length, fixed, path, weights


# ---- the light commands, installed from a wheel ------------------------------------------------


def install_wheel(base):
    """A venv (with the system's site packages) holding a wheel of this tree; its bin dir."""
    src = base / "src"
    shutil.copytree(os.path.join(harness.REPO, "aks_flex_node"), src / "aks_flex_node",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "setup.cfg", "README.md"):
        shutil.copy(os.path.join(harness.REPO, name), src / name)
    run = dict(check=True, capture_output=True, env={"PATH": os.environ["PATH"], "HOME": str(base)})
    subprocess.run(["/usr/bin/python3", "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(base / "wheel"), str(src)], **run)
    venv = base / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], **run)
    wheel = next((base / "wheel").glob("aks_flex_node-*.whl"))
    # The system's pip, run by the venv's interpreter, installs into the venv (and compiles).
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], **run)
    where = subprocess.run([str(venv / "bin/python"), "-c", "import aks_flex_node; print(aks_flex_node.__file__)"],
                           cwd=str(base), text=True, **run).stdout.strip()
    if not where.startswith(str(venv)):
        raise SystemExit(f"the venv imports aks_flex_node from {where}, not from the wheel")
    return venv / "bin"


def median_ms(argv, env, runs=CLI_RUNS, before=None):
    """(wall, CPU) milliseconds of `argv` as a whole process, medians of `runs`. The CPU time
    (user + system) tells what the process costs when the machine is busy with other work."""
    walls, cpus = [], []
    for _ in range(runs):
        if before:
            before()
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run(argv, env=env, cwd="/", check=True, capture_output=True)
        walls.append(time.monotonic() - t0)
        now = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def token_env(node):
    """The environment the kubelet runs `aks-flex-node token` in, and the token cache's path."""
    env = {"PATH": node.env["PATH"], "AKS_FLEX_NODE_ROOT": node.root,
           "KUBERNETES_EXEC_INFO": json.dumps({"apiVersion": "client.authentication.k8s.io/v1",
                                               "kind": "ExecCredential", "spec": {"interactive": False}})}
    return env, node.path("/var/lib/aks-flex-node/token-cache.json")


def light_commands(bin_dir, node):
    cli = str(bin_dir / "aks-flex-node")
    env, cache = token_env(node)

    def drop_cache():
        if os.path.exists(cache):
            os.remove(cache)

    figures = {
        "interpreter start (floor)": median_ms([str(bin_dir / "python"), "-c", "pass"], env),
        "version (ms)": median_ms([cli, "version"], env),
        "token --help (ms)": median_ms([cli, "token", "--help"], env),
        "token, cold (HIMDS)": median_ms([cli, "token"], env, COLD_TOKEN_CALLS, before=drop_cache),
    }
    subprocess.run([cli, "token"], env=env, check=True, capture_output=True)  # fills the cache
    figures["token, cached (ms)"] = median_ms([cli, "token"], env)
    return figures


# ---- the agent's memory -------------------------------------------------------------------------


def status_mark(node):
    """What status.json says ended the agent's last interval: a pass (its `finished`) or the
    drift probe that stood in for one (its `checked` and `probes`, agent.py); None before a
    pass has succeeded."""
    try:
        with open(node.path("/var/lib/aks-flex-node/status.json")) as f:
            status = json.load(f)
    except (OSError, ValueError):
        return None
    if status.get("state") != "succeeded":
        return None
    return status.get("finished"), status.get("checked"), status.get("probes")


def vm(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB -> MiB
    return None


def agent_memory(node, passes=3, interval=2.0):
    """VmRSS (MiB) of the agent between passes: after the full pass, after the local pass or
    probe of each interval that follows; and its peak (VmHWM)."""
    argv = [sys.executable, "-m", "aks_flex_node", "agent", "--root", node.root,
            "--interval", str(interval), "--cloud-interval", "3600"]
    proc = subprocess.Popen(argv, env=node.env, cwd=harness.REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    samples, seen = [], status_mark(node)
    try:
        deadline = time.monotonic() + 120
        while len(samples) < passes and time.monotonic() < deadline:
            mark = status_mark(node)
            if mark and mark != seen:
                seen = mark
                time.sleep(interval / 4)  # well inside the wait before the next pass
                samples.append(vm(proc.pid, "VmRSS"))
            time.sleep(0.05)
        peak = vm(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(30)
    if len(samples) < passes:
        raise SystemExit(f"the agent finished {len(samples)} of {passes} passes in 120 s")
    return samples, peak


def resident_after_import(*modules):
    """VmRSS (MiB) of an interpreter that imported `modules`: what an agent would hold
    between passes if its passes ran in a child process and it imported only these."""
    code = (f"import {', '.join(modules)}\n"
            "print(next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1])")
    out = subprocess.run([sys.executable, "-c", code], cwd=harness.REPO, capture_output=True, text=True,
                         check=True).stdout
    return int(out) / 1024


# ---- the report ---------------------------------------------------------------------------------


# ---- the real-size artifact -----------------------------------------------------------------


def big_tarball(path):
    """A kubernetes-node tarball of about BIG_MB MB: a kubelet of random bytes (it is never
    run here) and the small kubectl and kubeadm, gzip level 1 (random bytes do not shrink).
    The sha256 of each member, by name."""
    digests = {}
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, size in (("kubelet", BIG_MB << 20), ("kubectl", 1 << 20), ("kubeadm", 1 << 20)):
            info = tarfile.TarInfo(f"kubernetes/node/bin/{name}")
            info.size, info.mode, info.mtime = size, 0o755, 1700000000
            data = os.urandom(size)
            digests[name] = hashlib.sha256(data).hexdigest()
            tar.addfile(info, io.BytesIO(data))
    return digests


def check_installed(node, digests):
    """A fast install counts only when it is right: each binary is the tarball's."""
    for name, digest in digests.items():
        with open(node.path(f"/usr/local/lib/aks-flex-node/kubernetes/v{BIG_VERSION}/{name}"), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                raise SystemExit(f"the real-size install wrote a {name} that is not the tarball's")


def plain_read(url, ca_bundle):
    """Seconds to read `url`'s body and throw it away: the floor of any download of it."""
    context = ssl.create_default_context(cafile=ca_bundle)
    started = time.monotonic()
    with urllib.request.urlopen(url, context=context, timeout=120) as response:
        while response.read(1 << 20):
            pass
    return time.monotonic() - started


def phase_seconds(summary, name):
    return next(p["duration_s"] for p in summary["phases"] if p["name"] == name)


def big_artifact_profile(emu, base):
    """(plain read s, install s, resumed install s, bytes sent for the resumed one, size, the
    resumed run's Range headers):
    the kubernetes phase of a node pinned to BIG_VERSION (download, hashed and unpacked as it
    arrives, then verify and rename), timed by its own summary; then again on a fresh node
    whose download is cut at half (the truncate fault, once)."""
    emu.reset()
    base.mkdir(parents=True, exist_ok=True)
    tarball = base / BIG_NAME
    digests = big_tarball(tarball)
    size = tarball.stat().st_size
    emu.admin("POST", "artifacts", {"name": BIG_NAME, "path": str(tarball)})
    emu.settings(artifact_rate=BIG_RATE, rbac_propagation_delay=0)
    url = f"{emu.artifacts}/{BIG_NAME}"
    read = plain_read(url, emu.ca_bundle)
    pinned = {"kubernetes_version": BIG_VERSION}
    pins = [digest_fixtures.line("kubernetes", BIG_VERSION, tarball.read_bytes(), "amd64")]  # as an operator's build
    node = scratch_node(emu, base / "whole", pinned, pins)
    _, summary = timed_json(node, "bootstrap", "--phase", "kubernetes")
    install = phase_seconds(summary, "kubernetes")
    check_installed(node, digests)
    before = len(emu.state()["artifact_downloads"])
    cut = size // 2
    emu.faults([{"match": {"server": "artifacts", "path_regex": re.escape(BIG_NAME) + "$", "times": 1},
                 "truncate": cut}])
    node = scratch_node(emu, base / "resumed", pinned, pins)
    _, summary = timed_json(node, "bootstrap", "--phase", "kubernetes")
    resumed = phase_seconds(summary, "kubernetes")
    check_installed(node, digests)
    # What the mirror sent: the cut first answer, then each Range's rest of the file.
    gets = [d for d in emu.state()["artifact_downloads"][before:] if d["file"] == BIG_NAME and d["method"] == "GET"]
    sent = sum(cut if i == 0 else size - int(re.match(r"bytes=(\d+)-", d["range"] or "bytes=0-").group(1))
               for i, d in enumerate(gets))
    emu.clear_faults()
    emu.settings(artifact_rate=0)
    return read, install, resumed, sent, size, [d["range"] for d in gets]


def row(name, value, unit, goal=None, goal_key=None):
    goal = GOALS.get(goal_key) if goal_key else goal
    judged = "" if goal is None else f"goal <= {goal:g}{unit}  {'met' if value <= goal else 'NOT MET'}"
    print(f"  {name:<34} {value:8.2f}{unit:<3} {judged}")


def wan_profile(emu, base, bin_dir):
    """Issue 30's figures on the WAN profile (tests/bench_wan.py says what each is)."""
    emu.reset()
    bench_wan.wan_settings(emu)
    node = scratch_node(emu, base / "wan")
    since = time.time()
    join, _summary = timed_json(node, "bootstrap")
    out = {"join": join, "cold": bench_wan.chain_figures(emu, since)}
    out["reruns"], _summary, runs = converged_reruns(node, emu)
    # The run of the median depth speaks for the chain (a busy CPU can add a link to one run).
    out["converged"] = sorted(runs, key=lambda figures: figures["depth"])[len(runs) // 2]
    out["rerun"] = statistics.median(out["reruns"])
    out["rerun_imports"] = bench_wan.rerun_imports(node)
    since = time.time()
    t0 = time.monotonic()
    proc = node.cli("agent", "--once")
    out["agent_pass"] = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"agent --once failed:\n{proc.stdout}\n{proc.stderr}")
    out["agent_chain"] = bench_wan.chain_figures(emu, since)
    out["agent_cost"] = bench_wan.agent_cost(node)
    env, cache = token_env(node)
    out["token"] = bench_wan.token_round_trips(emu, bin_dir, env, cache)
    out["token_imports"] = bench_wan.token_imports(bin_dir, env)
    node.fake.stop_units()
    emu.reset()
    bench_wan.wan_settings(emu)
    seq_node = scratch_node(emu, base / "wan-sequential")
    since = time.time()
    out["sequential"], out["seq_summary"] = timed_json(seq_node, "bootstrap", "--sequential")
    out["seq_chain"] = bench_wan.chain_figures(emu, since)
    seq_node.fake.stop_units()
    return out


def report_wan(w):
    bound, fixed, path, weights, link = bench_wan.wan_lower_bound(w["sequential"], w["seq_summary"],
                                                                  longest_path, durations)
    bench_wan.report_profile()
    bench_wan.report_join(w["join"], w["sequential"], bound, fixed, path, weights, link, w["cold"], w["seq_chain"])
    bench_wan.report_converged(w["rerun"], w["converged"], w["reruns"], w["rerun_imports"])
    bench_wan.report_agent_pass(w["agent_pass"], w["agent_chain"])
    bench_wan.report_agent_cost(w["agent_cost"])
    bench_wan.report_token(*w["token"], *w["token_imports"])


def main():
    base = pathlib.Path(tempfile.mkdtemp(prefix="aks-flex-node-bench-"))
    emu = start_emulator(base / "emulator")
    try:
        node, join, summary = join_profile(emu, base / "concurrent")
        downloads = [r for r in emu.requests(server="artifacts") if not r["path"].endswith(".sha256")]
        emu.clear_faults()
        reruns, rerun_summary, _runs = converged_reruns(node, emu)
        rerun = statistics.median(reruns)
        agent_rss, agent_peak = agent_memory(node)
        bin_dir = install_wheel(base / "wheel")
        light = light_commands(bin_dir, node)
        node.fake.stop_units()
        _seq_node, sequential, seq_summary = join_profile(emu, base / "sequential", "--sequential")
        _seq_node.fake.stop_units()
        big = big_artifact_profile(emu, base / "big")
        on_wan = wan_profile(emu, base, bin_dir)
    finally:
        for name in ("concurrent", "sequential", "wan", "wan-sequential"):
            stop_fake_units(base / name / "fake-state")
        emu.stop()
    fleet = bench_wan.fleet_goal(str(base))
    bound, fixed, path, weights = lower_bound(sequential, seq_summary)
    floor, floor_path = longest_path(injected_delays())
    starts = sorted(r["time"] for r in downloads)

    print(f"\njoin with {ARTIFACT_DELAY}s per artifact download and {RBAC_DELAY}s RBAC propagation:")
    row("concurrent (default)", join, " s")
    row("--sequential", sequential, " s")
    row("lower bound of this profile", bound, " s")
    print(f"    = {fixed:.2f} s outside the runner + the critical path "
          + " -> ".join(f"{name} {weights.get(name, 0):.2f}" for name in path if weights.get(name, 0) >= 0.005))
    print(f"    (the injected delays alone: {floor:.2f} s, along {' -> '.join(floor_path)})")
    row("join / lower bound", join / bound, "x", goal_key="join / lower bound")
    row("join / --sequential", join / sequential, "x", goal_key="join / --sequential")
    print(f"    {len(starts)} artifact downloads began within {starts[-1] - starts[0]:.2f} s of each other"
          if starts else "    no artifact was downloaded")

    print(f"\nconverged re-run (no download, no ARM write; median of {CONVERGED_RUNS}):")
    row("converged re-run (s)", rerun, " s", goal_key="converged re-run (s)")
    slow = sorted(durations(rerun_summary).items(), key=lambda kv: -kv[1])[:5]
    print("    runs " + ", ".join(f"{w:.2f}" for w in reruns) + f" s; the last: runner {rerun_summary['duration_s']:.2f} s; slowest phases: "
          + ", ".join(f"{name} {d:.2f}" for name, d in slow))

    print(f"\nthe light commands, installed from a wheel into a venv (median of {CLI_RUNS}, whole process;"
          f" wall, and CPU in brackets; load average {os.getloadavg()[0]:.1f}):")
    for name in ("interpreter start (floor)", "version (ms)", "token --help (ms)", "token, cached (ms)",
                 "token, cold (HIMDS)"):
        wall, cpu = light[name]
        label = name.replace(" (ms)", "") + (f", median of {COLD_TOKEN_CALLS}" if "cold" in name else "")
        row(f"{label} [{cpu:.0f} ms CPU]", wall, " ms", goal_key=name if name in GOALS else None)

    read, install, resumed, sent, size, ranges = big
    print(f"\na {size / 1e6:.0f} MB kubernetes-node tarball served at {BIG_RATE / 1e6:.0f} MB/s"
          f" (the kubernetes phase alone, from its summary):")
    row("plain read of the bytes", read, " s")
    row("download + verify + extract", install, " s")
    row("big artifact / plain read", install / read, "x", goal_key="big artifact / plain read")
    row("cut at half, then resumed", resumed, " s")
    print(f"    (with the downloader's {download.BACKOFF:g} s wait before its retry)")
    print(f"    Range resume: fetched {sent / 1e6:.1f} MB for a {size / 1e6:.1f} MB file "
          f"(goal: about the file's size, not more); the GETs' Range headers: {ranges}")

    print("\nthe agent between passes (VmRSS after the full pass, then after local passes):")
    row("agent resident (MB)", max(agent_rss), " MB", goal_key="agent resident (MB)")
    print("    samples " + ", ".join(f"{mb:.1f}" for mb in agent_rss) + f" MB; peak (VmHWM) {agent_peak:.1f} MB")
    # The agent's process holds cli and what cli.main hands `agent` to (commands/handlers.py).
    loop = resident_after_import("aks_flex_node.commands.handlers", "aks_flex_node.agent")
    config = resident_after_import("aks_flex_node.commands.handlers", "aks_flex_node.agent", "aks_flex_node.lifecycle")
    print(f"    with every pass in a child process the agent would hold {loop:.1f} MB (cli and agent"
          f" imported), {config:.1f} MB if it also imported lifecycle (config, operations)")
    report_wan(on_wan)
    bench_wan.report_fleet(*fleet)
    return 0


CONVERGED_RUNS = 5


def converged_reruns(node, emu, runs=CONVERGED_RUNS):
    """`bootstrap` re-run `runs` times on a converged node: (each run's wall seconds, the last
    run's summary, each run's request chain figures). One run alone is as noisy as the machine
    (the first after a join also writes bytecode), so the figures are medians."""
    walls, chains = [], []
    for _ in range(runs):
        since = time.time()
        wall, summary = timed_json(node, "bootstrap")
        walls.append(wall)
        chains.append(bench_wan.chain_figures(emu, since))
    return walls, summary, chains


def converged_main():
    """`python3 -m tests.bench converged`: the converged re-run alone (about a minute, not
    make bench's five): a node joined on loopback, then re-run CONVERGED_RUNS times on
    loopback and CONVERGED_RUNS times with the WAN profile's round trips (wan.RTT_SETTINGS;
    its RBAC and Arc connect waits are the join's, not a converged run's); the median wall
    time of the whole process, and the last run's request count, chain depth, chain and
    slowest phases. As noisy as the machine it runs on: say so beside any figure."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="aks-flex-node-bench-converged-"))
    emu = start_emulator(base / "emulator")
    try:
        node = scratch_node(emu, base / "converged")
        timed_json(node, "bootstrap")
        rtts = {setting: bench_wan.wan.BENCH[setting] for setting in bench_wan.wan.RTT_SETTINGS.values()}
        for label, settings in (("loopback", dict.fromkeys(rtts, 0.0)), ("WAN profile's round trips", rtts)):
            emu.settings(**settings)
            walls, summary, chains = converged_reruns(node, emu)
            figures = chains[-1]
            print(f"\nconverged re-run, {label} (load average {os.getloadavg()[0]:.1f}):")
            row(f"median of {CONVERGED_RUNS} (whole process)", statistics.median(walls), " s",
                goal_key="converged re-run (s)")
            print("    runs " + ", ".join(f"{w:.2f}" for w in walls) + f" s; runner {summary['duration_s']:.2f} s; "
                  "slowest phases: " + ", ".join(f"{n} {d:.2f}" for n, d in sorted(
                      durations(summary).items(), key=lambda kv: -kv[1])[:4]))
            print(bench_wan.chain_line(figures))
            bench_wan.print_chain(figures)
        start, imported, count = bench_wan.rerun_imports(node)
        print(f"\na fresh interpreter: {start:.2f} s to start; {imported:.2f} s to start and import the {count} "
              "modules a converged re-run has loaded when it ends (load average "
              f"{os.getloadavg()[0]:.1f})")
    finally:
        stop_fake_units(base / "converged" / "fake-state")
        emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(converged_main() if sys.argv[1:] == ["converged"] else main())
