"""The kinds of the ledger's entries: one typed definition, owned by the steps that record
them (engine/ledger.py is told which kinds there are and knows none of them).

A `Kind` is a str (words.WordEnum): it is written to the ledger as the same word earlier
releases wrote, compares equal to the word read back, and shows as the word in messages.
What undo does with each: docs/design.md, "What undo removes, by ledger kind".
"""

from aks_flex_node import paths
from aks_flex_node.engine.ledger import Ledger
from aks_flex_node.words import WordEnum


class Kind(WordEnum):
    FILE = "file"  # `link` when a symlink we made; what was there before: `backup` (a file's
    # copy) and `mode`, or `original` ("link" with `original_link`, "fifo" with `mode`), `owner`
    DIR = "dir"  # removed only when empty
    PARENT_DIR = "parent_dir"  # made above a path of ours; removed only when empty
    STATE_DIR = "state_dir"  # a service's state: removed with its content, never across a mount
    CACHE_DIR = "cache_dir"  # the download cache: only our downloads go
    UNIT = "unit"  # a systemd unit we enabled
    ROLE_ASSIGNMENT = "role_assignment"
    ARC_MACHINE = "arc_machine"
    AZCMAGENT_CONNECTION = "azcmagent_connection"
    AZCMAGENT_CONFIG = "azcmagent_config"  # an azcmagent config property we set (`previous`)
    NODE = "node"  # our Node in the cluster
    ARTIFACT = "artifact"  # an install: its URL and every file it writes (steps/artifacts.py)
    STAGING = "staging"  # the temp files an install is staging, with the run's pid
    AGENTPOOL_MACHINE = "agentpool_machine"  # the node's Machine in its FlexNodes pool
    KUBELET_UPGRADE = "kubelet_upgrade"  # an upgrade under way, or the last that failed
    MACHINE_GOAL = "machine_goal"  # the Machine settings applied, being applied, last failed


KINDS = frozenset(Kind)
DIR_KINDS = (Kind.DIR, Kind.PARENT_DIR)  # removed only when empty


def open_ledger(host, path=paths.LEDGER):
    """The run's ledger, holding only entries of a kind we record (an entry of another kind
    came from a newer aks-flex-node or a hand edit, and is refused)."""
    return Ledger(host, path, kinds=KINDS)
