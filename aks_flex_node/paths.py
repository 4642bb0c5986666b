"""Every location aks-flex-node keeps, in one place, built once from the root.

Modelled on cloud-init's `helpers.Paths` (canonical/cloud-init, cloudinit/helpers.py): the
code asks a Paths object where a thing lives instead of joining a root to a string itself.
The attributes are node paths (absolute, as on the node: what the Host is given and what
messages show); `real(p)` is where node path `p` is on this filesystem (the root joined
in: tests and image builds use a root other than "/").

Standard library only, and pathlib only when a real path is built: `aks-flex-node token`
(run by the kubelet on every credential refresh) answers from its cache with this module's
constants and nothing beyond json, os and time (cached_token.py).
"""

import os

CONFIG_DIR = "/etc/aks-flex-node"
CONFIG = CONFIG_DIR + "/aks-flex-node.conf"
SECRET = CONFIG_DIR + "/sp-client-secret"  # debconf's and `config import`'s default
SHIPPED_DEFAULT = "/usr/share/aks-flex-node/aks-flex-node.conf"

STATE_DIR = "/var/lib/aks-flex-node"
LEDGER = STATE_DIR + "/ledger.json"
BACKUP_DIR = STATE_DIR + "/backup"
STATUS = STATE_DIR + "/status.json"
COMPLETE_MARKER = STATE_DIR + "/provision.complete"
LOCK = STATE_DIR + "/lock"
# A join is wanted but has not succeeded yet (the agent service keeps trying).
PENDING = STATE_DIR + "/join-pending"
# The pool took this node out (its Machine deleted, its Node marked) and the leave is not
# finished: the agent finishes it before anything else (pool_follow.py); a bootstrap clears it.
LEAVING = STATE_DIR + "/leave-pending"
TOKEN_CACHE = STATE_DIR + "/token-cache.json"
# What the metrics count across runs (health/metrics.py): repairs by phase, each operation's last run.
METRICS_RECORD = STATE_DIR + "/metrics.json"
# What health/node_report.py last sent to the Node (a digest and when): a pass with nothing new sends nothing.
NODE_REPORT_RECORD = STATE_DIR + "/node-report.json"
# The token cache's single-flight lock (token.py): one cold call mints, the others wait.
TOKEN_LOCK = TOKEN_CACHE + ".lock"
# Root-only scratch space: azcmagent's 0600 connect file lives here while it runs.
RUN_DIR = "/run/aks-flex-node"
DEFAULT_CACHE_DIR = "/var/cache/aks-flex-node"
# The Cache Directory Tagging Specification (https://bford.info/cachedir/): a cache
# directory we create carries this file, which also tells a later run that the directory
# is ours (an existing directory without it is refused as cache_dir).
CACHE_TAG_NAME = "CACHEDIR.TAG"
CACHE_TAG = (b"Signature: 8a477f597d28d172789f06886806bc55\n"
             b"# This directory holds aks-flex-node's downloads; aks-flex-node unbootstrap removes it.\n")


def is_own_cache_tag(data):
    """A CACHEDIR.TAG that aks-flex-node wrote: the specification's signature line, and our
    name in the comment after it (man-db, for one, tags /var/cache/man with the same
    signature)."""
    return data.startswith(CACHE_TAG.split(b"\n", 1)[0] + b"\n") and b"aks-flex-node" in data


def real_path(root, node_path):
    """Node path `node_path` (absolute, no '..') as a path on this filesystem under `root`."""
    from pathlib import Path, PurePosixPath  # pathlib imports urllib.parse, fnmatch and more

    if not isinstance(node_path, (str, PurePosixPath)):
        raise TypeError(f"path = {node_path!r}: expected a str")
    text = str(node_path)
    if not text.startswith("/"):
        raise ValueError(f"path = {text!r}: expected an absolute node path")
    if ".." in PurePosixPath(text).parts:
        raise ValueError(f"path = {text!r}: '..' is not allowed (it could leave the root)")
    if "\0" in text:
        raise ValueError(f"path = {text!r}: contains a NUL byte")
    root = Path(os.path.abspath(os.fspath(root or "/")))
    relative = str(PurePosixPath(text)).lstrip("/")
    return root / relative if relative else root


def backup_path(node_path):
    """Where the original of a file we replaced is kept until undo restores it."""
    from pathlib import PurePosixPath

    return BACKUP_DIR + str(PurePosixPath(node_path))


class Paths:
    """The node's locations for one root: `real(p)` of the module's node paths."""

    def __init__(self, root="/"):
        from pathlib import Path

        self.root = Path(os.path.abspath(os.fspath(root or "/")))

    def __repr__(self):
        return f"Paths(root={str(self.root)!r})"

    @property
    def is_live(self):
        return str(self.root) == "/"

    def real(self, node_path):
        """Where node path `node_path` is on this filesystem."""
        return real_path(self.root, node_path)

