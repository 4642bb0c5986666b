"""What a step gets to work with: the config, the host, the ledger, shared facts and Azure."""

import logging
import threading


class Facts:
    """Facts steps learn and share (cluster, machine identity, server URL...); thread-safe."""

    def __init__(self):
        self._values = {}
        self._lock = threading.Lock()

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

    @property
    def azure(self):
        """The Azure session (credential and clients), made on first use: local-only
        work (token, status, a dry-run of the install branch) never pays for it."""
        with self._azure_lock:
            if self._azure is None:
                from aks_flex_node.azure.session import AzureSession

                self._azure = AzureSession.from_config(self.config, self.host)
            return self._azure
