"""A FlexNodes agent pool: its bootstrap data, and the Machine this node is in it.

The operations are in the AKS preview API 2026-05-02-preview only
(azure-rest-api-specs, specification/containerservice/resource-manager/
Microsoft.ContainerService/aks/preview/2026-05-02-preview/managedClusters.json:
AgentPools_ListBootstrapData, Machines_Get/List/CreateOrUpdate, AgentPools_DeleteMachines).
No stable azure-mgmt-containerservice has them, and Debian 12's 21.1.0 (newest API
2022-11-02-preview) has none, so the calls go through the client's own ARM pipeline
(`_client.send_request`): the same credential, retry policy (429 with Retry-After waited
out), proxy and CA bundle as every other ARM call of ours, with the api-version pinned here.

The bootstrap data is a secret (the spec marks bootstrapToken.token and caCertData
`x-ms-secret`): BootstrapData keeps the token out of its repr, and nothing here logs a body.
"""

import dataclasses
import ipaddress
import json
import re
import math
import time
import urllib.parse
from typing import Optional

from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from azure.mgmt.core.exceptions import ARMErrorFormat

from aks_flex_node import cloud_values
from aks_flex_node.azure.auth import azure_errors
from aks_flex_node.cloud_values import BadCloudValue
from aks_flex_node.errors import AuthError, FlexNodeError, TemporaryError

API_VERSION = "2026-05-02-preview"
FLEX_NODES = "FlexNodes"  # AgentPoolType in the spec
ROLE_NAME = "Azure Kubernetes Service Flex Node Agent Role"
ROLE_GUID = "8f139b0f-7eaf-460b-a9da-5b1246d9ed0d"
# The upstream agent's client checks (Azure/AKSFlexNode pkg/bootstrapdata/bootstrap_data.go):
# the token's form (Kubernetes bootstrap tokens: kubernetes.io/docs/reference/access-authn-authz/
# bootstrap-tokens/) and a bound on the body.
TOKEN_FORM = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
MAX_BODY = 16 * 1024 * 1024
_VERSION = re.compile(r"^v?\d+\.\d+\.\d+$", re.ASCII)
# Machine PUT polling: the spec's final-state-via azure-async-operation.
MACHINE_POLL_TIMEOUT = 600


def pool_id(cluster_ref, pool):
    return f"{cluster_ref.resource_id}/agentPools/{pool}"


@dataclasses.dataclass(frozen=True)
class BootstrapData:
    """PoolBootstrapData, checked. `values` are config keys (configspec.ini) with the
    pool's values, for the config overlay; `server`/`ca_pem` the API server and its CA."""

    token: str = dataclasses.field(repr=False)
    server: str
    ca_pem: bytes = dataclasses.field(repr=False)
    values: dict
    cluster_id: str
    pool: str


class BadBootstrapData(BadCloudValue):
    """A PoolBootstrapData value we refuse (cloud_values.BadCloudValue, its own code)."""

    code = "bad_bootstrap_data"


def _send(clients, subscription_id, method, path, body=None, what=""):
    """(status, parsed JSON or None, headers) of one ARM call through the client's pipeline;
    an ARM error answer raises (translated by azure_errors)."""
    client = clients.containerservice(subscription_id)._client
    # The full URL: the client's format_url differs between SDK generations (21.1.0 joins
    # its base_url, 41.x fills an {endpoint} template).
    url = clients.endpoints.arm.rstrip("/") + path
    request = HttpRequest(method, url, params={"api-version": API_VERSION}, json=body)
    with azure_errors(what):
        response = client.send_request(request)
        if response.status_code >= 400:
            raise HttpResponseError(response=response, error_format=ARMErrorFormat)
    raw = response.content or b""
    if len(raw) > MAX_BODY:
        raise BadCloudValue(what, "body", f"{len(raw)} bytes", f"at most {MAX_BODY} bytes")
    try:
        payload = json.loads(raw) if raw else None
    except ValueError:
        raise BadCloudValue(what, f"body ({response.status_code})", raw[:40], "JSON") from None
    return response.status_code, payload, response.headers


