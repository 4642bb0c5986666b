"""Profiles: the emulator's starting world, and the settings tests may change at runtime.

A profile is the initial directory (principals, each with a role on every subscription
and/or `assignments` [(scope, role guid)]), subscriptions, resource groups, clusters (with
their agent pools) and settings. `POST /_emulator/reset` goes back to the profile's initial world.
"""

import copy

from tests.emulator import constants as c
from tests.emulator import wan

# Every runtime setting, its default and its type. POST /_emulator/settings accepts only these.
SETTINGS = {
    # Seconds after a role assignment is created before the kube-apiserver stand-in honours it
    # (Learn RBAC troubleshooting: "up to 10 minutes" in Azure; 1 s keeps tests fast but non-zero).
    "rbac_propagation_delay": (1.0, float),
    # "on": the bootstrap group may get Nodes, as kubeadm's kubeadm:get-nodes ClusterRole lets
    # system:bootstrappers (kubeadm join asks whether its Node name is taken) and upstream's
    # kubeadm e2e binds it to system:bootstrappers:aks-flex-node (Azure/AKSFlexNode,
    # hack/e2e/lib/node-join-kubeadm.sh); "off": AKS's
    # bootstrap tokens, CSR creation only (kubeauth.py).
    "bootstrap_get_nodes": ("off", str),
    # Seconds after a principal is created during which a role assignment without
    # principalType=ServicePrincipal fails with PrincipalNotFound (Learn RBAC troubleshooting:
    # https://learn.microsoft.com/azure/role-based-access-control/troubleshooting).
    "principal_replication_delay": (10.0, float),
    # Seconds before a new Arc machine's identity.principalId shows in GET (upstream polls for it).
    "arc_identity_delay": (0.0, float),
    # Lifetimes of the tokens the emulator mints.
    "arm_token_lifetime": (3599, int),
    "himds_token_lifetime": (3600, int),
    # Seconds a HIMDS challenge key stays valid (~60 s is a reported figure; Learn documents
    # no lifetime: unverified).
    "himds_key_ttl": (60.0, float),
    # "auto": 202 + Azure-AsyncOperation for api-versions >= 2025 (hybridcompute 10.x
    # begin_delete), 200 before (9.x/8.x delete); "204": always 204, which both accept.
    "machine_delete_mode": ("auto", str),
    # Seconds an accepted machine DELETE stays InProgress before it succeeds.
    "lro_delay": (0.0, float),
    # Retry-After on the 202 of a DELETE; None leaves it out, so clients poll at their own
    # polling_interval (azure-core's azure/core/polling/base_polling.py).
    "lro_retry_after": (None, int),
    # Page size of list operations; a smaller value makes clients follow nextLink.
    "page_size": (100, int),
    # How a role assignment's roleDefinitionId is written back: "subscription"
    # (/subscriptions/{sub}/providers/...) or "provider" (/providers/..., as in the spec
    # examples in Azure/azure-rest-api-specs). Clients must compare by the trailing GUID.
    "role_definition_id_style": ("subscription", str),
    # Bytes per second the artifact mirror sends a body at (0: as fast as loopback goes):
    # a real mirror's or CDN's bandwidth, for tests/bench.py's big-artifact profile.
    "artifact_rate": (0, int),
    # The WAN profile (wan.py; figures and sources: README.md, "The WAN profile"): seconds of
    # round trip each request to that service waits before its answer, 0 on loopback.
    "wan_arm_rtt": (0.0, float),
    "wan_entra_rtt": (0.0, float),
    "wan_apiserver_rtt": (0.0, float),
    "wan_himds_rtt": (0.0, float),
    "wan_artifacts_rtt": (0.0, float),
    # true: each stand-in artifact costs the link (artifact_rate) what the real release file
    # would (wan.REAL_SIZES), so a download takes the real file's time; the bytes stay small.
    "artifact_real_sizes": (False, bool),
    # Seconds the rest of a real `azcmagent connect` takes after its machine PUT (installing
    # and starting himds, the first heartbeat): the Arc agent stand-in's last request waits them.
    "arc_connect_delay": (0.0, float),
    # Role assignments allowed per subscription (4,000 in Azure: Learn
    # https://learn.microsoft.com/azure/role-based-access-control/troubleshoot-limits).
    "role_assignment_limit": (4000, int),
    # ARM's subscription throttling (tests/emulator/throttling.py; Learn "Understand how Azure
    # Resource Manager throttles requests",
    # https://learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling):
    # "on" answers 429 + Retry-After once a bucket is empty; "off" only counts. Each
    # operation type's bucket size and refill per second per (subscription, principal);
    # the subscription-wide bucket is arm_global_factor times both.
    "arm_throttling": ("on", str),
    "arm_reads_bucket": (250, int),
    "arm_reads_refill": (25.0, float),
    "arm_writes_bucket": (200, int),
    "arm_writes_refill": (10.0, float),
    "arm_deletes_bucket": (200, int),
    "arm_deletes_refill": (10.0, float),
    "arm_global_factor": (15, int),
    # Seconds between rewrites of state.json: 0 rewrites it after every change (what --resume
    # tests need); the fleet simulation (tests/fleet) sets a few seconds, as rewriting a world
    # of 200 nodes on every change stalls every answer behind the lock.
    "state_save_interval": (0.0, float),
    # Agent pools (agentpools.py). Lifetime in seconds of the bootstrap token each
    # listBootstrapData call mints: the RP's real TTL is undocumented; 24 h is what upstream's
    # self-minted tokens get (Azure/AKSFlexNode scripts/aks-flex-config). 0 mints expired tokens.
    "bootstrap_token_ttl": (86400.0, float),
    # Lifetime in seconds of the certificates the kube-apiserver stand-in signs for CSRs
    # (kube-controller-manager --cluster-signing-duration, default 8760h). Read by apiserver.py.
    "csr_signing_duration": (31536000.0, float),
    # Whether the stand-in approves kubelet client CSRs by itself (the csrapproving controller
    # of kube-controller-manager does in AKS). Read by apiserver.py.
    "csr_auto_approve": (True, bool),
    # Seconds a Machine PUT or a deleteMachines stays InProgress before it succeeds (AKS
    # documents no figure; > 0 makes clients poll the Azure-AsyncOperation URL).
    "machine_operation_delay": (0.5, float),
    # The RP's drain of a Node (a pool upgrade or rollback, deleteMachines), in seconds of the
    # emulator's clock: evictions a PodDisruptionBudget refuses are retried until then, and the
    # operation fails after. The spec's AgentPoolUpgradeSettings.drainTimeoutInMinutes: "If this
    # time is exceeded, the upgrade fails. If not specified, the default is 30 minutes."
    "pool_drain_timeout": (1800.0, float),
    # How long a pool upgrade or rollback waits for a Machine's Node to come back Ready at the
    # wanted version after the RP deleted it (emulator clock); then the operation fails, naming
    # the Machine. AKS documents no figure (assumption).
    "pool_node_timeout": (600.0, float),
    # The RP's fallback cleanup (pool_operations.py): a Node tainted for deletion whose Machine
    # is gone is deleted once no status write has reached it for this long (emulator clock).
    # Upstream says only "delayed enough to avoid racing a healthy but slow agent" (assumption).
    "stale_node_grace": (600.0, float),
    # What listBootstrapData gives as node.kubelet.clusterFQDN: "host-port" is 127.0.0.1:<port>
    # of the cluster's kube-apiserver stand-in (reachable; the spec's field is a plain string);
    # "fqdn" is the cluster's properties.fqdn, host only, as AKS gives it (unreachable here).
    "apiserver_fqdn_mode": ("host-port", str),
    # Resource-provider namespaces not registered on the subscription: requests to them get
    # 409 MissingSubscriptionRegistration (what azure-mgmt-core's auto-registration policy handles).
    "unregistered_providers": ([], list),
}

