"""The sections of the upstream agent's config.json, each mapped to our keys (config/upstream.py
says what the file is and how the join mode is chosen): azure, the join mode and its token,
auth, arc, the cluster, the versions, the node. Each function takes the conversion under way
and records values, secrets, problems and warnings on it."""

import base64
import binascii
import re

from aks_flex_node import clouds
from aks_flex_node.config.checks import shorten
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.config.named_files import BOOTSTRAP_TOKEN, BOOTSTRAP_TOKEN_FORM, has_certificate

REDACTED = "***"
MISSING = "(missing)"


# A Go fmt verb, as in upstream's kubernetes.urlTemplate (pkg/config/config.go).
_GO_TEMPLATE_VERB = re.compile(r"%(\[\d+\])?[a-zA-Z%]")


def azure(c):
    if "azure" not in c.document:
        c.problem("azure", MISSING, "an object with subscriptionId, tenantId and targetCluster")
    c.get("azure", dict)  # a problem if it is not an object
    c.set("subscription_id", c.text("azure.subscriptionId"))
    c.set("tenant_id", c.text("azure.tenantId"))
    c.set("cloud", c.text("azure.cloud"))
    arm = c.text("azure.resourceManagerEndpoint")
    if arm:
        named = {clouds.endpoints(name).arm: name for name in clouds.NAMES if name != clouds.CUSTOM}
        cloud = named.get(arm.rstrip("/").lower())
        if cloud is None:
            c.problem("azure.resourceManagerEndpoint", arm,
                      "the ARM endpoint of a known cloud (" + ", ".join(sorted(named)) + "); for another, "
                      "remove it and set cloud = custom, arm_endpoint and authority_host after the import")
        elif c.text("azure.cloud") and c.text("azure.cloud") != cloud:
            c.problem("azure.resourceManagerEndpoint", arm, f"the ARM endpoint of azure.cloud ({c.text('azure.cloud')})")
        else:
            c.set("cloud", cloud)


def _has_identity(c):
    azure = c.document.get("azure")
    return isinstance(azure, dict) and ("servicePrincipal" in azure or "managedIdentity" in azure)


def join_mode(c):
    """join_mode from targetAgentPoolName, a node credential and bootstrapToken (see the
    module's docstring), and the bootstrap-token mode's token, server and CA."""
    pool = c.text("azure.targetAgentPoolName")
    c.get("azure.bootstrapToken", dict)
    token = c.get("azure.bootstrapToken.token", str)
    identity = _has_identity(c)
    if pool and identity:
        c.mode = JoinMode.AGENT_POOL
        c.set("join_mode", str(c.mode))
        c.set("agent_pool", pool)
        for path in ("azure.bootstrapToken.token", "node.kubelet.serverURL", "node.kubelet.clusterFQDN",
                     "node.kubelet.caCertData", "azure.bootstrapToken.serverURL", "azure.bootstrapToken.caCertData"):
            if c.get(path) not in (None, ""):
                c.warn(path, "with targetAgentPoolName and a node credential, every join fetches a fresh token, "
                             "server and CA from AKS (listBootstrapData); set bootstrap_token_file, api_server or "
                             "cluster_ca_file to override them")
        return
    if token and token.strip():
        if identity:
            c.problem("azure.bootstrapToken", "present along with azure.servicePrincipal or azure.managedIdentity",
                      "one of them without azure.targetAgentPoolName (upstream v0.0.10 too allows one auth "
                      "method), or all with targetAgentPoolName for join_mode = agent-pool")
            return
        c.mode = JoinMode.BOOTSTRAP_TOKEN
        c.set("join_mode", str(c.mode))
        if pool:
            c.warn("azure.targetAgentPoolName", "without servicePrincipal or managedIdentity there is no credential "
                                                "to register a Machine in the pool: joined with the bootstrap token "
                                                "alone (join_mode = bootstrap-token)")
        _bootstrap_token(c, token.strip())
        return
    if token is not None:
        c.warn("azure.bootstrapToken.token", "empty: no bootstrap token to join with")
    if pool:
        c.problem("azure.targetAgentPoolName", pool,
                  "azure.servicePrincipal or azure.managedIdentity along with it: the node's own credential that "
                  "fetches its bootstrap tokens (aks-flex-node's join_mode = agent-pool takes neither the Azure CLI "
                  "login nor the Arc identity), or azure.bootstrapToken")


