"""The stand-in kubelet, started by the fake systemctl, authenticating through an exec plugin
that does the HIMDS challenge, and registering its Node with the apiserver stand-in."""

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time

import pytest
import yaml

from tests.emulator import constants as C

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"

# An exec credential plugin as client-go expects one (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins), getting its token
# from HIMDS with the challenge. TEST_* knobs (from the kubeconfig's exec env) make it misbehave.
PLUGIN = textwrap.dedent(f"""\
    #!{sys.executable}
    import datetime, json, os, urllib.error, urllib.request
    info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
    runs = os.path.join(os.environ["FAKE_STATE_DIR"], "plugin-runs")
    with open(runs, "a") as f:
        f.write(json.dumps(info) + "\\n")
    url = os.environ["TEST_HIMDS"] + "?api-version=2020-06-01&resource={C.AKS_SERVER_APP_ID}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
    try:
        opener.open(urllib.request.Request(url, headers={{"Metadata": "true"}}))
        raise SystemExit("HIMDS did not challenge")
    except urllib.error.HTTPError as e:
        key_file = e.headers["WWW-Authenticate"].split("=", 1)[1]
    key = open(key_file).read()
    answer = json.load(opener.open(urllib.request.Request(
        url, headers={{"Metadata": "true", "Authorization": "Basic " + key}})))
    token = answer["access_token"]
    if os.environ.get("TEST_FIRST_TOKEN_BAD") and len(open(runs).readlines()) == 1:
        token = "{C.TOKEN_PREFIX}not-issued"
    lifetime = int(os.environ.get("TEST_EXPIRES_IN", "3000"))
    expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lifetime)
    print(json.dumps({{"apiVersion": os.environ.get("TEST_RETURN_API_VERSION", info["apiVersion"]),
                      "kind": "ExecCredential",
                      "status": {{"token": token, "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}}}))
""")

UNIT = textwrap.dedent("""\
    [Unit]
    Description=Kubelet
    [Service]
    EnvironmentFile=/etc/default/kubelet
    ExecStart=/usr/local/bin/kubelet --kubeconfig=/var/lib/kubelet/kubeconfig \\
        --node-labels="${KUBELET_NODE_LABELS}" $KUBELET_FLAGS
    [Install]
    WantedBy=multi-user.target
""")


def _write(host, node_path, text, mode=0o644):
    path = host.path(node_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def setup_node(host, exec_env=None, exec_api_version=V1, interactive_mode="Never", role=C.ROLE_AKS_FLEX_NODE_AGENT):
    """A machine connected with the fake azcmagent, its role assigned, the kubelet installed
    from the emulator's artifact, its kubeconfig, defaults file and unit written."""
    emu = host.emulator
    emu.settings(rbac_propagation_delay=0)
    _, _, machine = emu.arm_call(
        "PUT", f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}/providers/Microsoft.HybridCompute/"
               "machines/flex-1", "2024-07-10", {"location": C.LOCATION})
    emu.bind_himds(machine["id"])
    if role:
        status, _, _ = emu.arm_call(
            "PUT", f"{C.CLUSTER_ID}/providers/Microsoft.Authorization/roleAssignments/"
                   "7f1c62a4-2b4b-4c42-9a53-bd2f2c9d3e11", "2022-04-01",
            {"properties": {"roleDefinitionId": f"/providers/Microsoft.Authorization/roleDefinitions/{role}",
                            "principalId": machine["identity"]["principalId"], "principalType": "ServicePrincipal"}})
        assert status == 201

    _, _, archive = emu.http("GET", f"{emu.artifacts}/kubernetes-node-v{C.K8S_VERSION}-linux-amd64.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        kubelet = tar.extractfile("kubernetes/node/bin/kubelet").read()
    _write(host, "/usr/local/bin/kubelet", kubelet.decode(), 0o755)
    _write(host, "/usr/local/bin/token-plugin", PLUGIN, 0o755)

    with open(emu.ca_bundle, "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    exec_spec = {"apiVersion": exec_api_version, "command": "/usr/local/bin/token-plugin", "args": ["token"],
                 "env": [{"name": "TEST_HIMDS", "value": emu.himds}] +
                        [{"name": k, "value": v} for k, v in (exec_env or {}).items()],
                 "provideClusterInfo": False}
    if interactive_mode:
        exec_spec["interactiveMode"] = interactive_mode
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "flex",
                  "clusters": [{"name": C.CLUSTER_NAME, "cluster": {"server": emu.apiserver,
                                                                    "certificate-authority-data": ca}}],
                  "contexts": [{"name": "flex", "context": {"cluster": C.CLUSTER_NAME, "user": "flex-node"}}],
                  "users": [{"name": "flex-node", "user": {"exec": exec_spec}}]}
    _write(host, "/var/lib/kubelet/kubeconfig", json.dumps(kubeconfig), 0o600)
    _write(host, "/etc/default/kubelet",
           'KUBELET_NODE_LABELS="kubernetes.azure.com/managed=false,team=edge"\n'
           'KUBELET_FLAGS="--v=2 --hostname-override=flex-1 --register-with-taints=flex=true:NoSchedule"\n')
    _write(host, "/etc/systemd/system/kubelet.service", UNIT)
    return machine