_CHOICES = {
    "machine_delete_mode": ("auto", "204"),
    "role_definition_id_style": ("subscription", "provider"),
    "arm_throttling": ("on", "off"),
    "apiserver_fqdn_mode": ("host-port", "fqdn"),
}


class SettingsError(ValueError):
    pass


def validate_settings(changes):
    """Check a settings update; returns the normalised values or raises SettingsError naming each problem."""
    if not isinstance(changes, dict):
        raise SettingsError(f"settings: expected a JSON object, got {type(changes).__name__}")
    out, problems = {}, []
    for key, value in changes.items():
        if key not in SETTINGS:
            problems.append(f"{key}: unknown setting; expected one of {', '.join(sorted(SETTINGS))}")
            continue
        default, kind = SETTINGS[key]
        if value is None and default is None:
            out[key] = None
        elif kind is bool and isinstance(value, bool):
            out[key] = value
        elif kind is float and isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            out[key] = float(value)
        elif kind is int and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out[key] = value
        elif kind is str and isinstance(value, str) and value in _CHOICES.get(key, (value,)):
            out[key] = value
        elif kind is list and isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = [v.lower() for v in value]
        else:
            if kind is bool:
                expected = "true or false"
            elif kind is str:
                expected = "one of " + ", ".join(repr(v) for v in _CHOICES[key])
            elif kind is list:
                expected = "a list of strings"
            else:
                expected = f"a non-negative {'number' if kind is float else 'integer'}"
                if default is None:
                    expected += " or null"
            problems.append(f"{key} = {value!r}: expected {expected}")
    if problems:
        raise SettingsError("; ".join(problems))
    return out


