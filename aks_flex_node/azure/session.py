"""One Azure session per run: the operator credential and the clients built on it.

The join's context makes it on first use (steps/context.py `JoinContext.azure`), so steps
that never talk to Azure never import the SDK.
"""

import dataclasses

from aks_flex_node.azure import auth
from aks_flex_node.azure.clients import Clients
from aks_flex_node.http_policy import HttpPolicy


class AzureSession:
    def __init__(self, credential, clients):
        self.credential = credential
        self.clients = clients

    @classmethod
    def from_config(cls, cfg, host=None, policy=None):
        """Credential and clients for `cfg`; secret files are read under the host's root.
        `policy`: the run's HttpPolicy (steps/context.py), else the config's."""
        root = str(host.root) if host is not None else None
        policy = policy or HttpPolicy.from_config(cfg)
        settings = dataclasses.replace(auth.AuthSettings.from_config(cfg, root), policy=policy)
        cred = auth.credential(settings)
        return cls(cred, Clients(cfg.endpoints, cred, policy))

    def close(self):
        self.clients.close()
        close = getattr(self.credential, "close", None)
        if close:
            close()