def _get_or_none(clients, cluster_ref, path, what):
    """The resource at `path` (a dict), or None when ARM answers 404."""
    try:
        _status, doc, _headers = _send(clients, cluster_ref.subscription_id, "GET", path, None, what)
    except FlexNodeError as err:
        if isinstance(err.__cause__, HttpResponseError) and err.__cause__.status_code == 404:
            return None
        raise
    return doc or {}


def _get(doc, *path):
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def list_bootstrap_data(clients, cluster_ref, pool):
    """POST listBootstrapData (body {}, no LRO), checked: BootstrapData, or an error naming
    the field that is wrong. 403 says which role the identity needs, and where."""
    scope = pool_id(cluster_ref, pool)
    what = f"listBootstrapData of agent pool {pool} of {cluster_ref.name}"
    try:
        status, doc, _headers = _send(clients, cluster_ref.subscription_id, "POST",
                                      scope + "/listBootstrapData", {}, what)
    except AuthError as err:
        raise AuthError(err.message, remedy=(
            f"give this node's identity the {ROLE_NAME} ({ROLE_GUID}) on the pool: az role assignment "
            f"create --assignee <its client or object ID> --role {ROLE_GUID} --scope {scope} "
            "(a new assignment can take minutes to apply; bootstrap again then)")) from None
    if status != 200 or not isinstance(doc, dict):
        raise BadBootstrapData(what, "status", status, "200 with a PoolBootstrapData object")
    return parse_bootstrap_data(doc, cluster_ref, pool, what)


def parse_bootstrap_data(doc, cluster_ref, pool, what="listBootstrapData"):
    """Check a PoolBootstrapData document (both documented shapes of `azure`: with
    resourceManagerEndpoint, or with tenantId and cloud) and map it to config keys."""

    def bad(field, value, expected):
        return BadBootstrapData(what, field, value, expected,
                                secret=field in ("azure.bootstrapToken.token", "node.kubelet.caCertData"))

    def checked(parse, value, field, *args):
        try:
            return parse(value, what, field, *args)
        except BadCloudValue as err:
            raise bad(field, value, err.expected) from None

    cluster_id = _get(doc, "azure", "targetCluster", "resourceId")
    if not isinstance(cluster_id, str) or cluster_id.lower() != cluster_ref.resource_id.lower():
        raise bad("azure.targetCluster.resourceId", cluster_id, f"this cluster, {cluster_ref.resource_id}")
    pool_name = _get(doc, "azure", "targetAgentPoolName")
    if pool_name is not None and pool_name != pool:
        raise bad("azure.targetAgentPoolName", pool_name, f"the pool asked for, {pool}")
    endpoint = _get(doc, "azure", "resourceManagerEndpoint")
    if endpoint is not None:
        checked(cloud_values.https_url, endpoint, "azure.resourceManagerEndpoint", True)
    token = _get(doc, "azure", "bootstrapToken", "token")
    if not isinstance(token, str) or not TOKEN_FORM.match(token):
        raise bad("azure.bootstrapToken.token", None, "a bootstrap token of the form <6 of a-z0-9>.<16 of a-z0-9>")
    host, port = checked(cloud_values.host_port, _get(doc, "node", "kubelet", "clusterFQDN"), "node.kubelet.clusterFQDN")
    ca_pem = checked(cloud_values.ca_pem, _get(doc, "node", "kubelet", "caCertData"), "node.kubelet.caCertData")

    values = {}

    def take(key, field, value, check):
        if value is None:
            return  # absent: the config's value stands
        if not check(value):
            raise bad(field, value, EXPECTED[key])
        values[key] = value

    take("kubernetes_version", "components.kubernetes", _get(doc, "components", "kubernetes"), _is_kube_release)
    take("containerd_version", "components.containerd", _get(doc, "components", "containerd"), _is_version)
    take("runc_version", "components.runc", _get(doc, "components", "runc"), _is_version)
    take("cni_version", "networking.cniVersion", _get(doc, "networking", "cniVersion"), _is_version)
    take("cluster_dns", "networking.dnsServiceIP", _get(doc, "networking", "dnsServiceIP"), _is_ip)
    take("max_pods", "node.maxPods", _get(doc, "node", "maxPods"),
         lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 250)
    labels = _get(doc, "node", "labels")
    if labels is not None:
        if not (isinstance(labels, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in labels.items())):
            raise bad("node.labels", labels, EXPECTED["node_labels"])
        values["node_labels"] = [f"{k}={v}" for k, v in labels.items()]
    taints = _get(doc, "node", "taints")
    if taints is not None:
        if not (isinstance(taints, list) and all(isinstance(t, str) for t in taints)):
            raise bad("node.taints", taints, EXPECTED["node_taints"])
        values["node_taints"] = list(taints)
    for key in ("kubernetes_version", "containerd_version", "runc_version", "cni_version"):
        if key in values:
            values[key] = values[key].lstrip("v")
    return BootstrapData(token=token, server=f"https://{host}:{port or 443}", ca_pem=ca_pem,
                         values=values, cluster_id=cluster_id, pool=pool)