def default_settings():
    return {k: copy.deepcopy(v[0]) for k, v in SETTINGS.items()}


def _cluster(sub, rg, name, version, *, azure_rbac=True, local_accounts=True, agent_pools=None):
    return {
        "subscription": sub,
        "resource_group": rg,
        "name": name,
        "location": c.LOCATION,
        "kubernetes_version": version,
        "azure_rbac": azure_rbac,
        "local_accounts": local_accounts,
        "agent_pools": agent_pools,  # None: the system pool only (state.add_cluster)
    }


# Test data, not AKS defaults: the flex pool's node settings that listBootstrapData hands out
# (maxPods, label and taint are the values of the spec example AgentPoolsListBootstrapData.json,
# 2026-05-02-preview), so a test can see them reach the kubelet.
FLEX_POOL = {"name": c.FLEX_POOL, "type": "FlexNodes", "mode": "User", "max_pods": 110,
             "labels": {"node-role": "edge"}, "taints": ["aks.azure.com/flex-node=true:NoSchedule"]}


def _default_world():
    return {
        "subscriptions": [c.SUBSCRIPTION_ID],
        "resource_groups": [
            (c.SUBSCRIPTION_ID, c.CLUSTER_RG),
            (c.SUBSCRIPTION_ID, c.CLUSTER2_RG),
            (c.SUBSCRIPTION_ID, c.ARC_RG),
        ],
        "principals": [
            {"object_id": c.SP_OBJECT_ID, "client_id": c.SP_CLIENT_ID, "secret": c.SP_CLIENT_SECRET,
             "display_name": "aks-flex-node-operator", "role": c.ROLE_OWNER},
            {"object_id": c.READER_SP_OBJECT_ID, "client_id": c.READER_SP_CLIENT_ID,
             "secret": c.READER_SP_CLIENT_SECRET, "display_name": "aks-flex-node-reader", "role": c.ROLE_READER},
            {"object_id": c.CERT_SP_OBJECT_ID, "client_id": c.CERT_SP_CLIENT_ID, "certificate": True,
             "display_name": "aks-flex-node-operator-cert", "role": c.ROLE_OWNER},
            # The agent-pool node's identity: no subscription role, only the pool-scoped one.
            {"object_id": c.NODE_SP_OBJECT_ID, "client_id": c.NODE_SP_CLIENT_ID, "secret": c.NODE_SP_CLIENT_SECRET,
             "display_name": "aks-flex-node-agent", "role": None,
             "assignments": [(c.FLEX_POOL_ID, c.ROLE_AKS_FLEX_NODE_AGENT)]},
        ],
        "clusters": [
            _cluster(c.SUBSCRIPTION_ID, c.CLUSTER_RG, c.CLUSTER_NAME, c.K8S_VERSION,
                     agent_pools=[{"name": c.SYSTEM_POOL}, dict(FLEX_POOL)]),
            _cluster(c.SUBSCRIPTION_ID, c.CLUSTER2_RG, c.CLUSTER2_NAME, c.CLUSTER2_K8S_VERSION),
        ],
        "settings": {},
    }


def _slow_propagation():
    world = _default_world()
    world["settings"] = {"rbac_propagation_delay": 5.0, "arc_identity_delay": 3.0, "principal_replication_delay": 30.0}
    return world


def _wan():
    world = _default_world()
    world["settings"] = dict(wan.BENCH)
    return world


def _no_azure_rbac():
    world = _default_world()
    world["clusters"][0]["azure_rbac"] = False
    return world


def _local_accounts_disabled():
    world = _default_world()
    world["clusters"][0]["local_accounts"] = False
    return world


def _unregistered_providers():
    world = _default_world()
    world["settings"] = {"unregistered_providers": ["microsoft.hybridcompute"]}
    return world


PROFILES = {
    "default": _default_world,
    # RBAC and Arc identity that take a while to show up, as in real Azure.
    "slow-propagation": _slow_propagation,
    # The bench's WAN profile (wan.BENCH): real round trips, bandwidth and sizes, RBAC
    # propagation and Arc connect time.
    "wan": _wan,
    # The first cluster lacks Azure RBAC (aadProfile.enableAzureRBAC=false): joining must be refused.
    "no-azure-rbac": _no_azure_rbac,
    # The first cluster disables local accounts: listClusterAdminCredential answers 400.
    "local-accounts-disabled": _local_accounts_disabled,
    # Microsoft.HybridCompute is not registered: the SDK's auto-registration policy kicks in.
    "unregistered-providers": _unregistered_providers,
}


def world(profile):
    if profile not in PROFILES:
        raise SettingsError(f"--profile {profile!r}: unknown profile; expected one of {', '.join(sorted(PROFILES))}")
    return PROFILES[profile]()
