"""Converting the upstream Go agent's config.json (Azure/AKSFlexNode v0.0.x) into our keys.

The schema is upstream's pkg/config/structs.go and pkg/config/config.go (v0.0.10, plus the
later node.taints and node.kubelet.nodeIP), and the newer shape of the same file that
mirrors AKS's listBootstrapData answer (docs/usage/configuration.md, legacy_config.go):
azure.targetAgentPoolName, components.{kubernetes,containerd,runc,sandboxImage},
networking.{dnsServiceIP,cniVersion}, node.kubelet.{clusterFQDN,caCertData}, agent.nodeName.
The result is plain text values by key, for config.write() (by `aks-flex-node config
import`) or config.from_values() (`--config config.json`); their meaning is checked there.
This module only maps, and reports what it cannot map: every problem at once in a
ConfigError, every ignored key in a warning that names it.

The join mode comes from what the file holds:
- targetAgentPoolName and a node credential (servicePrincipal or managedIdentity):
  join_mode = agent-pool. The credential fetches a fresh token, server and CA from
  listBootstrapData at every join, so a token, server or CA in the file (the initial
  ones upstream's boot command renders) is not kept: it expires, and would override AKS's.
- a bootstrapToken without such a pair: join_mode = bootstrap-token, with
  node.kubelet.serverURL (v0.0.10) or clusterFQDN (newer) and caCertData (base64 PEM).
- neither: join_mode = arc, where upstream's auth "modes" only choose the credential for
  our own Azure calls: servicePrincipal -> service-principal, managedIdentity ->
  managed-identity, and neither -> azure-cli (what upstream does in Arc mode).

Secrets never go into our configuration file: the SP client secret, the bootstrap token
and the cluster CA are returned apart, for the caller to write to files the configuration
names (or to hold in memory).
"""

import json
import os
import stat

from aks_flex_node.config import upstream_sections as sections
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.config.upstream_sections import MISSING, REDACTED
from aks_flex_node.errors import ConfigError, ConfigProblem


# Upstream's README examples are about 1 KiB; a file a thousand times that is not one.
MAX_FILE_SIZE = 1 << 20

# Keys we read nowhere, with why; anything else unknown gets a generic warning.
_IGNORED = {
    "azure.arc.autoRoleAssignment":
        "not an upstream field either (a v0.0.10 docs mistake); roles are always assigned, see role_preset",
    "agent.logDir": "aks-flex-node logs to the journal",
    "agent.enableDriftDetectionAndRemediation": "aks-flex-node has no drift remediation daemon",
    "runc.url": "unused by upstream since v0.0.3; see runc_url",
    "node.kubelet.verbosity": "not configurable",
    "node.kubelet.imageGCHighThreshold": "not configurable",
    "node.kubelet.imageGCLowThreshold": "not configurable",
    "node.kubelet.serverURL": "only used with a bootstrap token; the server comes from the cluster",
    "node.kubelet.clusterFQDN": "only used with a bootstrap token; the server comes from the cluster",
    "node.kubelet.caCertData": "only used with a bootstrap token; the CA comes from the cluster",
    "azure.arc.enabled": "aks-flex-node decides from targetAgentPoolName and bootstrapToken",
    "agent.machineClient.mode": "aks-flex-node registers the Machine through ARM (join_mode = agent-pool)",
    "agent.machineClient.endpointUrl": "aks-flex-node registers the Machine through ARM",
    "agent.machineReconcileInterval": "aks-flex-node has no Machine reconcile daemon",
    "agent.requireMachineRegistration": "with join_mode = agent-pool the Machine registration is always required",
    "agent.machineOperationMode": "with join_mode = agent-pool the Machine is always registered",
}
_IGNORED_PREFIXES = {
    "npd.": "aks-flex-node does not install node-problem-detector",
    "paths.": "the paths are fixed",
}