EXPECTED = {
    "kubernetes_version": "a version x.y.z",
    "containerd_version": "a version x.y.z",
    "runc_version": "a version x.y.z",
    "cni_version": "a version x.y.z",
    "cluster_dns": "an IP address",
    "max_pods": "an integer from 1 to 250",
    "node_labels": "an object of label names to string values",
    "node_taints": "a list of key=value:Effect strings",
}


def _is_version(value):
    """A component's version (containerd, runc, the CNI plugins): x.y.z."""
    return isinstance(value, str) and bool(_VERSION.match(value))


def _is_kube_release(value):
    """A Kubernetes release, as KubeVersion reads every Kubernetes version of ours."""
    try:
        cloud_values.kube_release(value, "", "")
    except BadCloudValue:
        return False
    return True


def _is_ip(value):
    try:
        ipaddress.ip_address(value)
        return True
    except (ValueError, TypeError):
        return False


@dataclasses.dataclass(frozen=True)
class Pool:
    name: str
    type: Optional[str]
    orchestrator_version: Optional[str]


def get_pool(clients, cluster_ref, pool):
    """The agent pool, or None when it does not exist. Needs agentPools/read, which the
    Flex Node Agent Role does not grant: a 403 is raised as AuthError for the caller to
    treat as "cannot tell"."""
    what = f"ARM agentPools GET {cluster_ref.name}/{pool}"
    doc = _get_or_none(clients, cluster_ref, pool_id(cluster_ref, pool), what)
    return None if doc is None else parse_pool(doc, pool, what)


def parse_pool(doc, pool, what):
    """The Pool of an agentPools GET answer, its values checked (cloud_values)."""
    props = _object(doc.get("properties") or {}, what, "properties")
    version = props.get("orchestratorVersion")
    kind = props.get("type")
    if kind is not None and not isinstance(kind, str):
        raise BadCloudValue(what, "properties.type", kind, "an agent pool type such as FlexNodes")
    return Pool(name=cloud_values.resource_name(doc.get("name") or pool, what, "name"), type=kind,
                orchestrator_version=None if version is None else cloud_values.kube_version(
                    version, what, "properties.orchestratorVersion"))


def _object(value, what, field):
    if not isinstance(value, dict):
        raise BadCloudValue(what, field, value, "an object")
    return value


