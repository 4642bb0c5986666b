"""The Azure REST spec files the contract tests check the emulator's ARM answers against
(paths in $AZURE_REST_SPECS, the public Azure/azure-rest-api-specs repository; tests/contract/swagger.py)
and the ARM paths they call. Shared by tests/contract/test_arm_contract.py and
test_arm_throttling_contract.py."""

from tests.emulator import constants as C

HC_2026 = "hybridcompute/resource-manager/Microsoft.HybridCompute/HybridCompute/stable/2026-07-15/openapi.json"
HC_2022 = "hybridcompute/resource-manager/Microsoft.HybridCompute/stable/2022-12-27/HybridCompute.json"
AUTH_RA = "authorization/resource-manager/Microsoft.Authorization/stable/2022-04-01/authorization-RoleAssignmentsCalls.json"
AUTH_RD = "authorization/resource-manager/Microsoft.Authorization/stable/2022-04-01/authorization-RoleDefinitionsCalls.json"
AKS_2026 = "containerservice/resource-manager/Microsoft.ContainerService/aks/stable/2026-08-01/managedClusters.json"
AKS_2022 = "containerservice/resource-manager/Microsoft.ContainerService/aks/stable/2022-11-01/managedClusters.json"
EXAMPLES_RA = "authorization/resource-manager/Microsoft.Authorization/stable/2022-04-01/examples"
RG_PATH = f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.CLUSTER_RG}"
ROLE_ID = f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/Microsoft.Authorization/roleDefinitions/{{}}"


def machine_path(name):
    return f"{RG_PATH}/providers/Microsoft.HybridCompute/machines/{name}"
