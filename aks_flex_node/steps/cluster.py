"""Facts about the target cluster: where it is, which Kubernetes it runs, its API server."""

import concurrent.futures

from aks_flex_node.engine.step import CREDENTIALS, Plan, Step
from aks_flex_node.errors import FlexNodeError


class ClusterStep(Step):
    name = "cluster"
    help = ("read the target cluster (location, Kubernetes version, Azure RBAC) and check the operator's "
            "permissions; in agent-pool mode, the pool's bootstrap data")
    branch = CREDENTIALS
    needs = ("preflight",)
    full_pass_only = True

    def run_if(self, ctx):
        from aks_flex_node.steps.agentpool import tls_bootstrap

        if tls_bootstrap(ctx.base_config):
            return None  # a local pass, too, needs the pool's values laid over the config
        return super().run_if(ctx)

    def check(self, ctx):
        from aks_flex_node.azure import aks, permissions
        from aks_flex_node.steps import agentpool

        if agentpool.tls_bootstrap(ctx.base_config):
            return agentpool.read_join_facts(ctx)
        from aks_flex_node.azure import auth

        cfg = ctx.config
        clients = ctx.azure.clients
        if cfg.auth_method != "azure-cli":
            # The operator's token first: two reads at once would each ask Entra for one.
            # (The Azure CLI credential keeps no token: each client runs `az` once anyway.)
            auth.arm_token(ctx.azure.credential, cfg.endpoints.arm_scope)
        # Every host change waits for this step (steps/workflow.py): a missing permission
        # fails here, before the host or Azure is touched. The permission reads go at the
        # same time as the cluster's: they are most of a converged run's waiting on ARM.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            granted = pool.submit(permissions.require_join_permissions, clients, cfg.cluster,
                                  cfg.subscription_id, cfg.arc_resource_group)
            cluster = aks.get_cluster(clients, cfg.cluster)  # its error first, as before
            granted.result()
        if not cluster.azure_rbac:
            # The node authenticates with its Arc identity's Entra token; only Azure RBAC
            # for Kubernetes turns that identity's role assignments into API permissions.
            raise FlexNodeError(
                f"cluster {cfg.cluster.resource_id} does not have Azure RBAC for Kubernetes "
                "enabled, so a node's Arc identity cannot be authorized",
                remedy="enable it: az aks update --enable-azure-rbac (needs AKS-managed Entra ID)")
        version = cfg.kubernetes_version or cluster.kubernetes_version
        ctx.data.kubernetes_version = version
        ctx.data.arc_location = cfg.arc_location or cluster.location
        return Plan(noop_reason=f"cluster {cluster.name} in {cluster.location}, "
                                f"Kubernetes {version}")


class CredentialsStep(Step):
    name = "credentials"
    help = ("read the cluster's API server URL and CA (no admin credential is fetched or kept); "
            "in the TLS bootstrap modes, check the API server answers with that CA")
    branch = CREDENTIALS
    needs = ("cluster",)
    full_pass_only = True

    def check(self, ctx):
        from aks_flex_node.azure import aks
        from aks_flex_node.steps import agentpool

        if agentpool.tls_bootstrap(ctx.config):
            return agentpool.check_api_server(ctx)
        server, ca_pem = aks.server_and_ca(ctx.azure.clients, ctx.config.cluster)
        ctx.data.server, ctx.data.ca_pem = server, ca_pem
        return Plan(noop_reason=f"API server {server}")
