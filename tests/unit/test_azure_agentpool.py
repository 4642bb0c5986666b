"""PoolBootstrapData checks (aks_flex_node/azure/agentpool.py), on documents shaped like the
2026-05-02-preview example AgentPoolsListBootstrapData.json (azure-rest-api-specs) and the
other documented shape of `azure` (tenantId and cloud instead of resourceManagerEndpoint)."""

import base64
import copy

import pytest

from aks_flex_node import cloud_values
from aks_flex_node.azure import agentpool, permissions
from aks_flex_node.config.cluster_ref import parse_cluster_id
from aks_flex_node.errors import AuthError, FlexNodeError
from tests.emulator import constants as C
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)

REF = parse_cluster_id(C.CLUSTER_ID)
TOKEN = "abcdef.0123456789abcdef"


def _ca_b64(emulator_ca_pem):
    return base64.b64encode(emulator_ca_pem).decode()


@pytest.fixture
def ca_pem(emulator):
    with open(emulator.ca_bundle, "rb") as f:
        return f.read()


@pytest.fixture
def doc(ca_pem):
    return {
        "azure": {
            "resourceManagerEndpoint": "https://management.azure.com/",
            "targetCluster": {"resourceId": C.CLUSTER_ID},
            "targetAgentPoolName": "flexpool",
            "bootstrapToken": {"token": TOKEN},
        },
        "components": {"kubernetes": "1.32.7", "containerd": "2.0.4", "runc": "1.2.1"},
        "networking": {"dnsServiceIP": "10.0.0.10", "cniVersion": "1.4.1"},
        "node": {
            "maxPods": 110,
            "labels": {"node-role": "edge"},
            "taints": ["aks.azure.com/flex-node=true:NoSchedule"],
            "kubelet": {"clusterFQDN": "cluster-xxxx.hcp.eastus2.azmk8s.io", "caCertData": _ca_b64(ca_pem)},
        },
    }


def test_the_example_shape_maps_to_config_keys(doc, ca_pem):
    data = agentpool.parse_bootstrap_data(doc, REF, "flexpool")
    assert data.token == TOKEN and data.ca_pem == ca_pem
    assert data.server == "https://cluster-xxxx.hcp.eastus2.azmk8s.io:443"
    assert data.values == {
        "kubernetes_version": "1.32.7", "containerd_version": "2.0.4", "runc_version": "1.2.1",
        "cni_version": "1.4.1", "cluster_dns": "10.0.0.10", "max_pods": 110,
        "node_labels": ["node-role=edge"], "node_taints": ["aks.azure.com/flex-node=true:NoSchedule"]}
    assert TOKEN not in repr(data)


def test_the_tenant_and_cloud_shape_is_accepted(doc):
    azure = doc["azure"]
    del azure["resourceManagerEndpoint"]
    azure.update(tenantId=C.TENANT_ID, cloud="AzurePublicCloud")
    assert agentpool.parse_bootstrap_data(doc, REF, "flexpool").token == TOKEN


def test_absent_optional_fields_leave_the_config_alone(doc):
    for section in ("components", "networking"):
        del doc[section]
    for key in ("maxPods", "labels", "taints"):
        del doc["node"][key]
    assert agentpool.parse_bootstrap_data(doc, REF, "flexpool").values == {}


def test_a_host_and_port_fqdn_keeps_its_port(doc):
    doc["node"]["kubelet"]["clusterFQDN"] = "127.0.0.1:6443"
    assert agentpool.parse_bootstrap_data(doc, REF, "flexpool").server == "https://127.0.0.1:6443"


