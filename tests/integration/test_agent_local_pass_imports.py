"""What the agent's local pass costs in imports: each pass is a forked child that imports what
it needs and exits (agent.py), so a module it loads is paid again every minute of the node's
life (issue 30: the agent's CPU per hour). A local pass asks Azure nothing and must not load
the Azure SDK or msal; only a full pass does. Nor python3-cryptography, where it can do
without: the credentials' expiries are read with the standard library (x509_validity.py). An
agent-pool node's local pass still checks that the cluster CA signed the kubelet's client
certificate (steps/kubelet_auth.py client_cert_stale), a signature only cryptography verifies.

Counted from the real agent run under `python -X importtime`: the flag is the interpreter's,
so each forked child prints the modules it imports itself, one line each. A module every pass
imports (operations) counts the passes; the SDK's lines must come from the first, full pass
alone."""

import signal
import subprocess
import sys

import pytest

from tests.agent_fixtures import SHOW_FORK_WARNING, status, wait_for_passes
from tests.harness import REPO
from tests.waiting import wait_for

PASS_MARK = "aks_flex_node.operations"  # imported once by every pass's child
# Top-level packages a local pass must not load, by join mode (the module doc says why), and
# preflight's checks: a local pass skips that phase (operations.py).
PREFLIGHT = "aks_flex_node.steps.preflight.checks"
NOT_LOCAL = {"arc": ("azure", "msal", "cryptography", PREFLIGHT), "agent-pool": ("azure", "msal", PREFLIGHT)}


def _imported(stderr):
    """{module: how many processes imported it} from -X importtime's lines."""
    counts = {}
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.parametrize("mode", sorted(NOT_LOCAL))
def test_local_passes_load_no_azure_sdk(request, tmp_path, mode):
    node = request.getfixturevalue("node" if mode == "arc" else "pool_node")
    node.emu.settings(rbac_propagation_delay=0)
    proc, _summary = node.cli_json("bootstrap")
    assert proc.returncode == 0, proc.stderr
    # A file, not a pipe: importtime writes more than a pipe holds, and a full pipe would
    # block the agent until the test read it.
    log = tmp_path / "agent-stderr"
    with open(log, "w") as stderr:
        agent = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "aks_flex_node", "agent", "--root", node.root,
             # --probe-max-age 0: real local passes, whose imports are counted (no drift probe)
             "--interval", "0.2", "--cloud-interval", "3600", "--probe-max-age", "0"],
            env=dict(node.env, PYTHONWARNINGS=SHOW_FORK_WARNING), cwd=REPO,
            stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        assert wait_for(lambda: status(node).get("pass") == "local", 120), status(node)
        assert wait_for_passes(node, 3)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
    err = log.read_text()
    assert agent.returncode == 0, err[-3000:]
    counts = _imported(err)
    passes = counts.get(PASS_MARK, 0)
    assert passes >= 4, f"{passes} passes seen"  # the full pass and at least three local ones
    assert status(node)["state"] == "succeeded"
    # The first pass is full and reads Azure: it alone loads these.
    loaded_by_more = {name: n for name, n in counts.items() if name in NOT_LOCAL[mode] and n > 1}
    assert loaded_by_more == {}, f"loaded by more than the full pass (of {passes} passes)"