def systemctl(host, *argv):
    env = {**host.env, "FAKE_KUBELET_INTERVAL": "0.2"}
    return subprocess.run(["systemctl", *argv], env=env, capture_output=True, text=True, timeout=30)


def wait_for(predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


def nodes(emu):
    return {n["metadata"]["name"]: n for n in emu.state()["nodes"][C.CLUSTER_NAME]}


def ready(emu, name="flex-1"):
    node = nodes(emu).get(name)
    conditions = {c["type"]: c["status"] for c in (node or {}).get("status", {}).get("conditions", [])}
    return node if conditions.get("Ready") == "True" else None


def kubelet_log(host):
    path = host.state_dir / "kubelet.log"
    return path.read_text() if path.exists() else ""


def test_kubelet_registers_its_node_and_posts_ready_until_stopped(fake_host):
    machine = setup_node(fake_host)
    assert systemctl(fake_host, "start", "kubelet").returncode == 0
    node = wait_for(lambda: ready(fake_host.emulator))
    assert node, kubelet_log(fake_host)
    labels = node["metadata"]["labels"]
    assert labels["team"] == "edge" and labels["kubernetes.azure.com/managed"] == "false"
    assert labels["kubernetes.io/hostname"] == "flex-1"
    assert node["spec"]["taints"] == [{"key": "flex", "value": "true", "effect": "NoSchedule"}]
    assert node["_registeredBy"] == machine["identity"]["principalId"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == f"v{C.K8S_VERSION}"
    # client-go's ExecCredential input, non-interactive.
    info = json.loads((fake_host.state_dir / "plugin-runs").read_text().splitlines()[0])
    assert info == {"apiVersion": V1, "kind": "ExecCredential", "spec": {"interactive": False}}

    beats = wait_for(lambda: (json.loads((fake_host.state_dir / "kubelet-status.json").read_text())["heartbeats"]
                              if (fake_host.state_dir / "kubelet-status.json").exists() else 0) >= 3 or None)
    assert beats, kubelet_log(fake_host)
    pid = fake_host.fake_state("systemd.json")["units"]["kubelet.service"]["pid"]
    assert systemctl(fake_host, "stop", "kubelet").returncode == 0
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
    for marker in C.SECRET_MARKERS:
        assert marker not in kubelet_log(fake_host)


def test_kubelet_waits_for_rbac_then_registers(fake_host):
    setup_node(fake_host)
    # Long enough that the kubelet's first attempt falls inside it, even under xdist's load.
    fake_host.emulator.settings(rbac_propagation_delay=3.0)
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: ready(fake_host.emulator)), kubelet_log(fake_host)
    assert "HTTP 403" in kubelet_log(fake_host)


def test_plugin_returning_another_api_version_is_an_error(fake_host):
    setup_node(fake_host, exec_env={"TEST_RETURN_API_VERSION": V1BETA1})
    systemctl(fake_host, "start", "kubelet")
    expected = f"exec plugin is configured to use API version {V1}, plugin returned version {V1BETA1}"
    assert wait_for(lambda: expected in kubelet_log(fake_host)), kubelet_log(fake_host)
    assert nodes(fake_host.emulator) == {}


def test_v1_exec_without_interactive_mode_is_an_error(fake_host):
    setup_node(fake_host, interactive_mode=None)
    systemctl(fake_host, "start", "kubelet")
    expected = "interactiveMode must be specified for flex-node to use exec authentication plugin"
    assert wait_for(lambda: expected in kubelet_log(fake_host)), kubelet_log(fake_host)


def test_v1beta1_without_interactive_mode_is_fine(fake_host):
    setup_node(fake_host, exec_api_version=V1BETA1, interactive_mode=None)
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: ready(fake_host.emulator)), kubelet_log(fake_host)


