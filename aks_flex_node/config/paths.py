"""Where the configuration file and the files it names are, on this filesystem.

Every path the configuration holds is a node path (absolute, as on the node); under another
root (tests, image builds) it is looked up below that root, as every path the Host is given.
"""

from pathlib import Path

DEFAULT_PATH = "/etc/aks-flex-node/aks-flex-node.conf"


def host_path(root, node_path):
    """A path on the node (absolute) as a path on this filesystem under `root`."""
    root = str(root or "/")
    return Path(node_path) if root == "/" else Path(root) / str(node_path).lstrip("/")


def file_path(path, root):
    """The configuration file: an absolute path is a node path (under `root`, as every
    path the Host is given); a relative one is taken from the working directory; None is
    DEFAULT_PATH."""
    path = str(path or DEFAULT_PATH)
    return host_path(root, path) if path.startswith("/") else Path(path)