def _bootstrap_token(c, token):
    if not BOOTSTRAP_TOKEN.match(token):
        c.problem("azure.bootstrapToken.token", REDACTED,
                  f"a Kubernetes bootstrap token {BOOTSTRAP_TOKEN_FORM} (lowercase letters and digits): it is not "
                  f"a bootstrap token of the form {BOOTSTRAP_TOKEN_FORM}")
    else:
        c.secrets["bootstrap_token"] = token
    # v0.0.10 reads node.kubelet.serverURL; newer files node.kubelet.clusterFQDN; the
    # v0.0.10 README put both under azure.bootstrapToken (fixed by Azure/AKSFlexNode#88).
    server_paths = ("node.kubelet.serverURL", "node.kubelet.clusterFQDN", "azure.bootstrapToken.serverURL")
    servers = {path: c.text(path) for path in server_paths if c.text(path)}
    if not servers:
        c.problem("node.kubelet.serverURL", MISSING, "the API server (node.kubelet.serverURL or clusterFQDN), "
                                                     "required with a bootstrap token")
    else:
        c.set("api_server", next(iter(servers.values())))
    ca_path = next((p for p in ("node.kubelet.caCertData", "azure.bootstrapToken.caCertData") if c.text(p)), None)
    if ca_path is None:
        c.problem("node.kubelet.caCertData", MISSING, "the cluster's CA certificate, base64 PEM, required with a "
                                                      "bootstrap token")
        return
    try:
        pem = base64.b64decode(c.text(ca_path), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        pem = None
    if pem is None or not has_certificate(pem):
        c.problem(ca_path, shorten(c.text(ca_path)), "the base64 of a PEM file holding the cluster's CA "
                                                     "certificate (a -----BEGIN CERTIFICATE----- block)")
    else:
        c.secrets["cluster_ca"] = pem


def auth(c):
    sp = c.get("azure.servicePrincipal", dict)
    has_mi = isinstance(c.document.get("azure"), dict) and "managedIdentity" in c.document["azure"]
    mi = c.get("azure.managedIdentity", (dict, type(None)))
    if c.mode is JoinMode.BOOTSTRAP_TOKEN:
        return  # no credential (a pair with one is a problem already)

    if sp is not None and has_mi:
        c.problem("azure.managedIdentity", "present along with azure.servicePrincipal",
                  "one of servicePrincipal and managedIdentity (upstream too allows only one)")
        return
    if sp is not None:
        c.set("auth_method", "service-principal")
        c.set("sp_client_id", c.text("azure.servicePrincipal.clientId"))
        if not c.text("azure.servicePrincipal.clientId"):
            c.problem("azure.servicePrincipal.clientId", MISSING,
                      "the service principal's application (client) ID")
        secret = c.get("azure.servicePrincipal.clientSecret", str)
        if secret:
            c.secrets["sp_client_secret"] = secret
        else:
            c.warnings.append("azure.servicePrincipal.clientSecret: absent: put the secret in a file only "
                              "root can read and name it in sp_client_secret_file (or use sp_certificate_file)")
        sp_tenant, tenant = c.text("azure.servicePrincipal.tenantId"), c.text("azure.tenantId")
        if not sp_tenant:
            # The v0.0.10 README's SP example has no servicePrincipal.tenantId; upstream then
            # does not see SP mode at all (it needs all three fields).
            c.warnings.append("azure.servicePrincipal.tenantId: absent (as in the upstream v0.0.10 README "
                              "example, where upstream then ignores the service principal): using azure.tenantId")
        elif tenant and sp_tenant.lower() != tenant.lower():
            c.problem("azure.servicePrincipal.tenantId", sp_tenant,
                      f"the same tenant as azure.tenantId ({tenant}): aks-flex-node uses one tenant")
        else:
            c.set("tenant_id", sp_tenant)
        _warn_arc_disabled(c, "a service principal")
    elif has_mi:
        c.set("auth_method", "managed-identity")
        if isinstance(mi, dict):
            c.set("managed_identity_client_id", c.text("azure.managedIdentity.clientId"))
        _warn_arc_disabled(c, "a managed identity")
    elif c.mode is JoinMode.ARC:
        # Upstream's Arc mode: the operator's Azure CLI login makes the Azure calls.
        c.set("auth_method", "azure-cli")
        enabled = c.get("azure.arc.enabled", bool)
        if enabled is None:
            c.warnings.append("azure.arc.enabled: absent: converted as Arc mode with the Azure CLI login "
                              "(the only mode with neither servicePrincipal nor managedIdentity)")
        elif enabled is False:
            c.warnings.append("azure.arc.enabled: false, with neither servicePrincipal nor managedIdentity: "
                              "aks-flex-node always uses Arc; Azure calls use root's Azure CLI login")


def _warn_arc_disabled(c, what):
    if c.mode is JoinMode.ARC and c.get("azure.arc.enabled", bool) is not True:
        c.warnings.append(f"azure.arc.enabled: not true: aks-flex-node still registers the machine with "
                          f"Azure Arc; {what} makes the Azure calls, the kubelet uses the Arc identity")


def arc(c):
    # The node's name: azure.arc.machineName (v0.0.10), agent.nodeName (newer files).
    path = "azure.arc.machineName" if c.text("azure.arc.machineName") else "agent.nodeName"
    name = c.text(path)
    if name and name != name.lower():
        c.warnings.append(f"{path}: {shorten(name)!r} lowercased (Kubernetes node names are lowercase)")
        name = name.lower()
    c.set("machine_name", name)
    if c.mode is not JoinMode.ARC:
        c.text("azure.targetCluster.location")  # the cluster's, read by AKS: nothing to keep
        return  # arc.resourceGroup, location, tags: no Arc machine, warned about as unused
    c.set("arc_resource_group", c.text("azure.arc.resourceGroup"))
    # Upstream's Arc location defaults to targetCluster.location (config.go); ours to the
    # cluster's actual region, so keep the file's choice either way.
    arc_location, cluster_location = c.text("azure.arc.location"), c.text("azure.targetCluster.location")
    c.set("arc_location", arc_location or cluster_location)
    c.set("arc_tags", _pairs(c, "azure.arc.tags", "="))


def cluster(c):
    target = c.get("azure.targetCluster", dict)
    resource_id = c.text("azure.targetCluster.resourceId")
    if not resource_id:
        # Upstream dereferences targetCluster without a nil check and panics (config.go Validate).
        c.problem("azure.targetCluster.resourceId", MISSING if target is None else "",
                  "the AKS cluster's resource ID: /subscriptions/<uuid>/resourceGroups/<group>/providers/"
                  "Microsoft.ContainerService/managedClusters/<name>")
    c.set("cluster_resource_id", resource_id)


def _either(c, key, newer, legacy):
    """The newer shape's field (components.*, networking.*) or its v0.0.10 one; both
    giving different values is a problem (which one did the file mean?)."""
    new_value, old_value = c.text(newer), c.text(legacy)
    if new_value and old_value and new_value.lstrip("vV") != old_value.lstrip("vV"):
        c.problem(newer, new_value, f"the same value as {legacy} ({shorten(old_value)}), or only one of them")
    c.set(key, new_value or old_value)


def versions(c):
    _either(c, "kubernetes_version", "components.kubernetes", "kubernetes.version")
    version = c.values.get("kubernetes_version")
    if version and version[0] in "vV":
        c.values["kubernetes_version"] = version[1:]
    template = c.text("kubernetes.urlTemplate")
    if template:
        converted = _from_go_template(template)
        if converted is None:
            c.problem("kubernetes.urlTemplate", template,
                      "a Go format string with two %s: the version, then the architecture")
        else:
            c.set("kubernetes_url", converted)
            c.warnings.append("kubernetes.urlTemplate: converted to kubernetes_url; check that its checksum is at "
                              "{url}.sha256, or set kubernetes_sha256_url (every download is verified)")
    _either(c, "containerd_version", "components.containerd", "containerd.version")
    _either(c, "pause_image", "components.sandboxImage", "containerd.pauseImage")
    metrics = c.text("containerd.metricsAddress")
    if metrics and (metrics.startswith(("0.0.0.0:", "[::]:", ":"))):
        c.warnings.append(f"containerd.metricsAddress: {shorten(metrics)} exposes containerd's metrics on every interface; "
                          "aks-flex-node's default is 127.0.0.1:10257")
    c.set("containerd_metrics_address", metrics)
    _either(c, "runc_version", "components.runc", "runc.version")
    _either(c, "cni_version", "networking.cniVersion", "cni.version")


def _from_go_template(template):
    """Go's fmt "…v%s/…-%s.tar.gz" (version, arch) as "…v{version}/…-{arch}.tar.gz"."""
    if "{" in template or "}" in template:
        return None
    verbs = [m.group(0) for m in _GO_TEMPLATE_VERB.finditer(template)]
    if [v for v in verbs if v != "%%"] != ["%s", "%s"]:
        return None
    fields = iter(("{version}", "{arch}"))
    return _GO_TEMPLATE_VERB.sub(lambda m: "%" if m.group(0) == "%%" else next(fields), template)


def node(c):
    max_pods = c.get("node.maxPods", int)
    if isinstance(max_pods, bool):
        c.problem("node.maxPods", max_pods, "a number")
    elif max_pods:  # upstream: 0 means the default, 110
        c.set("max_pods", str(max_pods))
    labels = c.get("node.labels", dict)
    if labels and labels.get("kubernetes.azure.com/managed") == "false":
        labels = {k: v for k, v in labels.items() if k != "kubernetes.azure.com/managed"}  # always added
    if labels is not None:
        c.set("node_labels", _pairs_of(c, "node.labels", labels, "="))
    taints = c.get("node.taints", list)
    if taints:
        bad = [t for t in taints if not isinstance(t, str) or "," in t]
        if bad:
            c.problem("node.taints", bad, "a list of key=value:Effect strings")
        else:
            c.set("node_taints", ",".join(t.strip() for t in taints))
    c.set("kube_reserved", _pairs(c, "node.kubelet.kubeReserved", "="))
    c.set("eviction_hard", _pairs(c, "node.kubelet.evictionHard", "<"))
    _either(c, "cluster_dns", "networking.dnsServiceIP", "node.kubelet.dnsServiceIP")
    c.set("node_ip", c.text("node.kubelet.nodeIP"))


def _pairs(c, path, separator):
    mapping = c.get(path, dict)
    return _pairs_of(c, path, mapping, separator) if mapping else None


def _pairs_of(c, path, mapping, separator):
    """{"a": "b"} as "a=b,…" in the JSON's order; what a one-line list cannot hold is a problem."""
    c.whole.add(path)
    items = []
    for key, value in mapping.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or any(ch in f"{key}{value}" for ch in ",\n#") or separator in key:
            c.problem(f"{path}.{key}", value,
                      f"a text value; neither name nor value may contain ',' '#' or '{separator}'")
            continue
        items.append(f"{key.strip()}{separator}{value.strip()}")
    return ",".join(items)