class _Conversion:
    def __init__(self, document):
        self.document = document
        self.values = {}
        self.secrets = {}
        self.warnings = []
        self.problems = []
        self.used = set()  # paths read
        self.whole = set()  # objects read with everything in them (labels, tags...)
        self.mode = JoinMode.ARC  # join_mode, decided by upstream_sections.join_mode

    def get(self, path, kinds=None):
        """The value at a dotted path, or None; a value of the wrong JSON type is a problem."""
        node = self.document
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        self.used.add(path)
        if kinds is not None and node is not None and not isinstance(node, kinds):
            names = {str: "a string", dict: "an object", list: "a list", bool: "true or false", int: "a number"}
            kinds = kinds if isinstance(kinds, tuple) else (kinds,)
            wanted = " or ".join(names.get(k, k.__name__) for k in kinds)
            self.problem(path, node, wanted)
            return None
        return node

    def text(self, path):
        value = self.get(path, str)
        return value.strip() if isinstance(value, str) and value.strip() else None

    def problem(self, path, value, expected):
        if path.lower().endswith(("secret", "token")) and value not in (None, "", MISSING):
            value = REDACTED  # a secret is never echoed, even a malformed one
        self.problems.append(ConfigProblem(path, value, expected))

    def warn(self, path, why):
        self.warnings.append(f"{path}: ignored: {why}")

    def set(self, key, value):
        if value not in (None, ""):
            self.values[key] = value


def convert(document):
    """(values, secrets, warnings) from a parsed config.json; ConfigError on what cannot be
    converted. values: key -> text; secrets: {"sp_client_secret": ...} when present."""
    if not isinstance(document, dict):
        raise ConfigError([ConfigProblem("config.json", type(document).__name__, "a JSON object")])
    c = _Conversion(document)
    sections.azure(c)
    sections.join_mode(c)
    sections.auth(c)
    sections.arc(c)
    sections.cluster(c)
    sections.versions(c)
    sections.node(c)
    level = c.text("agent.logLevel")
    c.set("log_level", level.lower() if level else None)
    _report_unused(c)
    if c.problems:
        raise ConfigError(c.problems)
    return c.values, c.secrets, c.warnings


def load_file(path):
    """convert() of a config.json file, with errors naming the file. The file holding a
    client secret while others can read it earns a warning."""
    source = str(path)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(MAX_FILE_SIZE + 1)
    except OSError as err:
        problem = ConfigProblem("config file", source, f"a readable file ({err.strerror})")
        raise ConfigError([problem], source=source) from None
    if len(data) > MAX_FILE_SIZE:
        raise ConfigError([ConfigProblem("config file", source, f"a config.json of at most {MAX_FILE_SIZE} bytes")],
                          source=source)
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem("config file", source, "UTF-8 JSON")], source=source) from None
    except RecursionError:
        raise ConfigError([ConfigProblem("config file", source, "JSON nested a few levels deep, as a config.json "
                                                                "is")], source=source) from None
    except ValueError as err:
        where = f"line {err.lineno} column {err.colno}" if hasattr(err, "lineno") else "JSON"
        raise ConfigError([ConfigProblem(where, err.msg if hasattr(err, "msg") else str(err), "valid JSON")],
                          source=source) from None
    try:
        values, secrets, warnings = convert(document)
    except ConfigError as err:
        raise ConfigError(err.problems, source=source) from None
    held = [what for name, what in (("sp_client_secret", "a client secret"), ("bootstrap_token", "a bootstrap token"))
            if secrets.get(name)]
    if held and stat.S_IMODE(st.st_mode) & 0o077:
        warnings.append(f"{source} holds {' and '.join(held)} and others can read it (mode "
                        f"{stat.S_IMODE(st.st_mode):04o}): chmod 600 it, or better, import it and delete it")
    return values, secrets, warnings


def _leaves(node, prefix=""):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, node


def _report_unused(c):
    for path, _value in _leaves(c.document):
        if path in c.used or any(path.startswith(whole + ".") for whole in c.whole):
            continue
        if path in _IGNORED:
            c.warn(path, _IGNORED[path])
            continue
        prefix = next((p for p in _IGNORED_PREFIXES if path.startswith(p)), None)
        c.warn(path, _IGNORED_PREFIXES[prefix] if prefix else "not a key aks-flex-node knows")
