"""What a join's steps get to work with besides the engine's Context: the join's data, the
configuration the node is built to, the run's HTTP policy and downloader, and Azure."""

import dataclasses
from typing import Callable, FrozenSet, Optional

from aks_flex_node.engine.context import Context, RunOptions
from aks_flex_node.http_policy import HttpPolicy
from aks_flex_node.steps.cloud_reads import CloudReads
from aks_flex_node.steps.join_data import JoinData


@dataclasses.dataclass(frozen=True)
class JoinOptions(RunOptions):
    """What the caller asked of a bootstrap or an unbootstrap run (operations.py)."""

    # preflight's checks whose errors are reported but do not stop the run (`all`: every one)
    ignore_preflight_errors: FrozenSet[str] = frozenset()
    # agent-pool mode: ask the pool for its bootstrap data again (False: the agent's full
    # passes on a joined node reuse the last full run's unless the kubelet needs a token)
    refresh_pool: bool = True
    agent: bool = False  # the agent's run: a kubelet upgrade waits for upgrade_window
    upgrade: bool = False  # `aks-flex-node upgrade` asked: a version whose upgrade failed is tried again
    drain_timeout: Optional[float] = None  # unbootstrap: drain the Node first, within this (None: no drain)
    # Told (the Node as read, from, to) when a kubelet upgrade is recorded as begun: operations.py
    # sends the event (health/ is a layer above steps/); it never raises.
    upgrade_started: Optional[Callable] = None
    # agent-pool mode: the Machine goal (steps/machine_goal.Goal) this run applies (pool_follow.py)
    machine_goal: Optional[object] = None
    # ...because the pool's operation released the node: the RP cordoned and drained it and
    # deleted its Node; the kubelet moves without a cordon or drain of ours and registers again
    released: bool = False
    # agent-pool mode: (the Machine or None,) as the agent's pass read it for its decision
    # (pool_follow.observe), moments before this run: the machine phase does not read it again
    machine_seen: Optional[tuple] = None


class JoinContext(Context):
    def __init__(self, config, host, ledger, options=None, log=None, data=None):
        super().__init__(config, host, ledger, options=options if options is not None else JoinOptions(), log=log)
        self.data = data if data is not None else JoinData()
        self._effective = None  # (the overlay it was made from, the Config)
        self._azure = None
        self._downloader = None
        self._http_policy = None
        # The run's shared cloud read: what the steps' prefetch started (steps/cloud_reads.py).
        self.reads = CloudReads()

    @property
    def config(self):
        """The configuration the node is built to: the operator's, with what the cluster
        phase learned laid under it (JoinData.config_overlay: an agent pool's values for the
        keys the operator left unset). Derived from the two, never assigned: before the
        cluster phase, and in the modes without an overlay, it is the operator's. Every step
        but the cluster phase waits for that phase (steps/workflow.py)."""
        overlay = self.data.config_overlay
        if not overlay:
            return self.operator_config
        with self._lock:
            if self._effective is None or self._effective[0] is not overlay:
                values, origin = overlay
                self._effective = (overlay, self.operator_config.overlaid(values, origin))
            return self._effective[1]

    @property
    def http_policy(self):
        """The run's one HTTP policy (proxy, no_proxy, CA bundle: http_policy.py), built
        from the config once and used by every client of ours and every service we configure."""
        with self._lock:
            if self._http_policy is None:
                self._http_policy = HttpPolicy.from_config(self.config)
            return self._http_policy

    def downloader(self):
        """One downloader for the run (its cache and connections are shared by the install
        steps). The cache directory is made by steps/tracked.ensure_cache_dir first."""
        with self._lock:
            if self._downloader is None:
                from aks_flex_node.host.download import Downloader  # a converged run downloads nothing

                self._downloader = Downloader(self.host.path(self.config.cache_dir), policy=self.http_policy,
                                              root=self.host.root)
            return self._downloader

    @property
    def azure(self):
        """The Azure session (credential and clients), made on first use: local-only
        work (token, status, a dry-run of the install branch) never pays for it."""
        with self._lock:
            if self._azure is None:
                from aks_flex_node.azure.session import AzureSession

                self._azure = AzureSession.from_config(self.config, self.host, self.http_policy)
            return self._azure
