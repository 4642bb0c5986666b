"""The checked configuration (Config).

A Config is made by the loader once every check passed; it only derives from its values
(the cluster, the cloud's endpoints, artifact URLs, the redacted view) and reads no file
but the client secret's, on demand.
"""

import copy
import difflib
from collections.abc import Mapping
from pathlib import Path

from aks_flex_node import artifact_digests, clouds
from aks_flex_node.config import named_files, spec
from aks_flex_node.config.checks import ValidateError
from aks_flex_node.config.checks_net import api_server_url
from aks_flex_node.config.cluster_ref import parse_cluster_id
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.config.named_files import read_bootstrap_token
from aks_flex_node.config.values import serialize, shown
from aks_flex_node.errors import ConfigError, ConfigProblem
from aks_flex_node.paths import Paths

ARTIFACTS = ("kubernetes", "containerd", "runc", "cni")
ARCHES = ("amd64", "arm64")

# In mirror mode every artifact is fetched as {artifact_mirror}/{file name}, its checksum
# as {artifact_mirror}/{file name}.sha256. The names are fixed per artifact (not the last
# segment of the upstream URL, which is not unique: runc's is "runc.amd64" for every
# version); they are the flat names the test emulator and a simple mirror serve.
MIRROR_FILENAMES = {
    "kubernetes": "kubernetes-node-v{version}-linux-{arch}.tar.gz",
    "containerd": "containerd-{version}-linux-{arch}.tar.gz",
    "runc": "runc-v{version}.{arch}",
    "cni": "cni-plugins-linux-{arch}-v{version}.tgz",
}

def is_local_mirror(mirror):
    """True when artifact_mirror names a directory on this machine (file:///path)."""
    return mirror.startswith("file:")


