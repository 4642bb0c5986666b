"""One Azure session per run: the operator credential and the clients built on it.

The engine's Context makes it on first use (engine/context.py `Context.azure`), so steps
that never talk to Azure never import the SDK.
"""

from aks_flex_node.azure import auth
from aks_flex_node.azure.clients import Clients


class AzureSession:
    def __init__(self, credential, clients):
        self.credential = credential
        self.clients = clients

    @classmethod
    def from_config(cls, cfg, host=None):
        """Credential and clients for `cfg`; secret files are read under the host's root."""
        root = str(host.root) if host is not None else None
        cred = auth.credential(auth.AuthSettings.from_config(cfg, root))
        return cls(cred, Clients(cfg, cred))

    def close(self):
        self.clients.close()
        close = getattr(self.credential, "close", None)
        if close:
            close()
