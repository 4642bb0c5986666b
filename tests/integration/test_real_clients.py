"""Real Kubernetes clients against the emulated cluster, through a node joined by our CLI.

kubectl (from PATH: this image has a 1.32 client) with the node's own kubeconfig, whose user is
our `token` exec plugin, and with identities that may less (an Entra principal without any
role, a node's x509 identity) or more (the cluster admin from listClusterAdminCredential):
`get nodes -o wide`, `cordon` / `uncordon`, `drain` through the Eviction API with a
PodDisruptionBudget that blocks and then frees an eviction, and `auth can-i` (yes and no).

Without kubectl the same runs through Debian's python3-kubernetes (the official client,
22.6.0): get nodes, the strategic-merge cordon, list pods by spec.nodeName, evictions (429 then
201) and SelfSubjectAccessReviews. Neither: the tests skip, saying so.
"""

import base64
import importlib.util
import json
import os
import shutil
import subprocess
import threading

import pytest
import yaml

from tests.apiserver_fixtures import make_csr
from tests.emulator import constants as C
from tests.harness import MACHINE_NAME
from tests.waiting import wait_for

KUBECTL = shutil.which("kubectl", path="/usr/local/bin:/usr/bin:/bin")
PY_CLIENT = importlib.util.find_spec("kubernetes") is not None  # Debian's python3-kubernetes

pytestmark = pytest.mark.skipif(not KUBECTL and not PY_CLIENT,
                                reason="needs kubectl on PATH or Debian's python3-kubernetes (official client)")
needs_kubectl = pytest.mark.skipif(not KUBECTL, reason="kubectl is not on PATH (the python3-kubernetes path runs)")
needs_py_client = pytest.mark.skipif(not PY_CLIENT, reason="python3-kubernetes is not installed")


# -- the world ------------------------------------------------------------------------------------

def put(emu, obj, cluster_id=C.CLUSTER_ID):
    return emu.admin("POST", "kube/objects", {"cluster_id": cluster_id, "object": obj})


def pod(name, node=MACHINE_NAME, namespace="default", labels=None, owner=None, annotations=None, volumes=None):
    meta = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        kind, owner_name = owner
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner_name,
                                    "uid": f"uid-{owner_name}", "controller": True, "blockOwnerDeletion": True}]
    if annotations:
        meta["annotations"] = annotations
    spec = {"nodeName": node, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def budget(name, selector, disruptions_allowed, namespace="default"):
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},
            "status": {"disruptionsAllowed": disruptions_allowed, "currentHealthy": 1,
                       "desiredHealthy": 1 if not disruptions_allowed else 0, "expectedPods": 1,
                       "observedGeneration": 1}}


def workloads(emu):
    """What kubectl drain sorts: a DaemonSet pod (stays), a mirror pod (stays), a ReplicaSet pod
    with an emptyDir guarded by a budget (evicted), and a pod of another node (not touched)."""
    put(emu, {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}}}})
    put(emu, pod("agent-x1", namespace="kube-system", labels={"app": "agent"}, owner=("DaemonSet", "agent")))
    put(emu, pod(f"static-web-{MACHINE_NAME}", namespace="kube-system",
                 annotations={"kubernetes.io/config.mirror": "abc", "kubernetes.io/config.source": "file"}))
    put(emu, pod("web-1", labels={"app": "web"}, owner=("ReplicaSet", "web-5d4f"),
                 volumes=[{"name": "scratch", "emptyDir": {}}]))
    put(emu, pod("web-2", node="other-node", labels={"app": "web"}, owner=("ReplicaSet", "web-5d4f")))
    put(emu, budget("web", {"app": "web"}, 0))


def pods(emu, cluster_id=C.CLUSTER_ID):
    """Pod names in the emulator's world ("namespace/name")."""
    return set(emu.state()["kube_objects"].get(cluster_id.lower(), {}).get("pods", {}))


def node_object(emu):
    return {n["metadata"]["name"]: n for n in emu.state()["nodes"][C.CLUSTER_NAME]}[MACHINE_NAME]