class Config(Mapping):
    """The checked configuration: typed values by key (`cfg.max_pods`, `cfg["max_pods"]`).

    Defaults are filled in and resolved: machine_name (the hostname), subscription_id and
    arc_resource_group (the cluster's). arc_location and kubernetes_version stay "" when
    they mean "the cluster's" (a step resolves them).
    """

    def __init__(self, values, source=None, root="/", warnings=(), client_secret=None, held=None, given=None):
        self._values = dict(values)
        self.source = source
        self.root = Path(root or "/")
        self.paths = Paths(self.root)
        self.warnings = list(warnings)
        # Secrets only from an upstream config.json, held in memory: sp_client_secret,
        # bootstrap_token, cluster_ca (PEM text).
        self._held = dict(held or {})
        if client_secret:
            self._held["sp_client_secret"] = client_secret
        # The keys the file or the overrides gave a non-empty value (None: every key set).
        self._given = None if given is None else frozenset(given)
        self._cluster = parse_cluster_id(self._values["cluster_resource_id"])
        ca_bundle = self._values.get("ca_bundle") or None
        self._endpoints = clouds.endpoints(
            self._values["cloud"], self._values.get("arm_endpoint", ""), self._values.get("authority_host", ""),
            str(self.paths.real(ca_bundle)) if ca_bundle else None,
        )

    # Mapping over the keys, attribute access by key
    def __getitem__(self, key):
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __getattr__(self, name):
        values = self.__dict__.get("_values")
        if values is not None and name in values:
            return values[name]
        near = difflib.get_close_matches(name, list(values or ()), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise AttributeError(f"no configuration key {name!r}{hint}")

    def __repr__(self):
        return f"<Config {self.source or '(values)'}>"

    @property
    def cluster(self):
        """ClusterRef(subscription_id, resource_group, name, resource_id), canonical casing."""
        return self._cluster

    @property
    def mode(self):
        """The join mode (config/joinmode.py), read from join_mode."""
        return JoinMode(self._values["join_mode"])

    @property
    def endpoints(self):
        """CloudEndpoints(name, arm, authority, arm_scope, ca_bundle) of the configured cloud."""
        return self._endpoints

    def is_set(self, key):
        """True when the configuration file (or an override, or an upstream config.json)
        gave `key` a non-empty value; a default, or a value derived from other keys
        (arc_resource_group from the cluster), does not count. KeyError for an unknown key."""
        if key not in self._values and key not in self._held_keys():
            raise KeyError(f"no configuration key {key!r}")
        if self._given is None:
            return bool(self._values.get(key))
        return key in self._given or key in self._held_keys()

    def _held_keys(self):
        """The keys whose value is held in memory (they count as set)."""
        names = {"bootstrap_token": "bootstrap_token_file", "cluster_ca": "cluster_ca_file"}
        return {names[name] for name in self._held if name in names}

    @property
    def api_server_url(self):
        """api_server as https://host:port (port 443 when it names none); "" when unset."""
        value = self._values.get("api_server")
        return api_server_url(value) if value else ""

    def bootstrap_token(self):
        """The bootstrap token: the one read from an upstream config.json (held in memory),
        else the content of bootstrap_token_file; None if neither. ConfigError if the file
        cannot be read or holds no token (the error never shows what it holds)."""
        if self._held.get("bootstrap_token"):
            return self._held["bootstrap_token"]
        node_path = self._values.get("bootstrap_token_file")
        if not node_path:
            return None
        try:
            return read_bootstrap_token(self.paths.real(node_path))
        except OSError as err:
            expected = f"a readable file holding the bootstrap token ({err.__class__.__name__})"
        except ValueError as err:
            expected = str(err)
        raise ConfigError([ConfigProblem("bootstrap_token_file", node_path, expected)], source=self.source)

    def cluster_ca(self):
        """The cluster's CA certificate(s), PEM text: the one read from an upstream
        config.json (held in memory), else the content of cluster_ca_file; None if neither."""
        if self._held.get("cluster_ca"):
            return self._held["cluster_ca"]
        node_path = self._values.get("cluster_ca_file")
        if not node_path:
            return None
        try:
            return self.paths.real(node_path).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError([ConfigProblem("cluster_ca_file", node_path, "a readable PEM file of the cluster's "
                                             f"CA certificate ({err.__class__.__name__})")],
                              source=self.source) from None

    def client_secret(self):
        """The service principal's client secret: the one read from an upstream config.json
        (held in memory), else the content of sp_client_secret_file; None if neither."""
        if self._held.get("sp_client_secret"):
            return self._held["sp_client_secret"]
        node_path = self._values.get("sp_client_secret_file")
        if not node_path:
            return None
        try:
            secret = self.paths.real(node_path).read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            expected = f"a readable file holding the client secret ({err.__class__.__name__})"
        else:
            if secret:
                return secret
            expected = "a file holding the client secret, not an empty one"
        raise ConfigError([ConfigProblem("sp_client_secret_file", node_path, expected)], source=self.source)

    def artifact_urls(self, name, version, arch):
        """(url, checksum_url) of an artifact (kubernetes, containerd, runc, cni). With a
        local mirror (artifact_mirror = file:///path) checksum_url is None: the file is
        hashed as it is copied (host/download.py copy_into), nothing beside it is read."""
        if name not in ARTIFACTS:
            raise ValueError(f"artifact {name!r}: expected one of {', '.join(ARTIFACTS)}")
        if arch not in ARCHES:
            raise ValueError(f"arch {arch!r}: expected one of {', '.join(ARCHES)}")
        if not version:
            raise ValueError(f"{name}: a version is needed to build its download URL")
        mirror = self._values.get("artifact_mirror")
        if mirror:
            url = f"{mirror.rstrip('/')}/{MIRROR_FILENAMES[name].format(version=version, arch=arch)}"
            return url, None if is_local_mirror(mirror) else url + ".sha256"
        return self.upstream_artifact_urls(name, version, arch)

    def upstream_artifact_urls(self, name, version, arch):
        """(url, checksum_url) of an artifact from its *_url templates, whatever the mirror
        (what `mirror sync` fetches a mirror's files from)."""
        if name not in ARTIFACTS:
            raise ValueError(f"artifact {name!r}: expected one of {', '.join(ARTIFACTS)}")
        url = self._values[f"{name}_url"].format(version=version, arch=arch)
        checksum_url = self._values[f"{name}_sha256_url"].format(url=url, version=version, arch=arch)
        return url, checksum_url

    def artifact_digest(self, name, version, arch):
        """The Digest (artifact_digests.py) `name` `version` for `arch` must have: the
        operator's (artifact_digests_file) first, else the one this package ships; an
        ArtifactDigestUnknown naming both places when neither has one."""
        pins = None
        node_path = self._values.get("artifact_digests_file")
        if node_path:
            problems = []
            pins = named_files.check_digests_file("artifact_digests_file", node_path, str(self.root), problems)
            if problems:  # changed since the configuration was checked
                raise ConfigError(problems, source=self.source)
        digest = artifact_digests.trusted(pins, name, version, arch)
        if digest is None:
            raise artifact_digests.ArtifactDigestUnknown(name, version, arch, node_path)
        return digest

    # Where a value came from when it is not the file's or a default: key -> origin (e.g.
    # "listBootstrapData"), set by overlaid(); always replaced, never changed in place.
    origins = {}

    def overlaid(self, values, origin):
        """This configuration with `values` (key -> typed value: an agent pool's bootstrap
        data) in place of its own, each checked as the file's value would be. ConfigError
        naming the key, the origin, the value and what is expected when one fails."""
        checker, checked, problems = spec.validator(), {}, []
        for key, value in values.items():
            text = serialize(key, value)
            try:
                checked[key] = checker.check(spec.configspec()[spec.section_of(key)][key], text)
            except ValidateError as err:
                problems.append(ConfigProblem(f"{key} (from {origin})", shown(key, text),
                                              getattr(err, "expected", None) or str(err)))
        if problems:
            raise ConfigError(problems, source=origin)
        new = copy.copy(self)
        new._values = dict(self._values, **checked)
        new.origins = dict(self.origins, **{key: origin for key in checked})
        return new

    def as_dict(self, redact=True):
        """The effective configuration, by key in file order. With redact, values whose key
        names a secret and proxy credentials are replaced by ***; paths of secret files stay."""
        out = {}
        for key, value in self._values.items():
            value = value.copy() if isinstance(value, (dict, list)) else value
            out[key] = shown(key, value) if redact else value
        return out

