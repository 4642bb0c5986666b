"""The facts of a join, passed to every step (kubeadm's phases/join JoinData).

Each field has one owner, the step that sets it; the others read it. A full run keeps the
cloud facts in the ledger so that the agent's local passes reuse them instead of reading
ARM every minute (ARM throttles reads per subscription: "Understand how Azure Resource
Manager throttles requests", learn.microsoft.com/azure/azure-resource-manager/management/
request-limits-and-throttling).
"""

import base64
import dataclasses
from typing import Any, List, Optional, Tuple


@dataclasses.dataclass
class JoinData:
    kubernetes_version: Optional[str] = None  # owner: cluster (the config's, else the cluster's)
    arc_location: Optional[str] = None  # owner: cluster
    server: Optional[str] = None  # owner: credentials (the API server URL)
    ca_pem: Optional[bytes] = None  # owner: credentials (the cluster CA)
    # owner: cluster, in Arc mode: listClusterUserCredential's (server, CA), read and checked
    # with the cluster so that a bad answer fails before the host changes; credentials
    # publishes it as server and ca_pem
    user_credential: Optional[Tuple[str, bytes]] = dataclasses.field(default=None, repr=False)
    principal_id: Optional[str] = None  # owner: arc (the machine's managed identity)
    preflight: List[Any] = dataclasses.field(default_factory=list)  # owner: preflight
    node_token: Any = None  # the node identity's API server token, reused within a run
    # owner: preflight: its `azcmagent show -j`, read before this run changed anything; the
    # arc phase's check reuses it (one agent call per run, not two)
    azcmagent_shown: Optional[dict] = None
    # owner: cluster, in agent-pool mode: the config keys the pool's bootstrap data gives
    pool_values: Optional[dict] = None
    # owner: cluster: (values, origin): the config keys taken from pool_values (those the
    # operator left unset; labels and taints merged), checked as the file's would be;
    # Context.config lays them under the operator's configuration
    config_overlay: Optional[Tuple[dict, str]] = None
    # owner: cluster, in the TLS bootstrap modes: a secret, never persisted (the ledger
    # keeps no token: a later run that needs one asks the pool for a new one)
    bootstrap_token: Optional[str] = dataclasses.field(default=None, repr=False)
    # a per-run cache: what gpu/detect.py found on this machine (steps/gpu.py inventory)
    gpu: Any = None
    # owner: node-ready: the Node as this pass last read it, or None (its allocatable tells
    # whether the device plugin advertised the GPUs: steps/gpu.py advertising); never persisted
    node_read: Optional[dict] = dataclasses.field(default=None, repr=False)

    # What a local pass reuses from the last full run.
    PERSISTED = ("kubernetes_version", "arc_location", "server", "ca_pem", "principal_id", "pool_values")

    def snapshot(self):
        out = {}
        for key in self.PERSISTED:
            value = getattr(self, key)
            if value is not None:
                out[key] = base64.b64encode(value).decode() if key == "ca_pem" else value
        return out

    @classmethod
    def restore(cls, snapshot):
        values = {k: v for k, v in (snapshot or {}).items() if k in cls.PERSISTED}
        if values.get("ca_pem") is not None:
            values["ca_pem"] = base64.b64decode(values["ca_pem"])
        return cls(**values)
