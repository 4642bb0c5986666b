"""`make demo-library`: join a scratch node to the emulated AKS cluster and show what happened.

Everything runs on this machine: the emulator stands in for Azure (ARM, Entra ID, HIMDS, the
cluster's API server and the release artifacts) on loopback, the node is a directory
(./build/demo-library/node) and the host commands are stand-ins (tests/fakes/bin). Nothing outside
./build/demo-library is changed. It ends with `kubectl get nodes -o wide` (this machine's kubectl)
against the emulated cluster, with the node's own kubeconfig: its exec plugin is our `token`.
"""

import os
import shutil
import subprocess
import sys

from tests import harness
from tests.emulator_fixtures import FakeHost, start_emulator, stop_fake_units

DEMO_DIR = os.path.join(harness.REPO, "build", "demo-library")


def banner(text):
    print(f"\n\033[1m== {text}\033[0m" if sys.stdout.isatty() else f"\n== {text}", flush=True)


def kubectl_get_nodes(kubeconfig, shown, env, home):
    """`kubectl get nodes -o wide` with `kubeconfig` (shown as `shown`), its table on this terminal
    as kubectl prints it. kubectl's exit code; None when this machine has no kubectl (said so).
    Shared with `make demo` (tests/e2e/demo.py)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("no kubectl on this machine's PATH: skipped (https://kubernetes.io/docs/tasks/tools/)", flush=True)
        return None
    print(f"$ KUBECONFIG={shown} kubectl get nodes -o wide", flush=True)
    # HOME: kubectl keeps its discovery cache in ~/.kube/cache; `home` keeps it in the demo's directory.
    return subprocess.run([kubectl, "get", "nodes", "-o", "wide"], env=dict(env, KUBECONFIG=kubeconfig, HOME=home),
                          timeout=120).returncode


def run(node, *args):
    shown = " ".join(["aks-flex-node", *args, "--root", "build/demo-library/node"])
    print(f"$ {shown}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "aks_flex_node", *args, "--root", node.root],
                          env=node.env, cwd=harness.REPO)
    return proc.returncode


def main():
    if os.path.exists(DEMO_DIR):
        shutil.rmtree(DEMO_DIR)
    os.makedirs(DEMO_DIR)
    banner("starting the Azure emulator (ARM, Entra ID, HIMDS, API server, artifacts on loopback)")
    emu = start_emulator(os.path.join(DEMO_DIR, "emulator"))
    print(f"ARM {emu.arm}  HIMDS {emu.himds}  API server {emu.apiserver}")
    fake = FakeHost(emu, __import__("pathlib").Path(DEMO_DIR) / "host")
    status = 1
    try:
        node_root = os.path.join(DEMO_DIR, "node")
        os.symlink(fake.root, node_root)
        harness.prepare_root(node_root)
        keys = os.path.join(node_root, "var/opt/azcmagent/tokens")
        os.makedirs(os.path.dirname(keys), exist_ok=True)
        os.symlink(emu.himds_key_dir, keys)
        wrapper = harness.exec_plugin_wrapper(DEMO_DIR)
        harness.write_config(node_root, emu, wrapper)
        node = harness.Node(node_root, str(fake.state_dir), emu, fake.env)

        banner("the configuration (secrets live in their own 0600 file, never inline)")
        run(node, "config", "show")
        banner("preflight")
        run(node, "preflight")
        banner("the plan")
        run(node, "bootstrap", "--dry-run")
        banner("bootstrap: identity, install and credentials branches run at once")
        status = run(node, "bootstrap")
        banner("status")
        run(node, "status")
        banner("a second bootstrap converges: nothing to change, nothing downloaded")
        run(node, "bootstrap")
        state = emu.state()
        banner("what Azure saw")
        for machine in state["machines"]:
            print(f"Arc machine {machine['id']} (identity {machine['principal_id']})")
        for a in state["role_assignments"]:
            if any(a["principal_id"] == m["principal_id"] for m in state["machines"]):
                print(f"role assignment {a['role_guid']} at {a['scope']}")
        for cluster, nodes in state["nodes"].items():
            for n in nodes:
                ready = [c["status"] for c in n["status"].get("conditions", []) if c["type"] == "Ready"]
                print(f"cluster {cluster}: node {n['metadata']['name']} Ready={ready[0] if ready else '?'}")
        banner("look around")
        print("  cat build/demo-library/node/var/lib/aks-flex-node/status.json   # the status contract")
        print("  cat build/demo-library/node/var/lib/kubelet/kubeconfig          # exec plugin, no secret")
        print("  cat build/demo-library/node/etc/systemd/system/kubelet.service.d/10-aks-flex-node.conf")
        print("  cat build/demo-library/host/fake-state/calls.jsonl              # every host command run")
        print("  PYTHONPATH=. python3 -m aks_flex_node status --root build/demo-library/node")
        print("clean up: rm -rf build/demo-library (the emulator and the stand-in kubelet are already stopped)")
        banner("the cluster, through kubectl and the node's own kubeconfig (exec plugin: aks-flex-node token)")
        shown = kubectl_get_nodes(node.path("/var/lib/kubelet/kubeconfig"),
                                  "build/demo-library/node/var/lib/kubelet/kubeconfig", node.env, DEMO_DIR)
        if shown not in (None, 0):
            print(f"demo-library: kubectl get nodes exited {shown}", file=sys.stderr)
            status = status or shown
    finally:
        stop_fake_units(fake.state_dir)
        emu.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