@dataclasses.dataclass(frozen=True)
class Machine:
    """A Machine as the 2026-05-02-preview schema has it (MachineProperties,
    MachineKubernetesProfile, MachineStatus): the RP's goal state for this node. `etag` is
    properties.eTag, which upstream treats as the settings version (Azure/AKSFlexNode
    docs/design/agent-and-aks.md: "The ETag is the drift key"; status-only updates do not
    change it). `current_orchestrator_version` is the version the machine runs, as the RP
    reads it; `drift_action` (Synced | Recreate) and `drift_reason` the RP's verdict."""

    id: str
    name: str
    orchestrator_version: Optional[str]
    provisioning_state: Optional[str]
    etag: Optional[str]
    spec: dict  # properties.kubernetes: the fields machine_body sends
    current_orchestrator_version: Optional[str] = None
    drift_action: Optional[str] = None
    drift_reason: Optional[str] = None


def parse_machine(doc, what):
    """The Machine of a machines GET answer, the values we use checked (cloud_values)."""
    props = _object(doc.get("properties") or {}, what, "properties")
    kubernetes = _object(props.get("kubernetes") or {}, what, "properties.kubernetes")
    status = _object(props.get("status") or {}, what, "properties.status")
    version = kubernetes.get("orchestratorVersion")
    current = kubernetes.get("currentOrchestratorVersion")
    max_pods = kubernetes.get("maxPods")
    for field, value in (("provisioningState", props.get("provisioningState")), ("eTag", props.get("eTag")),
                         ("status.driftAction", status.get("driftAction")),
                         ("status.driftReason", status.get("driftReason"))):
        if value is not None and not isinstance(value, str):
            raise BadCloudValue(what, f"properties.{field}", value, "a string")
    labels, taints = kubernetes.get("nodeLabels"), kubernetes.get("nodeTaints")
    if labels is not None and not (isinstance(labels, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise BadCloudValue(what, "properties.kubernetes.nodeLabels", labels, EXPECTED["node_labels"])
    if taints is not None and not (isinstance(taints, list) and all(isinstance(t, str) for t in taints)):
        raise BadCloudValue(what, "properties.kubernetes.nodeTaints", taints, EXPECTED["node_taints"])
    return Machine(id=cloud_values.resource_id(doc.get("id"), what, "id"),
                   name=cloud_values.resource_name(doc.get("name"), what, "name"),
                   orchestrator_version=None if version is None else cloud_values.kube_version(
                       version, what, "properties.kubernetes.orchestratorVersion"),
                   provisioning_state=props.get("provisioningState"), etag=props.get("eTag"),
                   spec=dict({k: kubernetes.get(k) for k in MACHINE_SPEC_FIELDS},
                             maxPods=None if max_pods is None else cloud_values.count(
                                 max_pods, what, "properties.kubernetes.maxPods", 1, 250)),
                   current_orchestrator_version=None if current is None else cloud_values.kube_version(
                       current, what, "properties.kubernetes.currentOrchestratorVersion"),
                   drift_action=status.get("driftAction"), drift_reason=status.get("driftReason"))


def machine_path(cluster_ref, pool, name):
    return f"{pool_id(cluster_ref, pool)}/machines/{name}"


def get_machine(clients, cluster_ref, pool, name):
    what = f"ARM machines GET {pool}/{name}"
    doc = _get_or_none(clients, cluster_ref, machine_path(cluster_ref, pool, name), what)
    return None if doc is None else parse_machine(doc, what)


MACHINE_SPEC_FIELDS = ("orchestratorVersion", "maxPods", "nodeLabels", "nodeTaints")


def machine_body(cfg):
    """The Machine PUT body: only properties.kubernetes, as upstream sends it
    (Azure/AKSFlexNode pkg/aksmachine/client_armapi.go), from the effective config."""
    labels = dict(item.split("=", 1) for item in cfg.node_labels)
    return {"properties": {"kubernetes": {
        "orchestratorVersion": cfg.kubernetes_version, "maxPods": cfg.max_pods,
        "nodeLabels": labels, "nodeTaints": list(cfg.node_taints)}}}


def put_machine(clients, cluster_ref, pool, name, body, timeout=MACHINE_POLL_TIMEOUT,
                sleep=time.sleep, clock=time.monotonic):
    """PUT the Machine (an LRO: 200/201 with Azure-AsyncOperation) and poll the operation
    until it ends; returns the Machine as it is then."""
    what = f"registering machine {name} in agent pool {pool}"
    path = machine_path(cluster_ref, pool, name)
    _status, _doc, headers = _send(clients, cluster_ref.subscription_id, "PUT", path, body, what)
    _wait_operation(clients, cluster_ref.subscription_id, headers, what, timeout, sleep, clock)
    machine = get_machine(clients, cluster_ref, pool, name)
    if machine is None:
        raise TemporaryError(f"{what}: the operation succeeded but the machine cannot be read yet")
    return machine


def delete_machines(clients, cluster_ref, pool, names, timeout=MACHINE_POLL_TIMEOUT,
                    sleep=time.sleep, clock=time.monotonic):
    """POST deleteMachines {"machineNames": [...]} (202, an LRO) and wait for it. The RP
    cordons and drains the Nodes, taints them kubernetes.azure.com/flex-node-deleting and
    deletes the Machines; each Node is its agent's to leave, or the RP's to remove once stale
    (upstream docs/design/agent-and-aks.md, "Reset And Delete Flow"; pool_follow.py)."""
    what = f"deleting machine(s) {', '.join(names)} of agent pool {pool}"
    _status, _doc, headers = _send(clients, cluster_ref.subscription_id, "POST",
                                   pool_id(cluster_ref, pool) + "/deleteMachines",
                                   {"machineNames": list(names)}, what)
    _wait_operation(clients, cluster_ref.subscription_id, headers, what, timeout, sleep, clock)


def _wait_operation(clients, subscription_id, headers, what, timeout, sleep, clock):
    """Poll Azure-AsyncOperation (else Location) until a terminal status (ARM's async
    operation contract: Succeeded, Failed, Canceled); no header: done at once."""
    field = "Azure-AsyncOperation" if headers.get("Azure-AsyncOperation") else "Location"
    url = headers.get(field)
    if not url:
        return
    # The pipeline sends our ARM token with every request: only to ARM itself.
    cloud_values.https_url(url, what, f"header {field}", path_allowed=True)
    arm_host = urllib.parse.urlsplit(clients.endpoints.arm).netloc.lower()
    if urllib.parse.urlsplit(url).netloc.lower() != arm_host:
        raise BadCloudValue(what, f"header {field}", url, f"a URL on the ARM endpoint {arm_host}")
    client = clients.containerservice(subscription_id)._client
    deadline = clock() + timeout
    while True:
        with azure_errors(what):
            response = client.send_request(HttpRequest("GET", url))
            if response.status_code >= 400:
                raise HttpResponseError(response=response, error_format=ARMErrorFormat)
        try:
            doc = response.json() if response.content else {}
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        if field == "Azure-AsyncOperation":
            state = str((doc or {}).get("status") or "InProgress")
        else:  # a Location URL: 202 while it runs, 200/204 once done
            state = "InProgress" if response.status_code == 202 else "Succeeded"
        if state.lower() == "succeeded":
            return
        if state.lower() in ("failed", "canceled", "cancelled"):
            error = (doc or {}).get("error") or {}
            raise FlexNodeError(f"{what}: the operation ended {state}: "
                                f"{cloud_values.shown(error.get('code', ''))} "
                                f"{cloud_values.shown(error.get('message', ''), 400)}")
        if clock() >= deadline:
            raise TemporaryError(f"{what}: still {cloud_values.shown(state)} after {timeout} s")
        try:
            delay = float(response.headers.get("Retry-After") or 1)
        except ValueError:
            delay = 1.0
        if not math.isfinite(delay):  # "inf", "nan": float() takes them, sleep() does not
            delay = 1.0
        sleep(min(max(delay, 0.5), 30))
