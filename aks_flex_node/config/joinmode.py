"""The join mode: how this node becomes a member of its cluster (docs/configuration.md,
"Join modes"). One definition; every other module asks a JoinMode what it implies instead of
comparing spellings.

- arc: the machine is connected to Azure Arc and the kubelet authenticates with its managed
  identity's Entra token (an exec credential plugin, `aks-flex-node token`);
- agent-pool: the node is a Machine of a FlexNodes agent pool, whose bootstrap data gives
  the versions, the API server and a bootstrap token; the kubelet joins by TLS bootstrap;
- bootstrap-token: the token, the API server and its CA come from the configuration; the
  kubelet joins by TLS bootstrap and nothing is asked of Azure.

The mode is read from the configuration once, when the configuration is loaded, and does
not change during a run (engine/context.py: `ctx.mode`). Stdlib only: the token plugin's light path
may import it.
"""

from aks_flex_node.words import WordEnum


class JoinMode(WordEnum):
    # The configuration's value, JSON and debconf carry it as the word the operator wrote.
    ARC = "arc"
    AGENT_POOL = "agent-pool"
    BOOTSTRAP_TOKEN = "bootstrap-token"

    @property
    def tls_bootstrap(self):
        """The kubelet joins by TLS bootstrap (a bootstrap token, then its own certificate)
        instead of with an exec credential plugin."""
        return self is not JoinMode.ARC

    @property
    def asks_azure(self):
        """The join reads or writes Azure (ARM, Entra): every mode but bootstrap-token."""
        return self is not JoinMode.BOOTSTRAP_TOKEN


ALL = tuple(JoinMode)
NAMES = tuple(mode.value for mode in JoinMode)
TLS_BOOTSTRAP = tuple(mode for mode in JoinMode if mode.tls_bootstrap)


def spelled(modes):
    """`arc or agent-pool`: modes as an operator reads them in a message."""
    return " or ".join(str(mode) for mode in modes)
