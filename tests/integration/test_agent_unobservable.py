"""Issue 9, defect 9: the agent repaired, once a minute for good, what the host cannot show.
A setting a step cannot observe is said once (unknown, with the reason) and never repaired;
a repair that does not stick fails the very next pass instead of repeating in silence."""

import json
import os
import re
import signal
import subprocess
import sys
import time

from tests.harness import REPO

PENDING = "/var/lib/aks-flex-node/join-pending"


def start_agent(node, *args):
    os.makedirs(node.path("/var/lib/aks-flex-node"), exist_ok=True)
    open(node.path(PENDING), "w").close()  # what the postinst leaves for the agent
    # A real pass every interval (no drift probe): what these tests count is what each pass says.
    return subprocess.Popen(
        [sys.executable, "-m", "aks_flex_node", "agent", "--root", node.root, "--interval", "1",
         "--probe-max-age", "0", *args],
        env=node.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(agent):
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
    out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    return err


def status(node):
    try:
        return json.loads(node.read("/var/lib/aks-flex-node/status.json"))
    except (OSError, ValueError):
        return {}


def watch(node, agent, done, timeout):
    """Poll status.json until done(status, seen) is true; seen holds every record read."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and agent.poll() is None:
        current = status(node)
        if current and current not in seen:
            seen.append(current)
        if done(current, seen):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting; last status: {status(node)}\n{stop(agent)}")


def test_no_proc_modules_is_said_once_and_never_repaired(node):
    os.remove(node.path("/proc/modules"))  # a booted container without it
    agent = start_agent(node)
    try:
        def three_local_passes(current, seen):
            starts = {s["started"] for s in seen
                      if s.get("pass") == "local" and s.get("state") == "succeeded"}
            return len(starts) >= 3
        seen = watch(node, agent, three_local_passes, 120)
    finally:
        err = stop(agent)
    assert all(s.get("state") in ("running", "succeeded", "pending") for s in seen), seen
    for module in ("overlay", "br_netfilter"):
        said = re.findall(rf"WARNING .*system: cannot tell kernel module {module}: "
                          rf"/proc/modules is absent \(a container or an image build\), "
                          rf"and so is /sys/module/{module}; leaving it alone", err)
        assert len(said) == 1, err
    assert "load kernel module" not in err, err
    assert "repaired" not in err, err
    [system] = [p for p in status(node)["phases"] if p["name"] == "system"]
    assert system["status"] == "unchanged" and system["changes"] == []
    assert {u["what"] for u in system["unknown"]} >= {"kernel module overlay", "kernel module br_netfilter"}
    assert "cannot tell: kernel module overlay (/proc/modules is absent" in system["message"]
    assert node.fake.calls("modprobe") == []


def test_a_module_that_never_shows_up_fails_the_next_pass(node):
    open(os.path.join(node.state_dir, "noop-modprobe"), "w").close()  # exits 0, loads nothing
    agent = start_agent(node)
    try:
        def stuck(current, seen):
            return "repair did not stick" in ((current.get("error") or {}).get("message") or "")
        seen = watch(node, agent, stuck, 120)
    finally:
        err = stop(agent)
    finished = [s for s in seen if s.get("state") != "running"]
    # The join (first pass) loaded it as far as modprobe said; the second pass failed.
    assert [s["state"] for s in finished][-2:] == ["succeeded", "failed"], finished
    failed = finished[-1]
    assert failed["pass"] == "local" and failed["exit_code"] == 1
    assert failed["error"]["error"] == "repair-did-not-stick"
    assert ("repair did not stick: load kernel module overlay (it is not loaded); "
            "load kernel module br_netfilter (it is not loaded): applied on the previous pass "
            "and needed again now") == failed["error"]["message"]
    [system] = [p for p in failed["phases"] if p["name"] == "system"]
    assert system["status"] == "failed"
    before = err[:err.index("repair did not stick")]
    loads = re.findall(r"INFO .*system: load kernel module br_netfilter \(it is not loaded\)", before)
    assert len(loads) == 1, err
    assert "repaired system" not in before, err  # the first pass was the join
    assert re.search(r"WARNING .*bootstrap pass failed \(repair did not stick: ", err), err