def admin_kubeconfig(emu, directory):
    status, _, creds = emu.arm_call("POST", f"{C.CLUSTER_ID}/listClusterAdminCredential", "2026-08-01")
    assert status == 200, creds
    path = os.path.join(directory, "admin.kubeconfig")
    with open(path, "wb") as f:
        f.write(base64.b64decode(creds["kubeconfigs"][0]["value"]))
    return path


def token_kubeconfig(emu, directory, token, server=None, name="reader"):
    """A kubeconfig with a bearer token (an Entra token the emulator minted for a principal)."""
    with open(emu.ca_bundle) as f:
        ca = base64.b64encode(f.read().encode()).decode()
    config = {"apiVersion": "v1", "kind": "Config", "current-context": name,
              "clusters": [{"name": name, "cluster": {"server": server or emu.apiserver,
                                                      "certificate-authority-data": ca}}],
              "users": [{"name": name, "user": {"token": token}}],
              "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}
    path = os.path.join(directory, f"{name}.kubeconfig")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


@pytest.fixture
def joined(node, tmp_path):
    """A node joined by `aks-flex-node bootstrap` (Arc identity, the legacy preset's roles), the
    kubelet's kubeconfig (exec plugin = our `token`) and an admin kubeconfig."""
    node.emu.settings(rbac_propagation_delay=0)
    node.cli("bootstrap", check=True)
    node.kubeconfig = node.path("/var/lib/kubelet/kubeconfig")
    user = json.load(open(node.kubeconfig))["users"][0]["user"]
    assert set(user) == {"exec"} and user["exec"]["args"] == ["token"], user
    node.admin_kubeconfig = admin_kubeconfig(node.emu, str(tmp_path))
    node.tmp = str(tmp_path)
    return node


def kubectl(node, kubeconfig, *args, timeout=120, check=True):
    env = dict(node.env, KUBECONFIG=kubeconfig, HOME=node.tmp)  # HOME: kubectl's discovery cache goes there
    proc = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


# -- kubectl ---------------------------------------------------------------------------------

@needs_kubectl
def test_kubectl_get_nodes_wide_with_the_nodes_own_kubeconfig(joined):
    out = kubectl(joined, joined.kubeconfig, "get", "nodes", "-o", "wide").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP",
                              "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"], out
    row = [line.split() for line in out[1:] if line.split()[0] == MACHINE_NAME]
    assert row and row[0][1] == "Ready", out
    assert row[0][4] == f"v{C.K8S_VERSION}" or row[0][4].startswith("v"), row
    # The exec plugin, not a stored secret, authenticated the calls: as the Arc machine's identity.
    principal = joined.emu.state()["machines"][0]["principal_id"]
    calls = [r for r in joined.emu.requests(server="apiserver") if r["path"] == "/api/v1/nodes"]
    assert calls and calls[-1]["detail"] == {"principal": principal, "auth": "azure-token"}


@needs_kubectl
def test_kubectl_cordon_and_uncordon(joined):
    proc = kubectl(joined, joined.kubeconfig, "cordon", MACHINE_NAME)
    assert f"node/{MACHINE_NAME} cordoned" in proc.stdout
    assert node_object(joined.emu)["spec"]["unschedulable"] is True
    out = kubectl(joined, joined.kubeconfig, "get", "nodes").stdout
    assert "Ready,SchedulingDisabled" in out
    assert "already cordoned" in kubectl(joined, joined.kubeconfig, "cordon", MACHINE_NAME).stdout
    proc = kubectl(joined, joined.kubeconfig, "uncordon", MACHINE_NAME)
    assert f"node/{MACHINE_NAME} uncordoned" in proc.stdout
    assert "unschedulable" not in node_object(joined.emu)["spec"]
    patches = [r for r in joined.emu.requests(server="apiserver", method="PATCH")
               if r["path"] == f"/api/v1/nodes/{MACHINE_NAME}"]
    assert len(patches) == 2 and all(r["status"] == 200 for r in patches)


