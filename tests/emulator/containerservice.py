"""Microsoft.ContainerService/managedClusters: GET, the two credential listings and
rotateClusterCertificates (cluster_pki.py) (agentPools/... are agentpools.py's).

Bodies follow ManagedClustersGet.json and ManagedClustersListClusterAdminCredentials.json
(2026-08-01). A credential `value` is a base64 kubeconfig (`format: byte` in the spec's
CredentialResult) whose server is this cluster's kube-apiserver stand-in and whose CA is the
cluster's (the emulator CA until a rotation). The user
credential carries an exec/kubelogin user and no secret; the admin one a client certificate.
"""

import base64
import json
import secrets

from tests.emulator import agentpools, arm, clock, cluster_pki
from tests.emulator import constants as c
from tests.emulator.httpbase import Response

TYPE = "Microsoft.ContainerService/managedClusters"
_CS = TYPE


def render(state, cl):
    version = cl["kubernetes_version"]
    return {
        "id": cl["id"],
        "location": cl["location"],
        "name": cl["name"],
        "type": "Microsoft.ContainerService/ManagedClusters",
        "tags": {},
        "sku": {"name": "Base", "tier": "Free"},
        "identity": {"type": "SystemAssigned", "principalId": cl["identity_principal_id"], "tenantId": c.TENANT_ID},
        "properties": {
            "provisioningState": "Succeeded",
            "powerState": {"code": "Running"},
            "kubernetesVersion": version,
            "currentKubernetesVersion": version,
            "dnsPrefix": cl["dns_prefix"],
            "fqdn": cl["fqdn"],
            "azurePortalFQDN": cl["fqdn"].replace(".hcp.", ".portal.hcp."),
            "agentPoolProfiles": [{"name": pool["name"], **agentpools.pool_properties(state, pool)}
                                  for pool in state.agent_pools_of(cl["id"])],
            "nodeResourceGroup": f"MC_{cl['resource_group']}_{cl['name']}_{cl['location']}",
            "enableRBAC": True,
            "aadProfile": {"managed": True, "enableAzureRBAC": cl["azure_rbac"], "tenantID": c.TENANT_ID,
                           "adminGroupObjectIDs": []},
            "disableLocalAccounts": not cl["local_accounts"],
            "networkProfile": {
                "networkPlugin": "azure", "podCidr": "10.244.0.0/16",
                "serviceCidr": "10.0.0.0/16", "dnsServiceIP": c.DNS_SERVICE_IP, "outboundType": "loadBalancer",
                "loadBalancerSku": "standard",
            },
            "maxAgentPools": 100,
        },
    }


def _yaml_scalar(value):
    # JSON strings are valid YAML double-quoted scalars; kubeconfigs parse either way.
    return json.dumps(value)


def user_kubeconfig(cl, server, ca_pem):
    """The clusterUser kubeconfig of an AAD cluster: exec/kubelogin, no secret (kubelogin's
    get-token arguments: Azure/kubelogin docs/book/src/concepts/aks.md)."""
    user = f"clusterUser_{cl['resource_group']}_{cl['name']}"
    args = ["get-token", "--environment", "AzurePublicCloud", "--server-id", c.AKS_SERVER_APP_ID,
            "--client-id", c.KUBELOGIN_CLIENT_ID, "--tenant-id", c.TENANT_ID, "--login", "devicecode"]
    lines = _head(cl, server, ca_pem, user) + [
        "users:",
        f"- name: {user}",
        "  user:",
        "    exec:",
        "      apiVersion: client.authentication.k8s.io/v1beta1",
        "      args:",
        *[f"      - {_yaml_scalar(a)}" for a in args],
        "      command: kubelogin",
        "      env: null",
        "      installHint: " + _yaml_scalar("kubelogin is not installed which is required to connect to "
                                             "AAD enabled cluster."),
        "      interactiveMode: IfAvailable",
        "      provideClusterInfo: false",
        "",
    ]
    return "\n".join(lines)


def admin_kubeconfig(cl, server, ca_pem, cert_pem, key_pem, token):
    user = f"clusterAdmin_{cl['resource_group']}_{cl['name']}"
    lines = _head(cl, server, ca_pem, user) + [
        "users:",
        f"- name: {user}",
        "  user:",
        f"    client-certificate-data: {base64.b64encode(cert_pem).decode()}",
        f"    client-key-data: {base64.b64encode(key_pem).decode()}",
        f"    token: {token}",
        "",
    ]
    return "\n".join(lines)


