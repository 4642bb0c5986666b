"""`aks-flex-node token` against the emulator's HIMDS (the Arc identity of a connected machine)."""

import datetime
import io
import json
import stat
import threading

import pytest

from aks_flex_node import token as token_cmd
from tests.emulator import constants as C
from tests.emulator_fixtures import start_emulator
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)
from tests.azure_fixtures import put_machine


def run_token(root, exec_info=None):
    out, err = io.StringIO(), io.StringIO()
    env = {"AKS_FLEX_NODE_ROOT": str(root)}
    if exec_info:
        env["KUBERNETES_EXEC_INFO"] = json.dumps(exec_info)
    code = token_cmd.main([], env, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def write_config(root, emulator, key_dir):
    conf = root / "etc/aks-flex-node/aks-flex-node.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f"[arc]\nhimds_endpoint = {emulator.himds}\nhimds_key_dir = {key_dir}\n")


@pytest.fixture
def connected(fresh_emulator, no_proxy):
    machine = put_machine(fresh_emulator, "m1")
    fresh_emulator.bind_himds(machine["id"])
    return machine


def himds_counts(emulator):
    himds = emulator.state()["himds"]
    return himds["challenges"], himds["tokens_issued"]


def test_token_then_cache_reuse(fresh_emulator, connected, tmp_path):
    root = tmp_path / "root"
    write_config(root, fresh_emulator, fresh_emulator.himds_key_dir)  # a key dir outside the root
    before = himds_counts(fresh_emulator)
    code, out, err = run_token(root, {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"})
    assert code == 0, err
    cred = json.loads(out)
    assert cred["apiVersion"] == "client.authentication.k8s.io/v1"
    assert cred["status"]["token"].startswith(C.TOKEN_PREFIX)
    after_first = himds_counts(fresh_emulator)
    assert after_first == (before[0] + 1, before[1] + 1)
    record = [t for t in fresh_emulator.state()["requests"] if t["server"] == "himds"]
    assert len(record) == 2

    code, out2, _ = run_token(root)  # no KUBERNETES_EXEC_INFO: v1beta1
    assert code == 0
    assert json.loads(out2)["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert json.loads(out2)["status"]["token"] == cred["status"]["token"]
    assert himds_counts(fresh_emulator) == after_first  # served from the cache

    cache = root / "var/lib/aks-flex-node/token-cache.json"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    expires_on = json.loads(cache.read_text())["expires_on"]
    shown = datetime.datetime.strptime(cred["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    assert shown.replace(tzinfo=datetime.timezone.utc).timestamp() == expires_on - 300


def test_not_connected_is_an_error_without_output(fresh_emulator, tmp_path, no_proxy):
    root = tmp_path / "root"
    write_config(root, fresh_emulator, fresh_emulator.himds_key_dir)
    code, out, err = run_token(root)
    assert code == 1 and out == ""
    assert "HIMDS" in err and "answered 404" in err


def test_default_key_dir_under_the_root(tmp_path, no_proxy):
    """An emulator writing its keys where the agent does (/var/opt/azcmagent/tokens) under
    the node's root, and a config that keeps the default himds_key_dir."""
    root = tmp_path / "root"
    key_dir = root / "var/opt/azcmagent/tokens"
    emulator = start_emulator(tmp_path / "emu", extra_args=["--himds-key-dir", str(key_dir)])
    try:
        machine = put_machine(emulator, "m1")
        emulator.bind_himds(machine["id"])
        conf = root / "etc/aks-flex-node/aks-flex-node.conf"
        conf.parent.mkdir(parents=True)
        conf.write_text(f"[arc]\nhimds_endpoint = {emulator.himds}\n")
        code, out, err = run_token(root)
        assert code == 0, err
        assert json.loads(out)["status"]["token"].startswith(C.TOKEN_PREFIX)
        assert list(key_dir.iterdir()) == []  # the single-use key was consumed and removed
    finally:
        emulator.stop()


def test_concurrent_cold_calls_mint_one_token(fresh_emulator, connected, tmp_path):
    """Issue 26: 50 cold calls at once made 78 HIMDS requests. Twenty calls started together
    by a barrier against an empty cache: one mints, the others wait for its cache and print
    the same credential."""
    root = tmp_path / "root"
    write_config(root, fresh_emulator, fresh_emulator.himds_key_dir)
    before = himds_counts(fresh_emulator)
    calls = 20
    barrier = threading.Barrier(calls)
    results = [None] * calls

    def call(i):
        barrier.wait()
        results[i] = run_token(root)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [code for code, _, _ in results] == [0] * calls, [err for _, _, err in results if err]
    assert len({out for _, out, _ in results}) == 1
    cred = json.loads(results[0][1])
    assert cred["kind"] == "ExecCredential" and cred["status"]["token"].startswith(C.TOKEN_PREFIX)
    assert himds_counts(fresh_emulator) == (before[0] + 1, before[1] + 1)  # one challenge, one token
    cache = root / "var/lib/aks-flex-node"
    assert stat.S_IMODE((cache / "token-cache.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((cache / "token-cache.json.lock").stat().st_mode) == 0o600


@pytest.mark.parametrize("value", ["1e17", "inf"])
def test_a_hostile_expiry_from_himds_is_refused_and_does_not_poison_the_cache(fresh_emulator, connected, tmp_path,
                                                                              value):
    """Issue 26 defect 6: HIMDS answering `expires_on: "1e17"` was cached, then every call
    died in time.gmtime. Now the answer is refused naming HIMDS, the field and the value,
    nothing is cached, and the next good answer is used."""
    root = tmp_path / "root"
    write_config(root, fresh_emulator, fresh_emulator.himds_key_dir)
    # Every HIMDS answer gets the field (the 401 challenge's error body too, where it is ignored).
    fresh_emulator.faults([{"match": {"server": "himds"}, "set": {"expires_on": value}}])
    code, out, err = run_token(root)
    assert code == 1 and out == ""
    assert "Traceback" not in err and "HIMDS" in err and f"expires_on = {value!r}" in err
    assert not (root / "var/lib/aks-flex-node/token-cache.json").exists()

    fresh_emulator.clear_faults()
    for _ in range(2):  # minted, then from the cache
        code, out, err = run_token(root)
        assert code == 0, err
        assert json.loads(out)["status"]["token"].startswith(C.TOKEN_PREFIX)
