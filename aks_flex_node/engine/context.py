"""What a step gets to work with: the config, the host, the ledger, the join's data and Azure."""

import logging
import threading

from aks_flex_node.engine.data import JoinData


class Context:
    def __init__(self, config, host, ledger, options=None, log=None, data=None):
        self.config = config
        # The operator's configuration as loaded. In agent-pool mode the cluster phase
        # replaces `config` with it overlaid by the pool's values (steps/agentpool.py);
        # every other step waits for that phase, so none sees the swap half-way.
        self.base_config = config
        self.host = host
        self.ledger = ledger
        self.options = dict(options or {})
        self.data = data if data is not None else JoinData()
        # A dry run writes nothing, obligations included: the ones its plans would owe
        # are kept here, so the services phase's plan shows the restarts they call for.
        self.planned_obligations = []
        self.log = log or logging.getLogger("aks_flex_node")
        self._azure = None
        self._lock = threading.Lock()
        self._downloader = None
        self._http_policy = None

    @property
    def dry_run(self):
        return bool(self.options.get("dry_run"))

    @property
    def local_only(self):
        """A local pass: cloud steps trust the facts of the last full run instead of asking."""
        return bool(self.options.get("local_only"))

    def obligations(self):
        """What the services phase owes: the ledger's, and in a dry run the planned ones."""
        owed = list(self.ledger.obligations()) if self.ledger is not None else []
        for obligation in self.planned_obligations:
            if obligation not in owed:
                owed.append(obligation)
        return owed

    @property
    def http_policy(self):
        """The run's one HTTP policy (proxy, no_proxy, CA bundle: http_policy.py), built
        from the config once and used by every client of ours and every service we configure."""
        with self._lock:
            return self._http_policy_unlocked()

    def downloader(self):
        """One downloader for the run (its cache and connections are shared by the install
        steps). The cache directory is made by steps/tracked.ensure_cache_dir first."""
        policy = self.http_policy
        with self._lock:
            if self._downloader is None:
                from aks_flex_node.host.download import Downloader

                self._downloader = Downloader(self.host.path(self.config.cache_dir), policy=policy)
            return self._downloader

    def adopt(self, step, kind, id, **extra):
        """Record, from a check, something found in place that is ours (our deterministic
        role assignment name, the unit we enabled, an install an older release recorded
        in less detail) but missing from the ledger. A dry run writes nothing, the ledger
        included."""
        if not self.dry_run:
            self.ledger.record(step, kind, id, **extra)

    @property
    def azure(self):
        """The Azure session (credential and clients), made on first use: local-only
        work (token, status, a dry-run of the install branch) never pays for it."""
        with self._lock:
            if self._azure is None:
                from aks_flex_node.azure.session import AzureSession

                self._azure = AzureSession.from_config(self.config, self.host, self._http_policy_unlocked())
            return self._azure

    def _http_policy_unlocked(self):
        if self._http_policy is None:
            from aks_flex_node.http_policy import HttpPolicy

            self._http_policy = HttpPolicy.from_config(self.config)
        return self._http_policy
