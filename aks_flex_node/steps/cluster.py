"""Facts about the target cluster in Arc mode: where it is, which Kubernetes it runs, its API
server (the TLS bootstrap modes' cluster and credentials phases: steps/agentpool.py)."""

import concurrent.futures

from aks_flex_node.engine.step import CREDENTIALS, Plan, Step
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.steps import cloud_reads
from aks_flex_node.steps.agentpool import CLUSTER_HELP, CREDENTIALS_HELP
from aks_flex_node.steps.arc import ArcModeOnly


class ClusterStep(ArcModeOnly, Step):
    name = "cluster"
    help = CLUSTER_HELP
    branch = CREDENTIALS
    needs = ("preflight",)
    full_pass_only = True

    def prefetch(self, ctx):
        cloud_reads.start_cluster(ctx)

    def check(self, ctx):
        cfg = ctx.config
        if cloud_reads.started(ctx, cloud_reads.CLUSTER):
            # The run's shared read (steps/cloud_reads.py) asked for all three at once, with
            # the Arc machine: the errors in the order they were raised before.
            cluster = cloud_reads.cluster(ctx)
            cloud_reads.permissions(ctx)
            ctx.data.user_credential = cloud_reads.user_credential(ctx)
        else:
            cluster = self._read(ctx, cfg)
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

    @staticmethod
    def _read(ctx, cfg):
        """The cluster, the permissions and the user credential, read here (a --sequential run,
        or the phase's check on its own)."""
        from aks_flex_node.azure import aks, auth, permissions

        clients = ctx.azure.clients
        if cfg.auth_method != "azure-cli":
            # The operator's token first: two reads at once would each ask Entra for one.
            # (The Azure CLI credential keeps no token: each client runs `az` once anyway.)
            auth.arm_token(ctx.azure.credential, cfg.endpoints.arm_scope)
        # Every host change waits for this step (steps/workflow.py): a missing permission
        # fails here, before the host or Azure is touched. The permission reads go at the
        # same time as the cluster's: they are most of a converged run's waiting on ARM.
        # So does the user credential: its server and CA are cloud values checked before
        # anything is written (a bad one is refused with the host untouched).
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            granted = pool.submit(permissions.require_join_permissions, clients, cfg.cluster,
                                  cfg.subscription_id, cfg.arc_resource_group)
            credential = pool.submit(aks.server_and_ca, clients, cfg.cluster)
            cluster = aks.get_cluster(clients, cfg.cluster)  # its error first, as before
            granted.result()
            ctx.data.user_credential = credential.result()
        return cluster


class CredentialsStep(ArcModeOnly, Step):
    name = "credentials"
    help = CREDENTIALS_HELP
    branch = CREDENTIALS
    needs = ("cluster",)
    full_pass_only = True

    def check(self, ctx):
        from aks_flex_node.azure import aks

        # Read by the cluster phase with the cluster; alone (--phase credentials) read here.
        server, ca_pem = ctx.data.user_credential or aks.server_and_ca(ctx.azure.clients, ctx.config.cluster)
        ctx.data.server, ctx.data.ca_pem = server, ca_pem
        return Plan(noop_reason=f"API server {server}")
