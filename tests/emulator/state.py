"""The emulator's world: one JSON-serialisable dict behind one lock, mirrored to state.json.

Every handler reads and changes `state.data` while holding `state.lock`; `mark_dirty()` makes
the request loop write DIR/state.json (mode 0600: it holds tokens) before it answers, so a
restarted emulator (`--resume`) finds exactly what the clients last saw.
"""

import datetime
import hashlib
import json
import os
import secrets
import threading
import time
import uuid

from tests.emulator import clock, constants as c
from tests.emulator import profiles, throttling

STATE_FILE = "state.json"
MAX_LOGGED_REQUESTS = 2000  # the oldest entries go first


def iso(ts):
    """RFC 3339 UTC timestamp with microseconds, as ARM writes them."""
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_seconds(ts):
    """RFC 3339 UTC timestamp to the second, as Kubernetes writes them."""
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stable_guid(*parts):
    """A GUID derived from its inputs, so generated fields stay the same across restarts."""
    return str(uuid.UUID(hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]))


def cluster_id(sub, rg, name):
    return f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerService/managedClusters/{name}"


def rg_id(sub, rg):
    return f"/subscriptions/{sub}/resourceGroups/{rg}"


class State:
    def __init__(self, state_dir, profile):
        self.path = os.path.join(state_dir, STATE_FILE)
        self.profile = profile
        self.lock = threading.RLock()
        self.dirty = False
        self.data = {}
        self.arm_calls = []  # throttling's ledger: in memory only (it can be large)
        self._saved_at = 0.0
        self.reset(keep_tokens=False)

    # -- persistence -----------------------------------------------------------------

    def mark_dirty(self):
        self.dirty = True

    def save(self):
        """Write state.json atomically (temp file + rename), owner-only. Under the lock, so
        that an older snapshot can never land after a newer one."""
        with self.lock:
            tmp = f"{self.path}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(self.data, f, sort_keys=True)
            os.replace(tmp, self.path)
            self.dirty = False
            self._saved_at = time.monotonic()

    def save_if_dirty(self):
        """Save a changed world, at most every `state_save_interval` seconds (0: after every
        change; the emulator's stop() saves whatever is left)."""
        with self.lock:
            interval = self.data["settings"].get("state_save_interval", 0)
            if self.dirty and (not interval or time.monotonic() - self._saved_at >= interval):
                self.save()

    def load(self):
        with open(self.path) as f:
            data = json.load(f)
        with self.lock:
            self.data = data
            self.profile = data.get("profile", self.profile)
            # Settings added since the file was written get their defaults.
            for key, value in profiles.default_settings().items():
                self.data["settings"].setdefault(key, value)
            self.data.setdefault("throttling", throttling.new_world())
            for key in ("agent_pools", "agentpool_machines", "agentpool_operations", "pool_operations",
                        "bootstrap_tokens", "kube_objects"):
                self.data.setdefault(key, {})
            for pool in self.data["agent_pools"].values():  # a world saved before pools had versions
                version = self.data["clusters"][pool["cluster_id"].lower()]["kubernetes_version"]
                pool.setdefault("orchestrator_version", version)
                pool.setdefault("current_orchestrator_version", pool["orchestrator_version"])
                pool.setdefault("last_upgrade", None)

    def forget_himds_keys(self):
        """Delete outstanding HIMDS challenge key files: secrets on disk, not to be left behind."""
        with self.lock:
            keys = self.data.get("himds", {}).get("keys", {})
            for info in keys.values():
                try:
                    os.unlink(info["path"])
                except FileNotFoundError:
                    pass
            keys.clear()

    # -- the profile's initial world ---------------------------------------------------

    def reset(self, keep_tokens=True):
        """Back to the profile's initial world. Issued tokens survive (they are the
        directory's, not the resources'), as do the listening ports."""
        world = profiles.world(self.profile)
        with self.lock:
            self.forget_himds_keys()
            old = self.data
            now = clock.now()
            settings = profiles.default_settings()
            settings.update(profiles.validate_settings(world["settings"]))
            data = {
                "version": 1,
                "profile": self.profile,
                "tenant_id": c.TENANT_ID,
                "settings": settings,
                "subscriptions": {s.lower(): {"id": s} for s in world["subscriptions"]},
                "resource_groups": {},
                "providers": {},
                "principals": {},
                "machines": {},
                "clusters": {},
                "role_assignments": {},
                "nodes": {},
                # Agent pools (agentpools.py): pools by pool id (lower), their Machines by pool id
                # (lower) then name, the Machine operations by id, the pool upgrades and rollbacks
                # (pool_operations.py) by id, and the bootstrap tokens listBootstrapData minted, by
                # cluster id (lower) then token id.
                "agent_pools": {},
                "agentpool_machines": {},
                "agentpool_operations": {},
                "pool_operations": {},
                "bootstrap_tokens": {},
                # Namespaced Kubernetes objects of the apiserver stand-in (pods, poddisruptionbudgets,
                # daemonsets, events) by cluster id (lower), resource, then "namespace/name".
                "kube_objects": {},
                "tokens": old.get("tokens", {}) if keep_tokens else {},
                "himds": {"bound_machine": None, "keys": {}, "challenges": 0, "tokens_issued": 0},
                "operations": {},
                "requests": [],
                "artifact_downloads": [],
                "faults": [],
                "fault_hits": 0,
                "ports": old.get("ports", {}),
                "apiserver_ports": old.get("apiserver_ports", {}),
                "resource_version": 1,
            }
            self.data = data
            throttling.reset(self)
            for sub, rg in world["resource_groups"]:
                self.add_resource_group(sub, rg)
            for p in world["principals"]:
                self.add_principal(
                    p["object_id"], kind="ServicePrincipal", client_id=p["client_id"],
                    secret=p.get("secret"), certificate=p.get("certificate", False),
                    display_name=p["display_name"], created=now - 86400,
                )
                # A role on every subscription (names as before), then any scoped assignments.
                seeds = [(f"/subscriptions/{sub}", p["role"], sub) for sub in world["subscriptions"] if p.get("role")]
                seeds += [(scope, role, scope) for scope, role in p.get("assignments", ())]
                for scope, role, seed in seeds:
                    self.add_role_assignment(
                        scope, role, p["object_id"], "ServicePrincipal",
                        created=now - 86400, name=stable_guid("seed", seed, p["object_id"], role),
                    )
            for cl in world["clusters"]:
                self.add_cluster(**cl)
            self.mark_dirty()

    # -- building blocks used by handlers and the admin API ---------------------------

    @property
    def settings(self):
        return self.data["settings"]

    def add_resource_group(self, sub, rg, location=c.LOCATION):
        rid = rg_id(sub, rg)
        self.data["resource_groups"].setdefault(rid.lower(), {"id": rid, "name": rg, "location": location})
        self.mark_dirty()
        return rid

    def add_principal(self, object_id, *, kind, client_id=None, secret=None, certificate=False,
                      display_name="", created=None):
        self.data["principals"][object_id.lower()] = {
            "object_id": object_id,
            "kind": kind,
            "client_id": client_id or object_id,
            "secret": secret,
            "certificate": certificate,
            "display_name": display_name,
            "created": clock.now() if created is None else created,
        }
        self.mark_dirty()

    def principal(self, object_id):
        return self.data["principals"].get((object_id or "").lower())

    def principal_by_client_id(self, client_id):
        for p in self.data["principals"].values():
            if p["client_id"].lower() == (client_id or "").lower() and p["kind"] == "ServicePrincipal":
                return p
        return None

    def add_cluster(self, *, subscription, resource_group, name, location=c.LOCATION,
                    kubernetes_version=c.K8S_VERSION, azure_rbac=True, local_accounts=True, agent_pools=None):
        cid = cluster_id(subscription, resource_group, name)
        self.add_resource_group(subscription, resource_group, location)
        suffix = hashlib.sha256(cid.lower().encode()).hexdigest()[:8]
        self.data["clusters"][cid.lower()] = {
            "id": cid,
            "subscription": subscription,
            "resource_group": resource_group,
            "name": name,
            "location": location,
            "kubernetes_version": kubernetes_version,
            "azure_rbac": bool(azure_rbac),
            "local_accounts": bool(local_accounts),
            "dns_prefix": f"{name}-dns",
            "fqdn": f"{name}-dns-{suffix}.hcp.{location}.azmk8s.io",
            "identity_principal_id": stable_guid("cluster-identity", cid.lower()),
        }
        self.data["nodes"].setdefault(cid.lower(), {})
        for pool in agent_pools or [{"name": c.SYSTEM_POOL}]:
            self.add_agent_pool(cid, **pool)
        self.mark_dirty()
        return self.data["clusters"][cid.lower()]

    def add_agent_pool(self, cluster_id, *, name, type="VirtualMachineScaleSets", mode=None, max_pods=110,
                       labels=None, taints=None):
        """An agent pool of an existing cluster; the record agentpools.py renders. Orchestrator
        version: the cluster's at creation, the pool's own from then on (a control-plane-only
        upgrade leaves it; a pool upgrade, pool_operations.py, moves it). A VMSS pool is the
        System pool, any other a User pool, unless `mode` says otherwise."""
        cl = self.cluster(cluster_id)
        pid = f"{cl['id']}/agentPools/{name}"
        self.data["agent_pools"][pid.lower()] = {
            "id": pid,
            "name": name,
            "cluster_id": cl["id"],
            "type": type,
            "orchestrator_version": cl["kubernetes_version"],
            # What the pool runs: the wanted version once an upgrade or rollback has finished.
            "current_orchestrator_version": cl["kubernetes_version"],
            # The last upgrade, what a rollback restores (pool_operations.py): None, or
            # {"operation", "version" (the pool's before it), "specs" (each Machine's spec
            # before it was written), "ended", "rolled_back"}.
            "last_upgrade": None,
            "mode": mode or ("System" if type == "VirtualMachineScaleSets" else "User"),
            "max_pods": max_pods,
            "labels": dict(labels or {}),
            "taints": list(taints or []),
            "etag": stable_guid("agent-pool", pid.lower()),
        }
        self.data["agentpool_machines"].setdefault(pid.lower(), {})
        self.mark_dirty()
        return self.data["agent_pools"][pid.lower()]

    def agent_pools_of(self, cluster_id):
        prefix = f"{cluster_id.lower()}/agentpools/"
        return [p for key, p in self.data["agent_pools"].items() if key.startswith(prefix)]

    def cluster(self, cid):
        return self.data["clusters"].get((cid or "").lower())

    def add_role_assignment(self, scope, role_guid, principal_id, principal_type, *, name=None,
                            created=None, created_by=None, description=None, role_definition_id=None):
        now = clock.now() if created is None else created
        name = name or str(uuid.uuid4())
        scope = scope.rstrip("/") or "/"
        record = {
            "name": name,
            "scope": scope,
            "role_guid": role_guid.lower(),
            # As the client sent it; responses are rendered per the role_definition_id_style setting.
            "role_definition_id": role_definition_id,
            "principal_id": principal_id,
            "principal_type": principal_type,
            "created": now,
            "updated": now,
            "created_by": created_by,
            "description": description,
        }
        self.data["role_assignments"][name.lower()] = record
        self.mark_dirty()
        return record

    def kube_objects(self, cluster_id, resource):
        """The apiserver stand-in's `resource` objects of a cluster, by "namespace/name"."""
        return self.data["kube_objects"].setdefault(cluster_id.lower(), {}).setdefault(resource, {})

    def next_resource_version(self):
        self.data["resource_version"] += 1
        self.mark_dirty()
        return str(self.data["resource_version"])

    # -- tokens ---------------------------------------------------------------------------

    def mint_token(self, principal_id, audience, lifetime, source):
        token = c.TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = clock.now()
        self.data["tokens"][token] = {
            "principal": principal_id,
            "audience": audience,
            "issued": now,
            "expires_on": int(now + lifetime),
            "source": source,
        }
        self.mark_dirty()
        return token, self.data["tokens"][token]

    def lookup_token(self, token):
        return self.data["tokens"].get(token)

    # -- request log --------------------------------------------------------------------

    def log_request(self, entry):
        with self.lock:
            log = self.data["requests"]
            log.append(entry)
            if len(log) > MAX_LOGGED_REQUESTS:
                del log[: len(log) - MAX_LOGGED_REQUESTS]