def _broken(doc, path, value):
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize("path, value, field, expected", [
    (("azure", "bootstrapToken", "token"), "ABCDEF.0123456789abcdef", "azure.bootstrapToken.token", "bootstrap token"),
    (("azure", "bootstrapToken", "token"), "abcdef0123456789abcdef", "azure.bootstrapToken.token", "bootstrap token"),
    (("azure", "bootstrapToken"), KeyError, "azure.bootstrapToken.token", "bootstrap token"),
    (("azure", "targetCluster", "resourceId"), C.CLUSTER2_ID, "azure.targetCluster.resourceId", "this cluster"),
    (("azure", "targetAgentPoolName"), "otherpool", "azure.targetAgentPoolName", "the pool asked for"),
    (("azure", "resourceManagerEndpoint"), "http://management.azure.com/", "azure.resourceManagerEndpoint", "https"),
    (("node", "kubelet", "clusterFQDN"), "https://x.example.com", "node.kubelet.clusterFQDN", "host name"),
    (("node", "kubelet", "clusterFQDN"), "x.example.com/path", "node.kubelet.clusterFQDN", "host name"),
    (("node", "kubelet", "caCertData"), base64.b64encode(b"not a certificate").decode(), "node.kubelet.caCertData",
     "PEM"),
    (("node", "kubelet", "caCertData"), "%%%", "node.kubelet.caCertData", "PEM"),
    (("components", "kubernetes"), "latest", "components.kubernetes", "x.y.z"),
    # Read as KubeVersion reads every Kubernetes version: a release, ASCII digits, no blanks.
    (("components", "kubernetes"), "1.32.7-rc.1", "components.kubernetes", "x.y.z"),
    (("components", "kubernetes"), "1.32", "components.kubernetes", "x.y.z"),
    (("components", "kubernetes"), "1.\u0663\u0662.7", "components.kubernetes", "x.y.z"),
    (("components", "kubernetes"), " 1.32.7", "components.kubernetes", "x.y.z"),
    (("components", "containerd"), "2.\u0660.4", "components.containerd", "x.y.z"),
    (("networking", "dnsServiceIP"), "10.0.0", "networking.dnsServiceIP", "IP address"),
    (("node", "maxPods"), 900, "node.maxPods", "1 to 250"),
    (("node", "maxPods"), True, "node.maxPods", "1 to 250"),
    (("node", "labels"), ["a=b"], "node.labels", "label names"),
    (("node", "taints"), "a=b:NoSchedule", "node.taints", "list"),
    # Hostile cloud values (issue 26, defect 7): a trailing newline passed the old $-anchored
    # host check; a negative count; an endpoint with a newline or a user.
    (("node", "kubelet", "clusterFQDN"), "x.example.com\n", "node.kubelet.clusterFQDN", "host name"),
    (("node", "kubelet", "clusterFQDN"), "x.example.com:0", "node.kubelet.clusterFQDN", "host name"),
    (("azure", "resourceManagerEndpoint"), "https://management.azure.com/\n[Service]",
     "azure.resourceManagerEndpoint", "https"),
    (("azure", "resourceManagerEndpoint"), "https://u:p@evil.example/", "azure.resourceManagerEndpoint", "https"),
    (("node", "maxPods"), -3, "node.maxPods", "1 to 250"),
])
def test_each_bad_field_is_named_with_what_is_expected(doc, path, value, field, expected):
    with pytest.raises(agentpool.BadBootstrapData) as info:
        agentpool.parse_bootstrap_data(_broken(doc, path, value), REF, "flexpool")
    message = info.value.message
    assert field in message and expected in message
    assert TOKEN not in message and "ABCDEF" not in message  # the token is never shown
    assert (info.value.field, info.value.exit_code) == (field, 1)  # permanent: never the temporary 75
    assert isinstance(info.value, cloud_values.BadCloudValue) and "\n" not in message


# -- against the emulator, through the containerservice client's own pipeline --------------


class _Cfg:
    kubernetes_version, max_pods = "1.30.4", 110
    node_labels = ["node-role=edge", "team=a"]
    node_taints = ["aks.azure.com/flex-node=true:NoSchedule"]


def test_the_node_identity_lists_bootstrap_data_and_each_call_mints_a_token(fresh_emulator, node_clients):
    first = agentpool.list_bootstrap_data(node_clients, REF, C.FLEX_POOL)
    second = agentpool.list_bootstrap_data(node_clients, REF, C.FLEX_POOL)
    assert first.token != second.token
    assert first.server.startswith("https://127.0.0.1:") and first.values["kubernetes_version"] == C.K8S_VERSION
    tokens = fresh_emulator.state()["bootstrap_tokens"]
    assert len(next(iter(tokens.values()))) == 2
    posts = fresh_emulator.requests(server="arm", method="POST", path_contains="listBootstrapData")
    assert [p["status"] for p in posts] == [200, 200]
    assert all(p["api_version"] == agentpool.API_VERSION for p in posts)


def test_a_missing_role_is_a_403_that_says_which_role_and_where(fresh_emulator, reader_clients):
    with pytest.raises(AuthError) as info:
        agentpool.list_bootstrap_data(reader_clients, REF, C.FLEX_POOL)
    assert agentpool.ROLE_GUID in info.value.remedy and f"{C.CLUSTER_ID}/agentPools/{C.FLEX_POOL}" in info.value.remedy


def test_an_unknown_pool_is_named(node_clients, azure_clients):
    with pytest.raises(FlexNodeError, match="404"):  # for a caller that may see the cluster's pools
        agentpool.list_bootstrap_data(azure_clients, REF, "nopool")
    with pytest.raises(AuthError):  # ARM authorizes before it looks: the node's role is on flexpool only
        agentpool.list_bootstrap_data(node_clients, REF, "nopool")


def test_throttled_bootstrap_data_is_retried_after_its_wait(fresh_emulator, node_clients):
    fresh_emulator.faults([{
        "match": {"method": "POST", "path_regex": "listBootstrapData", "times": 1},
        "respond": {"status": 429, "headers": {"Retry-After": "1"},
                    "body": {"error": {"code": "SubscriptionRequestsThrottled", "message": "throttled"}}},
    }])
    assert agentpool.list_bootstrap_data(node_clients, REF, C.FLEX_POOL).token
    statuses = [r["status"] for r in fresh_emulator.requests(server="arm", method="POST",
                                                            path_contains="listBootstrapData")]
    assert statuses == [429, 200]


