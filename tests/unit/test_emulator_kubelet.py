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

import pytest
import yaml

from tests.apiserver_fixtures import CSRS, admin_client, advance_past_renewal, bootstrap_token
from tests.emulator import constants as C
from tests.waiting import wait_for

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


def setup_node(host, exec_env=None, exec_api_version=V1, interactive_mode="Never", role=C.ROLE_AKS_RBAC_CLUSTER_ADMIN):
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
    # (its status file is written a moment after the Node is Ready: waited for)
    assert node["_authenticatedBy"] == "azure-token" and wait_for(lambda: kubelet_status(fake_host).get("auth")) == "exec"
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
    # Ten minutes of the emulator's clock: the kubelet is refused until the test moves the
    # clock past them, however slow this machine (a real 3 s delay raced its first attempt).
    emu = fake_host.emulator
    emu.settings(rbac_propagation_delay=600)
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: "HTTP 403" in kubelet_log(fake_host)), kubelet_log(fake_host)
    assert not ready(emu)
    emu.advance_clock(601)
    assert wait_for(lambda: ready(emu)), kubelet_log(fake_host)


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


# -- TLS bootstrap and certificate rotation (agent-pool and bootstrap-token join modes) ----------

BOOTSTRAP_UNIT = textwrap.dedent("""\
    [Unit]
    Description=Kubelet
    [Service]
    ExecStart=/usr/local/bin/kubelet --bootstrap-kubeconfig=/var/lib/kubelet/bootstrap-kubeconfig \\
        --kubeconfig=/var/lib/kubelet/kubeconfig --cert-dir=/var/lib/kubelet/pki \\
        --config=/var/lib/kubelet/config.json --hostname-override=flex-1 \\
        --node-labels=kubernetes.azure.com/agentpool=flexpool
    [Install]
    WantedBy=multi-user.target
""")
PKI = "/var/lib/kubelet/pki"
CURRENT = f"{PKI}/kubelet-client-current.pem"


def install_kubelet(host):
    emu = host.emulator
    _, _, archive = emu.http("GET", f"{emu.artifacts}/kubernetes-node-v{C.K8S_VERSION}-linux-amd64.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        kubelet = tar.extractfile("kubernetes/node/bin/kubelet").read()
    _write(host, "/usr/local/bin/kubelet", kubelet.decode(), 0o755)


def setup_bootstrap_node(host, token, rotate=True):
    """What the join writes for TLS bootstrap: the bootstrap kubeconfig (token, CA data, server),
    a KubeletConfiguration with rotateCertificates, and the unit; no --kubeconfig yet."""
    install_kubelet(host)
    with open(host.emulator.ca_bundle, "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    bootstrap = {"apiVersion": "v1", "kind": "Config", "current-context": "bootstrap",
                 "clusters": [{"name": C.CLUSTER_NAME, "cluster": {"server": host.emulator.apiserver,
                                                                   "certificate-authority-data": ca}}],
                 "contexts": [{"name": "bootstrap", "context": {"cluster": C.CLUSTER_NAME, "user": "bootstrap"}}],
                 "users": [{"name": "bootstrap", "user": {"token": token}}]}
    _write(host, "/var/lib/kubelet/bootstrap-kubeconfig", json.dumps(bootstrap), 0o600)
    _write(host, "/var/lib/kubelet/config.json",
           json.dumps({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                       "rotateCertificates": rotate}))
    _write(host, "/etc/systemd/system/kubelet.service", BOOTSTRAP_UNIT)


def kubelet_status(host):
    path = host.state_dir / "kubelet-status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def csrs(emu):
    return admin_client(emu)("GET", CSRS)[1]["items"]


def test_kubelet_tls_bootstraps_registers_by_certificate_and_rotates(fake_host):
    emu = fake_host.emulator
    token = bootstrap_token(emu)
    setup_bootstrap_node(fake_host, token)
    assert systemctl(fake_host, "start", "kubelet").returncode == 0
    node = wait_for(lambda: ready(emu), timeout=15)
    assert node, kubelet_log(fake_host)
    assert node["_registeredBy"] == "system:node:flex-1" and node["_authenticatedBy"] == "x509"
    assert node["metadata"]["labels"]["kubernetes.azure.com/agentpool"] == "flexpool"

    # The files TLS bootstrap leaves, with their modes (bootstrap.go, certificate_store.go).
    kubeconfig_path = fake_host.path("/var/lib/kubelet/kubeconfig")
    kubeconfig = json.loads(kubeconfig_path.read_text())
    assert kubeconfig["users"][0]["user"] == {"client-certificate": CURRENT, "client-key": CURRENT}
    assert kubeconfig["clusters"][0]["cluster"]["server"] == emu.apiserver
    assert "token" not in kubeconfig_path.read_text()
    assert kubeconfig_path.stat().st_mode & 0o777 == 0o600
    current = fake_host.path(CURRENT)
    assert current.is_symlink() and os.readlink(current).startswith("kubelet-client-2")
    assert current.resolve().stat().st_mode & 0o777 == 0o600
    assert not fake_host.path(f"{PKI}/kubelet-client.key.tmp").exists()
    # The stand-in notes its state in its status file on its own time, a moment after the Node
    # it registered is Ready (a race seen under load in CI).
    first = wait_for(lambda: kubelet_status(fake_host).get("cert_serial") and kubelet_status(fake_host), timeout=15)
    assert first, kubelet_log(fake_host)
    assert first["auth"] == "x509" and first["bootstrapped"] is True and first["cert_serial"]

    token_id = token.split(".")[0]
    initial = [c for c in csrs(emu) if c["spec"]["username"] == f"system:bootstrap:{token_id}"]
    assert len(initial) == 1 and initial[0]["metadata"]["name"].startswith("node-csr-")

    # Renewed at 70-90 % of its lifetime with a new key, by the node itself, on the cluster's
    # clock: a year's certificate (--cluster-signing-duration's default) once the clock is
    # moved past 90 % of it, however slow this machine.
    assert first["rotations"] == 0
    advance_past_renewal(emu, first)
    after = wait_for(lambda: kubelet_status(fake_host).get("rotations", 0) >= 1 and kubelet_status(fake_host),
                     timeout=60)
    assert after, kubelet_log(fake_host)
    assert after["cert_serial"] != first["cert_serial"] and after["cert_not_after"] > first["cert_not_after"]
    assert json.loads(kubeconfig_path.read_text()) == kubeconfig
    renewals = [c for c in emu.state()["csrs"][C.CLUSTER_NAME] if c["spec"]["username"] == "system:node:flex-1"]
    assert renewals and renewals[0]["_authenticatedBy"] == "x509"  # the emulator's bookkeeping, not the API's
    assert "self kubelet client" in renewals[0]["status"]["conditions"][0]["message"]
    # The old pair is kept, as the real store keeps it.
    assert len(list(fake_host.path(PKI).glob("kubelet-client-2*.pem"))) >= 2
    beats = after["heartbeats"]
    assert wait_for(lambda: kubelet_status(fake_host)["heartbeats"] >= beats + 3 or None), kubelet_log(fake_host)
    assert kubelet_status(fake_host)["last_error"] is None
    assert token not in kubelet_log(fake_host)


def test_a_valid_kubeconfig_is_reused_and_an_expired_one_bootstraps_again(fake_host):
    emu = fake_host.emulator
    setup_bootstrap_node(fake_host, bootstrap_token(emu), rotate=False)
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: ready(emu), timeout=15), kubelet_log(fake_host)
    systemctl(fake_host, "stop", "kubelet")
    assert len(csrs(emu)) == 1
    # Restarted with a valid certificate: no new CSR.
    (fake_host.state_dir / "kubelet-status.json").unlink()
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: kubelet_status(fake_host).get("heartbeats", 0) >= 2 or None), kubelet_log(fake_host)
    assert kubelet_status(fake_host)["bootstrapped"] is False and len(csrs(emu)) == 1
    systemctl(fake_host, "stop", "kubelet")
    # A client certificate that can no longer be read: bootstrap again.
    target = fake_host.path(CURRENT).resolve()
    target.write_bytes(b"garbage")
    (fake_host.state_dir / "kubelet-status.json").unlink()
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: kubelet_status(fake_host).get("bootstrapped") and
                    kubelet_status(fake_host).get("heartbeats", 0) >= 1), kubelet_log(fake_host)
    assert len(csrs(emu)) == 2