@needs_kubectl
def test_kubectl_drain_waits_for_the_budget_then_evicts(joined):
    emu = joined.emu
    workloads(emu)
    done = {}

    def drain():
        done["proc"] = kubectl(joined, joined.admin_kubeconfig, "drain", MACHINE_NAME, "--ignore-daemonsets",
                               "--delete-emptydir-data", "--timeout=60s", check=False)

    runner = threading.Thread(target=drain)
    runner.start()
    blocked = wait_for(lambda: [r for r in emu.requests(server="apiserver", method="POST")
                                if r["path"].endswith("/eviction")], timeout=30, interval=0.2)
    assert blocked and blocked[0]["status"] == 429, blocked
    assert pods(emu) >= {"default/web-1"}, "a blocked eviction leaves the pod"
    put(emu, budget("web", {"app": "web"}, 1))  # the disruption controller frees one disruption
    runner.join(timeout=90)
    proc = done["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Cannot evict pod as it would violate the pod's disruption budget." in proc.stderr
    assert "evicting pod default/web-1" in proc.stdout + proc.stderr
    assert f"node/{MACHINE_NAME} drained" in proc.stdout
    assert pods(emu) == {"kube-system/agent-x1", f"kube-system/static-web-{MACHINE_NAME}", "default/web-2"}
    assert node_object(emu)["spec"]["unschedulable"] is True
    evictions = [r["status"] for r in emu.requests(server="apiserver", method="POST") if r["path"].endswith("/eviction")]
    assert evictions[0] == 429 and evictions[-1] == 201, evictions


@needs_kubectl
def test_kubectl_drain_gives_up_at_its_timeout_while_the_budget_blocks(joined):
    workloads(joined.emu)
    proc = kubectl(joined, joined.kubeconfig, "drain", MACHINE_NAME, "--ignore-daemonsets", "--delete-emptydir-data",
                   "--timeout=2s", check=False)
    assert proc.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in proc.stderr
    assert "default/web-1" in pods(joined.emu)


@needs_kubectl
def test_kubectl_auth_can_i_answers_as_the_server_enforces(joined):
    emu = joined.emu
    # The node's Arc identity holds AKS RBAC Cluster Admin (legacy preset): yes.
    for args in (["patch", "nodes"], ["create", "pods", "--subresource=eviction", "-n", "default"],
                 ["list", "pods", "--all-namespaces"]):
        proc = kubectl(joined, joined.kubeconfig, "auth", "can-i", *args, check=False)
        assert (proc.returncode, proc.stdout.strip()) == (0, "yes"), (args, proc.stdout, proc.stderr)
    # An Entra principal without any role on the cluster: no, and the server refuses it too.
    reader = token_kubeconfig(emu, joined.tmp, emu.mint_token(C.SP_OBJECT_ID))
    proc = kubectl(joined, reader, "auth", "can-i", "list", "nodes", check=False)
    assert proc.returncode == 1 and proc.stdout.strip().startswith("no"), proc.stdout + proc.stderr
    denied = kubectl(joined, reader, "get", "nodes", check=False)
    assert denied.returncode == 1 and "Forbidden" in denied.stderr and 'cannot list resource "nodes"' in denied.stderr
    # ...but, like every authenticated user, it may ask (system:basic-user).
    proc = kubectl(joined, reader, "auth", "can-i", "create", "selfsubjectaccessreviews.authorization.k8s.io",
                   check=False)
    assert proc.stdout.strip() == "yes", proc.stdout + proc.stderr


@needs_kubectl
def test_kubectl_as_a_node_of_a_1_32_cluster(joined):
    """x509 system:node:<name> on a 1.32 cluster: the Node authorizer with AuthorizeNodeWithSelectors."""
    emu = joined.emu
    added = emu.add_cluster(name="aks-132", resource_group=C.CLUSTER_RG, kubernetes_version="1.32.3")
    server, cluster_id = added["apiserver"], added["id"]
    admin = {"Authorization": f"Bearer {_cluster_admin_token(emu, cluster_id)}"}
    for name in ("n1", "n2"):
        status, _, body = emu.http("POST", f"{server}/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                                     "metadata": {"name": name}}, admin)
        assert status == 201, body
    put(emu, pod("mine", node="n1"), cluster_id)
    csr_pem, key_pem = make_csr("system:node:n1")
    status, _, csr = emu.http("POST", f"{server}/apis/certificates.k8s.io/v1/certificatesigningrequests", {
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "n1"},
        "spec": {"request": base64.b64encode(csr_pem).decode(), "usages": ["digital signature", "client auth"],
                 "signerName": "kubernetes.io/kube-apiserver-client-kubelet"}}, admin)
    assert status == 201 and csr["status"].get("certificate"), csr
    kubeconfig = json.load(open(token_kubeconfig(emu, joined.tmp, "unused", server, name="n1")))
    kubeconfig["users"][0]["user"] = {"client-certificate-data": csr["status"]["certificate"],
                                      "client-key-data": base64.b64encode(key_pem).decode()}
    path = os.path.join(joined.tmp, "n1.kubeconfig")
    with open(path, "w") as f:
        json.dump(kubeconfig, f)

    def can_i(*args):
        proc = kubectl(joined, path, "auth", "can-i", *args, check=False)
        assert proc.stdout.strip(), proc.stderr
        return proc.stdout.strip().split()[0]

    assert can_i("get", "nodes/n1") == "yes" and can_i("patch", "nodes/n1") == "yes"
    assert can_i("get", "nodes/n2") == "no" and can_i("list", "nodes") == "no"
    assert can_i("delete", "nodes/n1") == "no"  # kubernetes/kubernetes#71021
    assert can_i("get", "pods/mine", "-n", "default") == "yes"
    assert can_i("list", "pods", "--all-namespaces") == "no"
    assert can_i("create", "pods", "--subresource=eviction", "-n", "default") == "yes"
    assert can_i("get", "secrets", "-n", "default") == "no"
    assert "n1" in kubectl(joined, path, "get", "node", "n1").stdout
    denied = kubectl(joined, path, "get", "nodes", check=False)
    assert denied.returncode == 1 and "cannot read all nodes, only its own Node object" in denied.stderr
    denied = kubectl(joined, path, "cordon", "n2", check=False)
    assert denied.returncode == 1 and "cannot read 'n2', only its own Node object" in denied.stderr
    assert "node/n1 cordoned" in kubectl(joined, path, "cordon", "n1").stdout


def _cluster_admin_token(emu, cluster_id):
    status, _, creds = emu.arm_call("POST", f"{cluster_id}/listClusterAdminCredential", "2026-08-01")
    assert status == 200, creds
    return yaml.safe_load(base64.b64decode(creds["kubeconfigs"][0]["value"]))["users"][0]["user"]["token"]


# -- the official Python client (python3-kubernetes) -------------------------------------------

@needs_py_client
def test_python_client_gets_cordons_evicts_and_reviews(joined, monkeypatch):
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    workloads(joined.emu)
    # The exec plugin runs with the node's environment (the fake host's), as the kubelet runs it.
    for key, value in joined.env.items():
        if key.startswith(("AKS_FLEX_NODE", "FAKE_")):
            monkeypatch.setenv(key, value)
    api_client = config.new_client_from_config(config_file=joined.kubeconfig)
    core = client.CoreV1Api(api_client)
    # The client's models check the fields the API marks required (NodeSystemInfo's included).
    listed = core.list_node().items
    assert MACHINE_NAME in [n.metadata.name for n in listed]
    assert all(n.status.node_info.machine_id and n.status.node_info.boot_id for n in listed)
    core.patch_node(MACHINE_NAME, {"spec": {"unschedulable": True}}, _preload_content=False)
    assert node_object(joined.emu)["spec"]["unschedulable"] is True
    on_node = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={MACHINE_NAME}").items
    assert {p.metadata.name for p in on_node} == {"agent-x1", f"static-web-{MACHINE_NAME}", "web-1"}
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1", "namespace": "default"}}
    with pytest.raises(ApiException) as blocked:
        core.create_namespaced_pod_eviction("web-1", "default", eviction)
    assert blocked.value.status == 429 and "disruption budget" in json.loads(blocked.value.body)["message"]
    put(joined.emu, budget("web", {"app": "web"}, 1))
    core.create_namespaced_pod_eviction("web-1", "default", eviction)
    assert "default/web-1" not in pods(joined.emu)
    review = client.AuthorizationV1Api(api_client).create_self_subject_access_review(
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
         "spec": {"resourceAttributes": {"verb": "patch", "resource": "nodes"}}})
    assert review.status.allowed is True
