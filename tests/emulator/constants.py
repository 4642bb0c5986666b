"""Well-known identities and names the emulator serves and tests use.

Fixed values, so a failing test prints the same IDs every run. None of these exist in
real Azure: the GUIDs were generated once for this emulator. The role-definition GUIDs
and the AKS server application ID are the real, documented ones (sources inline).
"""

TENANT_ID = "0dad6e24-3327-44c9-8b75-3f34d6f1e6fb"
SUBSCRIPTION_ID = "93d23ebe-48c7-432a-8146-384c56a92ea6"
LOCATION = "westeurope"

# The operator service principal: Owner on the subscription (seeded by every profile).
SP_CLIENT_ID = "d0c52b35-b60e-4f23-9a86-3622ae21b893"
SP_OBJECT_ID = "9ad0cf52-70c9-4e64-95e1-99c0458a9a0a"
SP_CLIENT_SECRET = "emu-sp-secret.Q8v~kT2rLw9XbN4pZc7HdJ"  # test-only; shaped like an Entra secret

# A second principal that is only Reader on the subscription: for "permission denied" tests.
READER_SP_CLIENT_ID = "498162ba-cb15-4a58-94d3-93598164b8d0"
READER_SP_OBJECT_ID = "507c5509-f095-4f96-9061-1e668d707144"
READER_SP_CLIENT_SECRET = "emu-reader-secret.M3n~Yq7sVb1KfT6wRx0GhP"

# A principal registered with a certificate (client_assertion), Owner on the subscription.
# The emulator accepts any well-formed JWT assertion for it (no signature check).
CERT_SP_CLIENT_ID = "83e09469-b5e6-4eef-a6b5-9c8f3e2297ac"
CERT_SP_OBJECT_ID = "4436b3bd-1348-45fe-aa0b-9c44e8cb1215"

# The agent-pool node's own service principal (join_mode = agent-pool): its ONLY role
# assignment is the Flex Node Agent Role at {CLUSTER_ID}/agentPools/{FLEX_POOL} (profiles.py),
# as upstream's operator guide prescribes (Azure/AKSFlexNode docs/usage/getting-started.md,
# "Assign the host identity's pool-scoped role").
NODE_SP_CLIENT_ID = "ff57654a-4390-4274-9ec2-f99b3bb3b706"
NODE_SP_OBJECT_ID = "3edc37a8-542d-43cb-85ac-70b9fd00b330"
NODE_SP_CLIENT_SECRET = "emu-node-secret.bwY672zLjMqqD3WlNt5ftY"

K8S_VERSION = "1.30.4"

CLUSTER_RG = "rg-aks"
CLUSTER_NAME = "aks-one"
CLUSTER_ID = (
    f"/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{CLUSTER_RG}"
    f"/providers/Microsoft.ContainerService/managedClusters/{CLUSTER_NAME}"
)

# A second cluster (same subscription, other resource group, newer Kubernetes) for
# "leave one cluster, join another" tests.
CLUSTER2_RG = "rg-aks-two"
CLUSTER2_NAME = "aks-two"
CLUSTER2_K8S_VERSION = "1.31.2"
CLUSTER2_ID = (
    f"/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{CLUSTER2_RG}"
    f"/providers/Microsoft.ContainerService/managedClusters/{CLUSTER2_NAME}"
)

# Agent pools of CLUSTER_ID (agentpools.py): FLEX_POOL has properties.type FlexNodes (the
# preview 2026-05-02-preview AgentPoolType value for BYO machines); SYSTEM_POOL is the VMSS
# system pool every cluster has. Names follow the spec's agentPoolName ^[a-z][a-z0-9]{0,11}$.
FLEX_POOL = "flexpool"
SYSTEM_POOL = "nodepool1"
FLEX_POOL_ID = f"{CLUSTER_ID}/agentPools/{FLEX_POOL}"
# The cluster's networkProfile.dnsServiceIP (the AKS default), also served by listBootstrapData.
DNS_SERVICE_IP = "10.0.0.10"

# A resource group with no cluster, for Arc machines kept apart from the cluster.
ARC_RG = "rg-arc"