def test_machine_is_registered_adopted_and_updated(fresh_emulator, node_clients):
    assert agentpool.get_machine(node_clients, REF, C.FLEX_POOL, "edge-1") is None
    body = agentpool.machine_body(_Cfg)
    machine = agentpool.put_machine(node_clients, REF, C.FLEX_POOL, "edge-1", body)
    assert machine.provisioning_state == "Succeeded" and machine.spec == body["properties"]["kubernetes"]
    again = agentpool.put_machine(node_clients, REF, C.FLEX_POOL, "edge-1", body)
    assert again.etag == machine.etag  # the same spec: ARM keeps the eTag
    changed = dict(body["properties"]["kubernetes"], orchestratorVersion="1.31.2")
    updated = agentpool.put_machine(node_clients, REF, C.FLEX_POOL, "edge-1", {"properties": {"kubernetes": changed}})
    assert updated.orchestrator_version == "1.31.2" and updated.etag != machine.etag


def test_only_an_operator_may_delete_machines(fresh_emulator, node_clients, azure_clients):
    agentpool.put_machine(node_clients, REF, C.FLEX_POOL, "edge-2", agentpool.machine_body(_Cfg))
    assert permissions.may_delete_machines(node_clients, REF, C.FLEX_POOL) is False
    assert permissions.may_delete_machines(azure_clients, REF, C.FLEX_POOL) is True
    agentpool.delete_machines(azure_clients, REF, C.FLEX_POOL, ["edge-2"])
    assert agentpool.get_machine(node_clients, REF, C.FLEX_POOL, "edge-2") is None


def test_the_pool_and_its_type(azure_clients, node_clients):
    assert agentpool.get_pool(azure_clients, REF, C.FLEX_POOL).type == agentpool.FLEX_NODES
    assert agentpool.get_pool(azure_clients, REF, C.SYSTEM_POOL).type == "VirtualMachineScaleSets"
    assert agentpool.get_pool(azure_clients, REF, "nopool") is None
    with pytest.raises(AuthError):  # the Flex Node Agent Role has no agentPools/read
        agentpool.get_pool(node_clients, REF, C.FLEX_POOL)
    blocks = permissions.pool_blocks(node_clients, REF, C.FLEX_POOL)
    assert all(permissions.allowed(a, blocks) for a in permissions.POOL_ACTIONS)
    assert not permissions.allowed(permissions.POOL_READ, blocks)


# -- hostile values in the pool's and the Machine's answers (issue 26, defect 7) -----------


@pytest.mark.parametrize("field, value", [
    ("properties.orchestratorVersion", "1.30.4/x"),
    ("properties.orchestratorVersion", "1.30.4\n[Service]"),
    ("properties.type", ["FlexNodes"]),
    ("name", "../flexpool"),
])
def test_a_bad_value_in_the_pool_answer_is_refused(fresh_emulator, azure_clients, field, value):
    fresh_emulator.faults([{"match": {"server": "arm", "method": "GET", "path_regex": "agentPools/flexpool$",
                                      "times": 1}, "set": {field: value}}])
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        agentpool.get_pool(azure_clients, REF, C.FLEX_POOL)
    assert (caught.value.field, caught.value.exit_code) == (field, 1)
    assert caught.value.source.startswith("ARM agentPools GET")


@pytest.mark.parametrize("field, value", [
    ("properties.kubernetes.maxPods", -1),
    ("properties.kubernetes.orchestratorVersion", "1.30.4 --v=9"),
    ("id", C.FLEX_POOL_ID + "/machines/../../../x"),
    ("properties.provisioningState", {"x": 1}),
])
def test_a_bad_value_in_the_machine_answer_is_refused(fresh_emulator, node_clients, field, value):
    agentpool.put_machine(node_clients, REF, C.FLEX_POOL, "edge-3", agentpool.machine_body(_Cfg))
    fresh_emulator.faults([{"match": {"server": "arm", "method": "GET", "path_regex": "machines/edge-3$",
                                      "times": 1}, "set": {field: value}}])
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        agentpool.get_machine(node_clients, REF, C.FLEX_POOL, "edge-3")
    assert (caught.value.field, caught.value.exit_code) == (field, 1)


def test_an_operation_url_off_arm_is_never_polled_with_our_token(fresh_emulator, node_clients):
    """Azure-AsyncOperation names the URL the pipeline GETs with the ARM token: only ARM's."""
    fresh_emulator.faults([{"match": {"server": "arm", "method": "PUT", "path_regex": "machines/edge-4$",
                                      "times": 1},
                            "respond": {"status": 201, "body": {},
                                        "headers": {"Azure-AsyncOperation": "https://evil.example/op"}}}])
    with pytest.raises(cloud_values.BadCloudValue) as caught:
        agentpool.put_machine(node_clients, REF, C.FLEX_POOL, "edge-4", agentpool.machine_body(_Cfg))
    assert caught.value.field == "header Azure-AsyncOperation"