def _head(cl, server, ca_pem, user):
    return [
        "apiVersion: v1",
        "clusters:",
        "- cluster:",
        f"    certificate-authority-data: {base64.b64encode(ca_pem).decode()}",
        f"    server: {server}",
        f"  name: {cl['name']}",
        "contexts:",
        "- context:",
        f"    cluster: {cl['name']}",
        f"    user: {user}",
        f"  name: {cl['name']}",
        f"current-context: {cl['name']}",
        "kind: Config",
        "preferences: {}",
    ]


def _admin_identity(app, cl):
    """The cluster's admin client certificate and static token, minted once and kept."""
    if "admin" not in cl:
        cert_pem, key_pem = cluster_pki.ca_of(app, cl).issue("masterclient", org="system:masters", client=True)
        cl["admin"] = {"cert": cert_pem.decode(), "key": key_pem.decode(), "token": secrets.token_hex(32)}
        app.state.mark_dirty()
    return cl["admin"]


def handle(app, req, caller, sub, rg, rest):
    state = app.state
    if not rest:
        arm.authorize(state, caller, f"/subscriptions/{sub}/resourceGroups/{rg}", f"{_CS}/read")
        items = [render(state, cl) for cl in state.data["clusters"].values()
                 if cl["subscription"].lower() == sub.lower() and cl["resource_group"].lower() == rg.lower()]
        return Response.json(200, arm.paged(req, state, items))
    cid = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/{TYPE}/{rest[0]}"
    cl = state.cluster(cid)
    if len(rest) >= 2 and rest[1].lower() == "agentpools":
        return agentpools.handle(app, req, caller, rg, cid, cl, rest[2:])
    if len(rest) == 3 and rest[1].lower() == "rotateclustercertificates" and rest[2].lower() == "done":
        return Response.empty(204)  # the rotation's Location monitor: it is done
    action = {1: "read"}.get(len(rest))
    if len(rest) == 2:
        action = {"listclusterusercredential": "listClusterUserCredential/action",
                  "listclusteradmincredential": "listClusterAdminCredential/action",
                  "rotateclustercertificates": "rotateClusterCertificates/action"}.get(rest[1].lower())
    if action is None:
        arm.fail(404, "NotFound", f"No HTTP resource was found that matches the request URI '{req.path}'.")
    expected_method = "GET" if action == "read" else "POST"
    if req.method != expected_method:
        arm.fail(405, "MethodNotAllowed", f"The HTTP method '{req.method}' is not supported here; use {expected_method}.")
    arm.authorize(state, caller, cid, f"{_CS}/{action}")
    if cl is None:
        arm.fail(404, "ResourceNotFound",
                 f"The Resource '{TYPE}/{rest[0]}' under resource group '{rg}' was not found. "
                 "For more details please go to https://aka.ms/ARMResourceNotFoundFix")
    if action == "read":
        return Response.json(200, render(state, cl))
    if action.startswith("rotate"):
        # ManagedClusters_RotateClusterCertificates: an LRO done when it answers (cluster_pki.py);
        # the Location monitor answers 204 (done), as Learn's async-operations page describes.
        cluster_pki.rotate(app, cl)
        return Response.empty(202, {"Location": f"{arm.base_url(req)}{req.path}/done?api-version={req.q('api-version')}",
                                   "Retry-After": "0"})
    server = app.apiserver_url(cl["id"])
    if action.startswith("listClusterUser"):
        text = user_kubeconfig(cl, server, cluster_pki.ca_pem_of(app, cl))
        name = "clusterUser"
    else:
        if not cl["local_accounts"]:
            # Learn: https://learn.microsoft.com/azure/aks/manage-local-accounts-managed-azure-ad
            arm.fail(400, "BadRequest", "Getting static credential is not allowed because this cluster is set to "
                                        "disable local accounts.")
        admin = _admin_identity(app, cl)
        text = admin_kubeconfig(cl, server, cluster_pki.ca_pem_of(app, cl), admin["cert"].encode(), admin["key"].encode(), admin["token"])
        name = "clusterAdmin"
    cl.setdefault("credential_listings", []).append({"kind": name, "by": caller.principal_id, "at": clock.now()})
    state.mark_dirty()
    return Response.json(200, {"kubeconfigs": [{"name": name, "value": base64.b64encode(text.encode()).decode()}]})


def list_for_subscription(app, req, caller, sub):
    state = app.state
    arm.authorize(state, caller, f"/subscriptions/{sub}", f"{_CS}/read")
    items = [render(state, cl) for cl in state.data["clusters"].values() if cl["subscription"].lower() == sub.lower()]
    return Response.json(200, arm.paged(req, state, items))