def test_plugin_is_rerun_after_a_401_and_after_expiry(fake_host):
    setup_node(fake_host, exec_env={"TEST_FIRST_TOKEN_BAD": "1", "TEST_EXPIRES_IN": "1"})
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: ready(fake_host.emulator)), kubelet_log(fake_host)
    assert "HTTP 401" in kubelet_log(fake_host)
    runs = fake_host.state_dir / "plugin-runs"
    # One bad token, one after the 401, then one per expired second.
    assert wait_for(lambda: len(runs.read_text().splitlines()) >= 4, timeout=8), kubelet_log(fake_host)


def test_deleted_node_is_not_recreated(fake_host):
    setup_node(fake_host)
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: ready(fake_host.emulator)), kubelet_log(fake_host)
    # Deleted by the cluster admin (the static token of the admin kubeconfig).
    _, _, creds = fake_host.emulator.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01")
    admin = yaml.safe_load(base64.b64decode(creds["kubeconfigs"][0]["value"]))["users"][0]["user"]["token"]
    status, _, _ = fake_host.emulator.http("DELETE", f"{fake_host.emulator.apiserver}/api/v1/nodes/flex-1",
                                           headers={"Authorization": f"Bearer {admin}"})
    assert status == 200
    assert wait_for(lambda: "HTTP 404" in kubelet_log(fake_host)), kubelet_log(fake_host)
    assert nodes(fake_host.emulator) == {}


def test_kubelet_version_flag(fake_host):
    setup_node(fake_host, role=None)
    out = subprocess.run([str(fake_host.path("/usr/local/bin/kubelet")), "--version"], capture_output=True,
                         text=True, timeout=10)
    assert out.stdout == f"Kubernetes v{C.K8S_VERSION}\n"


@pytest.fixture(autouse=True)
def _no_stray_kubelets(fake_host):
    yield
    units = fake_host.fake_state("systemd.json").get("units", {})
    pids = [u["pid"] for u in units.values() if u.get("pid")]
    fake_host.stop_units()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or \
            open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"


def test_kubelet_gives_up_when_the_apiserver_is_gone(fake_host):
    setup_node(fake_host, role=None)
    config_path = fake_host.path("/var/lib/kubelet/kubeconfig")
    config = json.loads(config_path.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"  # nothing listens on discard
    config_path.write_text(json.dumps(config))
    env = {**fake_host.env, "FAKE_KUBELET_INTERVAL": "0.1", "FAKE_KUBELET_MAX_UNREACHABLE": "0.5"}
    proc = subprocess.run([str(fake_host.path("/usr/local/bin/kubelet")), "--kubeconfig=/var/lib/kubelet/kubeconfig"],
                          env=env, capture_output=True, timeout=20)
    assert proc.returncode == 1
    assert "no answer from the apiserver for over 0.5 s: giving up" in kubelet_log(fake_host)