def test_an_expired_bootstrap_token_gets_no_certificate(fake_host):
    emu = fake_host.emulator
    emu.settings(bootstrap_token_ttl=0.0)
    setup_bootstrap_node(fake_host, bootstrap_token(emu))
    systemctl(fake_host, "start", "kubelet")
    expected = "cannot create certificate signing request: HTTP 401"
    assert wait_for(lambda: expected in kubelet_log(fake_host)), kubelet_log(fake_host)
    assert nodes(emu) == {} and not fake_host.path("/var/lib/kubelet/kubeconfig").exists()
    assert csrs(emu) == []


def test_a_pending_csr_is_waited_for_and_found_again_after_a_timeout(fake_host):
    """Without auto-approval the kubelet times out waiting, keeps its key, and on the next
    attempt finds the same CSR (same key, same digested name) once an admin has approved it."""
    emu = fake_host.emulator
    emu.settings(csr_auto_approve=False)
    fake_host.env["FAKE_KUBELET_CSR_TIMEOUT"] = "1"
    setup_bootstrap_node(fake_host, bootstrap_token(emu))
    systemctl(fake_host, "start", "kubelet")
    assert wait_for(lambda: "timed out waiting for certificate signing request" in kubelet_log(fake_host)), \
        kubelet_log(fake_host)
    assert fake_host.path(f"{PKI}/kubelet-client.key.tmp").stat().st_mode & 0o777 == 0o600
    (pending,) = csrs(emu)
    assert pending["status"] == {}
    pending["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "KubectlApprove"}]}
    admin = admin_client(emu)
    assert admin("PUT", f"{CSRS}/{pending['metadata']['name']}/approval", pending)[0] == 200
    assert wait_for(lambda: ready(emu), timeout=15), kubelet_log(fake_host)
    assert [c["metadata"]["name"] for c in csrs(emu)] == [pending["metadata"]["name"]]
    assert not fake_host.path(f"{PKI}/kubelet-client.key.tmp").exists()
