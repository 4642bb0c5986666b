"""`make bench`: how long a join takes, concurrent against --sequential, and what the
kubelet's credential plugin costs per call.

Against the emulator, with network-like latency injected where a real join waits: each
artifact download is delayed (ARTIFACT_DELAY s) and role assignments take RBAC_DELAY s to
reach the API server. Speed goals are judged here, never by timing assertions in tests.
"""

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from tests import harness
from tests.emulator_fixtures import FakeHost, start_emulator, stop_fake_units

ARTIFACT_DELAY = 1.5
RBAC_DELAY = 3.0
TOKEN_CALLS = 20


def make_node(emu, base):
    fake = FakeHost(emu, base)
    root = str(fake.root)
    harness.prepare_root(root)
    keys = os.path.join(root, "var/opt/azcmagent/tokens")
    os.makedirs(os.path.dirname(keys), exist_ok=True)
    os.symlink(emu.himds_key_dir, keys)
    harness.write_config(root, emu, harness.exec_plugin_wrapper(str(base)))
    node = harness.Node(root, str(fake.state_dir), emu, fake.env)
    node.fake = fake
    return node


def timed(node, *args):
    t0 = time.monotonic()
    proc = node.cli(*args)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def bootstrap_time(emu, base, *flags):
    emu.reset()
    emu.settings(rbac_propagation_delay=RBAC_DELAY)
    emu.faults([{"match": {"server": "artifacts", "path_regex": r"\.(tar\.gz|tgz|amd64|arm64)$"},
                 "delay": ARTIFACT_DELAY}])
    node = make_node(emu, base)
    try:
        first = timed(node, "bootstrap", *flags)
        again = timed(node, "bootstrap", *flags)
        return first, again, node
    finally:
        node.fake.stop_units()


def token_latency(node):
    env = dict(node.env, AKS_FLEX_NODE_ROOT=node.root,
               KUBERNETES_EXEC_INFO=json.dumps({"apiVersion": "client.authentication.k8s.io/v1",
                                                "kind": "ExecCredential", "spec": {"interactive": False}}))
    cache = node.path("/var/lib/aks-flex-node/token-cache.json")
    samples = {"cold (HIMDS challenge)": [], "cached": []}
    for i in range(TOKEN_CALLS):
        if os.path.exists(cache) and i % 2 == 0:
            os.remove(cache)
        kind = "cold (HIMDS challenge)" if not os.path.exists(cache) else "cached"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "aks_flex_node", "token"], env=env, cwd=harness.REPO,
                       check=True, capture_output=True)
        samples[kind].append(time.monotonic() - t0)
    return samples


def main():
    base = pathlib.Path(tempfile.mkdtemp(prefix="aks-flex-node-bench-"))
    emu = start_emulator(base / "emulator")
    try:
        concurrent, rerun, node = bootstrap_time(emu, base / "concurrent")
        sequential, _, _ = bootstrap_time(emu, base / "sequential", "--sequential")
        emu.clear_faults()
        tokens = token_latency(node)
    finally:
        stop_fake_units(base / "concurrent" / "fake-state")
        stop_fake_units(base / "sequential" / "fake-state")
        emu.stop()
    print(f"\njoin with {ARTIFACT_DELAY}s per artifact download and {RBAC_DELAY}s RBAC propagation:")
    print(f"  concurrent (default)  {concurrent:6.2f} s")
    print(f"  --sequential          {sequential:6.2f} s   ({sequential / concurrent:.1f}x)")
    print(f"  converged re-run      {rerun:6.2f} s   (no download, no ARM write)")
    print(f"\n`aks-flex-node token` per call ({TOKEN_CALLS} calls, median):")
    for kind, values in tokens.items():
        if values:
            print(f"  {kind:<24} {statistics.median(values) * 1000:6.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
