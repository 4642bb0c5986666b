"""`make demo`, the README's first command: `up` leaves a joined node and the emulator
running, `shell` and `azure` look at them, `down` leaves nothing behind."""

import shutil
import subprocess
import sys

import pytest

from aks_flex_node.steps.workflow import PHASE_NAMES
from tests.e2e import container as ct
from tests.e2e.conftest import HIMDS_PORT
from tests.emulator import constants as C

pytestmark = pytest.mark.e2e


def demo(command, *args, directory, timeout=600):
    return subprocess.run([sys.executable, "-m", "tests.e2e.demo", command, "--dir", str(directory), *args],
                          cwd=str(ct.REPO), env=ct.system_env(PYTHONPATH=str(ct.REPO)), capture_output=True,
                          text=True, timeout=timeout)


def test_demo_joins_a_node_leaves_it_running_and_cleans_up(release, base, repo, tmp_path):
    directory = tmp_path / "demo-root"
    try:
        up = demo("up", "--repo", str(repo.path), "--release", release, directory=directory)
        assert up.returncode == 0, f"{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        assert f"a Debian {ct.RELEASES[release]} ({release}) machine, booted" in up.stdout
        # The node runs that release: its os-release, read from inside.
        shown = demo("shell", "/bin/sh", "-c", ". /etc/os-release; echo $VERSION_CODENAME", directory=directory)
        assert shown.stdout.split() == [release], shown.stderr
        # The story it tells: the install from the repository, the node's units, Azure's view.
        assert "Get:1 file:/srv/aks-flex-node-repo stable/main" in up.stdout
        # The Arc agent came first, so the postinst joined, phase by phase (apt's stderr).
        last = f"aks-flex-node: [{len(PHASE_NAMES)}/{len(PHASE_NAMES)}]"
        assert last in up.stderr and "aks-flex-node: joined" in up.stderr, up.stderr[-3000:]
        for unit in ("himdsd", "containerd", "kubelet", "aks-flex-node-agent"):
            assert f"  {unit:<20} enabled   active" in up.stdout
        assert "state: succeeded (bootstrap)" in up.stdout
        assert "node          demo-node-1 in aks-one: Ready" in up.stdout
        assert "make demo-clean" in up.stdout
        # It ends with the operator's view: kubectl's own table (when this machine has kubectl).
        if shutil.which("kubectl"):
            table = up.stdout.split(" kubectl get nodes -o wide\n")[-1].splitlines()
            assert table[0].split()[:2] == ["NAME", "STATUS"], up.stdout[-2000:]
            assert table[1].split()[:2] == ["demo-node-1", "Ready"], up.stdout[-2000:]
            assert (directory / "operator.kubeconfig").stat().st_mode & 0o777 == 0o600
        # The preseed is shown without its secret.
        assert "aks-flex-node/sp_client_secret password ********" in up.stdout
        assert C.SP_CLIENT_SECRET not in up.stdout + up.stderr

        # Still running once `up` has returned: the node keeps heartbeating to the emulator.
        shell = demo("shell", "aks-flex-node", "status", "--json", directory=directory)
        assert shell.returncode == 0 and '"state": "succeeded"' in shell.stdout, shell.stderr
        azure = demo("azure", directory=directory)
        assert azure.returncode == 0 and "machines/demo-node-1" in azure.stdout, azure.stderr
        assert ct.port_in_use(HIMDS_PORT)
    finally:
        down = demo("down", directory=directory)
    assert down.returncode == 0, down.stderr
    assert "removed" in down.stdout
    assert not directory.exists()
    assert ct.mounts_under(tmp_path) == []
    assert not ct.port_in_use(HIMDS_PORT)
    again = demo("down", directory=directory)
    assert again.returncode == 0 and "no demo to clean up" in again.stdout
