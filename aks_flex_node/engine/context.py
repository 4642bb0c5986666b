"""What a step gets to work with: the config, the host, the ledger, shared facts and Azure."""

import base64
import logging
import threading


class Facts:
    """Facts steps learn and share (cluster, machine identity, server URL...); thread-safe."""

    # What a full run learns from Azure that a local pass of the agent reuses, so that a
    # healthy node does not read ARM every minute (ARM throttles reads per subscription:
    # azure-wire.md §5.1).
    PERSISTED = ("kubernetes_version", "arc_location", "server", "ca_pem", "principal_id")

    def __init__(self):
        self._values = {}
        self._lock = threading.Lock()

    def snapshot(self):
        with self._lock:
            out = {k: self._values[k] for k in self.PERSISTED if self._values.get(k) is not None}
        if "ca_pem" in out:
            out["ca_pem"] = base64.b64encode(out["ca_pem"]).decode()
        return out

    def restore(self, snapshot):
        for key, value in (snapshot or {}).items():
            if key in self.PERSISTED:
                self.set(key, base64.b64decode(value) if key == "ca_pem" else value)

    def set(self, key, value):
        with self._lock:
            self._values[key] = value

    def get(self, key, default=None):
        with self._lock:
            return self._values.get(key, default)

    def __contains__(self, key):
        with self._lock:
            return key in self._values


class Context:
    def __init__(self, config, host, ledger, options=None, log=None):
        self.config = config
        self.host = host
        self.ledger = ledger
        self.options = dict(options or {})
        self.facts = Facts()
        self.log = log or logging.getLogger("aks_flex_node")
        self._azure = None
        self._azure_lock = threading.Lock()
        self._downloader = None

    def downloader(self):
        """One downloader for the run (its cache and connections are shared by the install steps)."""
        with self._azure_lock:
            if self._downloader is None:
                cfg = self.config
                self._downloader = self.host.downloader(
                    cfg.cache_dir, ca_bundle=cfg.endpoints.ca_bundle,
                    proxy=cfg.https_proxy or None)
            return self._downloader

    def adopt(self, step, kind, id):
        """Record, from a check, something found in place that is ours (our deterministic
        role assignment name, the unit we enabled) but missing from the ledger. A dry run
        writes nothing, the ledger included."""
        if not self.options.get("dry_run"):
            self.ledger.record(step, kind, id)

    @property
    def local_only(self):
        """A local pass: cloud steps trust the facts of the last full run instead of asking."""
        return bool(self.options.get("local_only"))

    @property
    def azure(self):
        """The Azure session (credential and clients), made on first use: local-only
        work (token, status, a dry-run of the install branch) never pays for it."""
        with self._azure_lock:
            if self._azure is None:
                from aks_flex_node.azure.session import AzureSession

                self._azure = AzureSession.from_config(self.config, self.host)
            return self._azure
