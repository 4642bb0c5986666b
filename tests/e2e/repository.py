"""A published APT repository (tools/publish-repo.sh's output), as the tests and the demo
hand it to a node: the served tree, its keyring, the .sources stanza."""

import pathlib

from debian import deb822

from tests.e2e import container as ct


class Repo:
    """`path` is the served tree (dists/, pool/, the keyring and aks-flex-node.sources);
    `key_dir` where publish-repo.sh keeps the signing key it made (None: tools' default)."""

    def __init__(self, path, key_dir=None):
        self.path = pathlib.Path(path)
        self.key_dir = pathlib.Path(key_dir) if key_dir else None
        self.keyring = self.path / "aks-flex-node-archive-keyring.gpg"
        self.sources = self.path / "aks-flex-node.sources"

    def publish(self, *debs, suite=None):
        """publish-repo.sh DEBS into this repository (suite: its default, stable)."""
        key = ["-k", str(self.key_dir)] if self.key_dir else []
        suite_args = ["-s", suite] if suite else []
        return ct._run([str(ct.REPO / "tools/publish-repo.sh"), "-o", str(self.path), *key, *suite_args,
                        *map(str, debs)], timeout=300)

    def check_published(self):
        """The repository, or an error that says what is missing and how to make it."""
        missing = [p.name for p in (self.keyring, self.sources, self.path / "dists") if not p.exists()]
        if missing:
            raise ct.E2EError(f"{self.path} is not a published repository (no {', '.join(missing)}): "
                              f"`make repo` publishes one")
        return self

    def sources_text(self, uri):
        """The deb822 .sources stanza with its URIs: replaced by `uri` (where the node sees
        the tree), through python-debian."""
        stanza = deb822.Deb822(self.sources.read_text())
        stanza["URIs"] = uri
        return stanza.dump()