# ARM audience and scope: the azure-mgmt-* clients' default credential_scopes (their
# _configuration.py in Azure/azure-sdk-for-python), the same even with a custom base_url.
ARM_AUDIENCE = "https://management.azure.com"
ARM_SCOPE = "https://management.azure.com/.default"

# AKS AAD server application ID, "the same in all environments" (Azure/kubelogin
# docs/book/src/concepts/aks.md).
AKS_SERVER_APP_ID = "6dae42f8-4368-4678-94ff-3960e28e3630"
# The public client kubelogin uses (same page).
KUBELOGIN_CLIENT_ID = "80faf920-1908-4b52-b5ef-a8e7bedfc67a"

# Built-in role definition GUIDs (Learn "Azure built-in roles":
# https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/general, .../containers,
# .../hybrid-multicloud; Owner, Contributor and User Access Administrator: .../privileged).
ROLE_OWNER = "8e3af657-a8ff-443c-a75f-2beee8dd80d6"
ROLE_CONTRIBUTOR = "b24988ac-6180-42a0-ab88-20f7382dd24c"
ROLE_USER_ACCESS_ADMIN = "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9"
ROLE_READER = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
ROLE_AKS_RBAC_CLUSTER_ADMIN = "b1ff04bb-8a4e-4dc4-8eb5-8693973ce19b"
ROLE_AKS_CLUSTER_ADMIN = "0ab0b1a8-8aac-4efd-b8c2-3ee1fb270be8"
ROLE_AKS_CLUSTER_USER = "4abbcc35-e782-43d8-92c5-2d3f1bd2253f"
ROLE_CONNECTED_MACHINE_ONBOARDING = "b64e21ea-ac4e-4cdf-9dc9-5b892992bee7"
# Azure/AKSFlexNode docs/usage/getting-started.md ("Assign the host identity's pool-scoped
# role"): "Azure Kubernetes Service Flex Node Agent Role", assigned at an agent-pool scope.
ROLE_AKS_FLEX_NODE_AGENT = "8f139b0f-7eaf-460b-a9da-5b1246d9ed0d"

# Roles that let a principal use the kube-apiserver stand-in (its Azure RBAC check): the only
# built-in we model with managedClusters/* DataActions. The Flex Node Agent Role has no
# DataActions, so it gives no Kubernetes access (same upstream page).
APISERVER_ROLES = (ROLE_AKS_RBAC_CLUSTER_ADMIN,)

# api-versions of interest: each SDK release's default (its _configuration.py in
# Azure/azure-sdk-for-python; for Debian 12, the copies in python3-azure 20230112+git-1).
HYBRIDCOMPUTE_API_CURRENT = "2026-07-15"  # azure-mgmt-hybridcompute 10.0.0: begin_delete, 202/204
HYBRIDCOMPUTE_API_DEBIAN = "2022-08-11-preview"  # 8.0.0b1: sync delete, 200/204
AUTHORIZATION_API = "2022-04-01"
CONTAINERSERVICE_API_CURRENT = "2026-08-01"
CONTAINERSERVICE_API_DEBIAN = "2022-11-01"
# The preview api-version whose spec (Azure/azure-rest-api-specs specification/containerservice/
# resource-manager/Microsoft.ContainerService/aks/preview/2026-05-02-preview/managedClusters.json)
# has listBootstrapData, Machines_CreateOrUpdate and FlexNodes; upstream's DefaultAPIVersion
# (Azure/AKSFlexNode pkg/bootstrapdata).
AGENTPOOL_API = "2026-05-02-preview"

# Every secret the emulator mints starts with one of these, so a test can grep a log or a
# file for them to prove that no token or key leaked.
TOKEN_PREFIX = "emuat."
HIMDS_KEY_PREFIX = "emukey."

AZCMAGENT_VERSION = "1.50.02896.1234"

# Substrings that only ever occur inside a secret: grep logs and world-readable files for these.
# Bootstrap tokens (agentpools.py) cannot carry one, as their format is fixed
# (^[a-z0-9]{6}\.[a-z0-9]{16}$): grep for the minted token itself.
SECRET_MARKERS = (TOKEN_PREFIX, HIMDS_KEY_PREFIX, "emu-sp-secret.", "emu-reader-secret.", "emu-node-secret.")
