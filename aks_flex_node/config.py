"""The configuration file /etc/aks-flex-node/aks-flex-node.conf: load, check, write.

Schema first, then meaning (STYLE.md, after cloud-init): configobj's `validate` checks
every value against the shipped configspec (aks_flex_node/configspec.ini) with the check
functions registered below, then a semantic pass checks what needs more than one key or
the host (auth method, cloud, files named by the config, the hostname default). Every
problem is collected and raised at once in one ConfigError.

The file is kept readable by a plain sh script (the Debian maintainer scripts read it with
sed): keys are unique across sections, one `key = value` per line, values are literal
(configobj's list_values=False: no quoting, no lists), no inline comments, no multi-line
values. An empty value means the default.

Cheap to import: configobj and the stdlib only, no Azure SDK.
"""

import dataclasses
import difflib
import functools
import importlib.resources
import ipaddress
import os
import re
import socket
import stat
import string
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import configobj
from configobj.validate import ValidateError, Validator, is_integer

from aks_flex_node import clouds
from aks_flex_node.errors import ConfigError, ConfigProblem

DEFAULT_PATH = "/etc/aks-flex-node/aks-flex-node.conf"
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

# Always on the node: without it the cluster's cloud-controller-manager deletes a node
# it cannot find among Azure VMs (upstream-go-agent.md §2, node.labels).
MANAGED_LABEL = "kubernetes.azure.com/managed=false"

REDACTED = "***"
_SECRET_WORDS = re.compile(r"secret|password|passwd|token|credential", re.I)


# --------------------------------------------------------------------------------------
# The configspec


@functools.lru_cache(maxsize=None)
def _spec():
    text = importlib.resources.files("aks_flex_node").joinpath("configspec.ini").read_text("utf-8")
    return configobj.ConfigObj(text.splitlines(), _inspec=True, list_values=False, interpolation=False)


@functools.lru_cache(maxsize=None)
def _sections():
    """{section: (keys in file order)}, in file order."""
    spec = _spec()
    return {name: tuple(spec[name].scalars) for name in spec.sections}


@functools.lru_cache(maxsize=None)
def _section_of():
    return {key: section for section, keys in _sections().items() for key in keys}


def keys():
    """Every configuration key, in file order."""
    return tuple(_section_of())


def section_of(key):
    """The section a key belongs to; KeyError for an unknown key."""
    return _section_of()[key]


@functools.lru_cache(maxsize=None)
def _key_orders():
    return {key: i for i, key in enumerate(keys())}


def _key_order(key):
    return _key_orders().get(key, -1)


def _required_expected(key):
    """What a required key expects, in the words of its own check (fed a value it refuses)."""
    try:
        _validator().check(_spec()[section_of(key)][key], "\0")
    except Invalid as err:
        return f"{err.expected} ({key} is required)"
    return f"a value ({key} is required)"


# --------------------------------------------------------------------------------------
# Check functions for configobj's Validator. Each takes the raw string ("" = unset, which
# only reaches a check through a default of "") and returns the typed value, or raises
# Invalid naming what is expected.


class Invalid(ValidateError):
    def __init__(self, value, expected):
        super().__init__(f"{value!r}: expected {expected}")
        self.value = value
        self.expected = expected


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kubernetes qualified name part and label value (k8s.io apimachinery validation: 63 max,
# alphanumeric at both ends, '-', '_', '.' inside).
_K8S_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# Resource group names: common-types v5 ResourceGroupNameParameter, 1..90 characters.
_RESOURCE_GROUP = re.compile(r"^[-\w._()]{1,90}$")
# Cluster names: the AKS spec's resourceName pattern (aks/stable/2026-08-01/managedClusters.json).
_CLUSTER_NAME = r"[a-zA-Z0-9](?:[-_a-zA-Z0-9]{0,61}[a-zA-Z0-9])?"
_CLUSTER_ID = re.compile(
    r"^/subscriptions/(?P<sub>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"/resourcegroups/(?P<rg>[-\w._()]{1,90})"
    r"/providers/microsoft\.containerservice/managedclusters/(?P<name>" + _CLUSTER_NAME + r")$",
    re.I,
)
CLUSTER_ID_EXAMPLE = (
    "/subscriptions/<uuid>/resourceGroups/<group>/providers/"
    "Microsoft.ContainerService/managedClusters/<name>"
)
# Arc machine names are at most 54 characters (HybridCompute 2026-07-15 openapi.json,
# machineName); node names are RFC 1123 subdomains, lowercase.
MACHINE_NAME_MAX = 54
MACHINE_NAME_EXPECTED = (
    "a lowercase name of letters, digits, '-' and '.', starting and ending with a letter "
    f"or digit, at most {MACHINE_NAME_MAX} characters (a Kubernetes node name that is "
    "also a valid Arc machine name)"
)
_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z][0-9A-Za-z.-]*)?)$")
_K8S_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+)$")
_IMAGE_REF = re.compile(
    r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?"  # registry host (or first path part)
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"  # path
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"  # tag, digest
)
_QUANTITY = re.compile(r"^\d+(?:\.\d+)?(?:m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")
_PERCENT = re.compile(r"^\d+(?:\.\d+)?%$")
_COMMAND_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")
_NO_PROXY_ENTRY = re.compile(r"^[A-Za-z0-9.*:\[\]/_-]+$")

# kubelet refuses --node-labels in the kubernetes.io / k8s.io namespaces except these
# (kubernetes cmd/kubelet/app/options/options.go ValidateKubeletFlags and
# pkg/kubelet/apis/well_known_labels.go).
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
KUBELET_LABELS = (
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch", "kubernetes.io/hostname", "kubernetes.io/os",
    "node.kubernetes.io/instance-type", "topology.kubernetes.io/region", "topology.kubernetes.io/zone",
)
# kube-reserved resources and eviction signals the kubelet knows (kubelet flag reference).
RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
EVICTION_SIGNALS = (
    "memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
    "imagefs.inodesFree", "containerfs.available", "containerfs.inodesFree", "pid.available",
)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Azure tag names: at most 512 characters, none of < > % & \ ? / ; values at most 256.
_TAG_FORBIDDEN = set('<>%&\\?/')


def check_uuid(value):
    if value == "":
        return ""
    if not _UUID.match(value):
        raise Invalid(value, "a UUID such as 00000000-0000-0000-0000-000000000000")
    return value.lower()


def check_option(value, *options, **_):
    if value not in options:
        raise Invalid(value, "one of " + ", ".join(options))
    return value


def check_integer(value, min=None, max=None):
    try:
        return is_integer(value, min, max)
    except ValidateError:
        raise Invalid(value, f"a whole number from {min} to {max}") from None


def check_url(value, scheme="https", credentials="no"):
    if value == "":
        return ""
    schemes = scheme.split("|")
    expected = f"a URL starting with {' or '.join(s + '://' for s in schemes)} and naming a host"
    if any(c.isspace() for c in value):
        raise Invalid(value, expected + ", without spaces")
    try:
        parts = urlsplit(value)
        parts.port  # raises ValueError on a bad port
    except ValueError:
        raise Invalid(value, expected) from None
    if parts.scheme not in schemes or not parts.hostname:
        raise Invalid(value, expected)
    if credentials != "allowed" and (parts.username or parts.password):
        raise Invalid(value, expected + ", without user:password@")
    return value


def check_abs_path(value):
    if value == "":
        return ""
    if not value.startswith("/") or "\0" in value:
        raise Invalid(value, "an absolute path, starting with /")
    return os.path.normpath(value)


def check_command(value):
    if value.startswith("/"):
        return check_abs_path(value)
    if not _COMMAND_NAME.match(value):
        raise Invalid(value, "a command name found in PATH (letters, digits, '.', '_', '+', '-') "
                             "or an absolute path")
    return value


def is_machine_name(name):
    if not name or len(name) > MACHINE_NAME_MAX:
        return False
    return all(_DNS_LABEL.match(label) for label in name.split("."))


def check_k8s_name(value):
    if value == "":
        return ""
    if not is_machine_name(value):
        raise Invalid(value, MACHINE_NAME_EXPECTED)
    return value


def check_resource_group(value):
    if value == "":
        return ""
    if not _RESOURCE_GROUP.match(value) or value.endswith("."):
        raise Invalid(value, "a resource group name: 1 to 90 letters, digits, '_', '-', '.', '(' or ')', "
                             "not ending in '.'")
    return value


def check_location(value):
    if value == "":
        return ""
    if not re.match(r"^[A-Za-z0-9]+$", value):
        raise Invalid(value, "an Azure region name such as westeurope (letters and digits, no spaces)")
    return value.lower()


@dataclasses.dataclass(frozen=True)
class ClusterRef:
    subscription_id: str
    resource_group: str
    name: str
    resource_id: str  # canonical casing


def parse_cluster_id(text):
    """ClusterRef from an AKS resource ID, matched case-insensitively; ValueError if it is not one."""
    match = _CLUSTER_ID.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not an AKS cluster resource ID like {CLUSTER_ID_EXAMPLE}")
    sub, rg, name = match.group("sub").lower(), match.group("rg"), match.group("name")
    resource_id = (
        f"/subscriptions/{sub}/resourceGroups/{rg}/providers/"
        f"Microsoft.ContainerService/managedClusters/{name}"
    )
    return ClusterRef(sub, rg, name, resource_id)


def check_resource_id(value):
    try:
        return parse_cluster_id(value).resource_id
    except ValueError:
        raise Invalid(value, "an AKS cluster resource ID: " + CLUSTER_ID_EXAMPLE) from None


def check_version(value):
    match = _VERSION.match(value)
    if not match:
        raise Invalid(value, "a version number x.y.z such as 1.2.3")
    return match.group(1)


def check_k8s_version(value):
    if value == "":
        return ""
    match = _K8S_VERSION.match(value)
    if not match:
        raise Invalid(value, "a Kubernetes version x.y.z such as 1.30.4, or empty for the cluster's")
    return match.group(1)


def check_image_ref(value):
    if not _IMAGE_REF.match(value) or (":" not in value.rsplit("/", 1)[-1] and "@" not in value):
        raise Invalid(value, "a container image with a tag or digest, such as "
                             "mcr.microsoft.com/oss/kubernetes/pause:3.9")
    return value


def _template_fields(value, allowed, expected):
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
    except ValueError:
        raise Invalid(value, expected) from None
    if not fields <= set(allowed) or "" in fields:
        raise Invalid(value, expected)
    return fields


def check_url_template(value):
    expected = "an https URL template containing {version} and {arch} (and no other {placeholder})"
    fields = _template_fields(value, ("version", "arch"), expected)
    if fields != {"version", "arch"}:
        raise Invalid(value, expected)
    try:
        check_url(value.format(version="1.2.3", arch="amd64"))
    except Invalid:
        raise Invalid(value, expected) from None
    return value


def check_checksum_template(value):
    expected = "{url} followed by a suffix, or an https URL template, using only {url}, {version} and {arch}"
    fields = _template_fields(value, ("url", "version", "arch"), expected)
    try:
        check_url(value.format(url="https://example.com/a.tgz", version="1.2.3", arch="amd64"))
    except Invalid:
        raise Invalid(value, expected) from None
    if not fields & {"url", "version"}:
        raise Invalid(value, expected + " (at least {url} or {version}, or every version has the same checksum)")
    return value


def _items(value, separator, what, example):
    """Split "a=b,c=d" into pairs; the whole value is named in errors."""
    pairs = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            raise Invalid(value, f"{what} separated by single commas, such as {example}")
        name, sep, val = item.partition(separator)
        if not sep:
            raise Invalid(value, f"{what} such as {example}: {item!r} has no {separator!r}")
        pairs.append((name.strip(), val.strip()))
    names = [n for n, _ in pairs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise Invalid(value, f"{what} with each name once ({', '.join(duplicates)} repeated)")
    return pairs


def _is_qualified_name(name):
    prefix, slash, base = name.rpartition("/")
    if slash and not (len(prefix) <= 253 and all(_DNS_LABEL.match(p) for p in prefix.split("."))):
        return False
    return len(base) <= 63 and bool(_K8S_NAME_PART.match(base))


def _is_label_value(val):
    return val == "" or (len(val) <= 63 and bool(_K8S_NAME_PART.match(val)))


def _label_namespace_allowed(name):
    namespace = name.rpartition("/")[0]
    is_kubernetes = any(namespace == d or namespace.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))
    if not is_kubernetes or name in KUBELET_LABELS:
        return True
    return any(namespace == ns or namespace.endswith("." + ns) for ns in KUBELET_LABEL_NAMESPACES)


def check_key_value_list(value, kind="label"):
    """label, tag and reserved lists are name=value; eviction lists are signal<threshold.
    The typed value is the list of normalised "name=value" (or "signal<threshold") items."""
    if value == "":
        return []
    separator = "<" if kind == "eviction" else "="
    if kind == "label":
        pairs = _items(value, "=", "name=value labels", "tier=edge,site=lyon")
        for name, val in pairs:
            if not _is_qualified_name(name) or not _is_label_value(val):
                raise Invalid(value, f"Kubernetes labels name=value: {name}={val} is not a valid label "
                                     "(names and values: up to 63 letters, digits, '-', '_', '.', "
                                     "alphanumeric at both ends; a name may have a DNS prefix/)")
            if not _label_namespace_allowed(name):
                raise Invalid(value, f"labels the kubelet may set: {name} is in the kubernetes.io/k8s.io "
                                     f"namespace, where only {', '.join(KUBELET_LABEL_NAMESPACES)} "
                                     "prefixes and the well-known labels are allowed; add it with "
                                     "kubectl label after the node joined")
    elif kind == "tag":
        pairs = _items(value, "=", "name=value tags", "env=edge,site=lyon")
        for name, val in pairs:
            if not name or len(name) > 512 or _TAG_FORBIDDEN & set(name) or len(val) > 256:
                raise Invalid(value, f"Azure tags name=value: {name}={val} is not valid (names up to "
                                     "512 characters without < > % & \\ ? /, values up to 256)")
    elif kind == "reserved":
        pairs = _items(value, "=", "resource=quantity pairs", "cpu=100m,memory=512Mi")
        for name, val in pairs:
            if name not in RESERVED_RESOURCES or not _QUANTITY.match(val):
                raise Invalid(value, "resource=quantity pairs with resource one of "
                                     f"{', '.join(RESERVED_RESOURCES)} and a quantity such as 100m or 512Mi "
                                     f"({name}={val} is not)")
    elif kind == "eviction":
        pairs = _items(value, "<", "signal<threshold pairs", "memory.available<100Mi,nodefs.available<10%")
        for name, val in pairs:
            if name not in EVICTION_SIGNALS or not (_QUANTITY.match(val) or _PERCENT.match(val)):
                raise Invalid(value, f"signal<threshold pairs with signal one of {', '.join(EVICTION_SIGNALS)} "
                                     f"and a quantity or percentage such as 100Mi or 10% ({name}<{val} is not)")
    else:
        raise ValueError(f"configspec: unknown key_value_list kind {kind!r}")
    return [f"{name}{separator}{val}" for name, val in pairs]


def check_taint_list(value):
    if value == "":
        return []
    taints = []
    expected = ("taints key=value:Effect or key:Effect separated by commas, Effect one of "
                + ", ".join(TAINT_EFFECTS))
    for item in value.split(","):
        item = item.strip()
        head, colon, effect = item.rpartition(":")
        key, _, val = head.partition("=")
        if not colon or effect not in TAINT_EFFECTS or not _is_qualified_name(key) or not _is_label_value(val):
            raise Invalid(value, f"{expected} ({item!r} is not)")
        taints.append(item)
    return taints


def check_ip_address(value):
    if value == "":
        return ""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise Invalid(value, "an IPv4 or IPv6 address such as 10.0.0.10") from None


def check_cidr(value):
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError:
        raise Invalid(value, "a network in CIDR notation with no host bits set, such as 10.244.0.0/24") from None


def check_dns_domain(value):
    if len(value) > 253 or not all(_DNS_LABEL.match(label) for label in value.split(".")):
        raise Invalid(value, "a lowercase DNS domain such as cluster.local")
    return value


def check_host_port(value):
    expected = "host:port such as 127.0.0.1:10257 (an IPv6 address in brackets: [::1]:10257)"
    host, colon, port = value.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise Invalid(value, expected)
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise Invalid(value, expected) from None
    elif not host or not all(_DNS_LABEL.match(label) for label in host.lower().split(".")):
        raise Invalid(value, expected)
    return value


def check_host_list(value):
    if value == "":
        return []
    entries = [e.strip() for e in value.split(",")]
    for entry in entries:
        if not entry or not _NO_PROXY_ENTRY.match(entry):
            raise Invalid(value, "hosts, .domains, IP addresses or CIDRs separated by commas, "
                                 f"such as localhost,127.0.0.1,.example.com ({entry!r} is not)")
    return entries


CHECKS = {
    "uuid": check_uuid,
    "option": check_option,
    "integer": check_integer,
    "url": check_url,
    "abs_path": check_abs_path,
    "command": check_command,
    "k8s_name": check_k8s_name,
    "resource_group": check_resource_group,
    "location": check_location,
    "resource_id": check_resource_id,
    "version": check_version,
    "k8s_version": check_k8s_version,
    "image_ref": check_image_ref,
    "url_template": check_url_template,
    "checksum_template": check_checksum_template,
    "key_value_list": check_key_value_list,
    "taint_list": check_taint_list,
    "ip_address": check_ip_address,
    "cidr": check_cidr,
    "dns_domain": check_dns_domain,
    "host_port": check_host_port,
    "host_list": check_host_list,
}


def _validator():
    return Validator(CHECKS)


# --------------------------------------------------------------------------------------
# Values <-> text


def serialize(key, value):
    """The one-line text of a typed value, as written in the file."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        separator = "<" if key == "eviction_hard" else "="
        return ",".join(f"{k}{separator}{v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value).strip()


def redact_url(value):
    """https://user:pass@host -> https://***@host: proxy credentials never reach output."""
    if isinstance(value, str) and "@" in value and "://" in value:
        scheme, rest = value.split("://", 1)
        userinfo, at, hostpart = rest.rpartition("@")
        if at and "/" not in userinfo:
            return f"{scheme}://{REDACTED}@{hostpart}"
    return value


def _is_secret_key(key):
    return bool(_SECRET_WORDS.search(key)) and not key.endswith(("_file", "_dir", "_endpoint"))


def _shown(key, value):
    """A value as it may appear in an error or output: secrets and proxy credentials hidden."""
    if _is_secret_key(key):
        return REDACTED
    if key == "https_proxy":
        return redact_url(value)
    return value


def render_default():
    """The default configuration file: every key with its comment; required ones empty."""
    spec = _spec()
    validator = _validator()
    lines = list(spec.initial_comment)
    for section in spec.sections:
        lines += spec.comments.get(section, [])
        lines.append(f"[{section}]")
        for key in spec[section].scalars:
            lines += spec[section].comments.get(key, [])
            check = spec[section][key]
            default = "" if "default=" not in check else serialize(key, validator.get_default_value(check))
            lines.append(f"{key} = {default}".rstrip())
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _host_path(root, node_path):
    """A path on the node (absolute) as a path on this filesystem under `root`."""
    root = str(root or "/")
    return Path(node_path) if root == "/" else Path(root) / str(node_path).lstrip("/")


def _file_path(path, root):
    """The configuration file: an absolute path is a node path (under `root`, as every
    path the Host is given); a relative one is taken from the working directory; None is
    DEFAULT_PATH."""
    path = str(path or DEFAULT_PATH)
    return _host_path(root, path) if path.startswith("/") else Path(path)


# --------------------------------------------------------------------------------------
# The effective configuration


class Config(Mapping):
    """The checked configuration: typed values by key (`cfg.max_pods`, `cfg["max_pods"]`).

    Defaults are filled in and resolved: machine_name (the hostname), subscription_id and
    arc_resource_group (the cluster's). arc_location and kubernetes_version stay "" when
    they mean "the cluster's" (a step resolves them).
    """

    def __init__(self, values, source=None, root="/", warnings=(), client_secret=None):
        self._values = dict(values)
        self.source = source
        self.root = Path(root or "/")
        self.warnings = list(warnings)
        self._client_secret = client_secret  # only from an upstream config.json, held in memory
        self._cluster = parse_cluster_id(self._values["cluster_resource_id"])
        ca_bundle = self._values.get("ca_bundle") or None
        self._endpoints = clouds.endpoints(
            self._values["cloud"], self._values.get("arm_endpoint", ""), self._values.get("authority_host", ""),
            str(self.host_path(ca_bundle)) if ca_bundle else None,
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
    def endpoints(self):
        """CloudEndpoints(name, arm, authority, arm_scope, ca_bundle) of the configured cloud."""
        return self._endpoints

    def host_path(self, node_path):
        """A path on the node as a Path on this filesystem (joined with the root)."""
        return _host_path(self.root, node_path)

    def client_secret(self):
        """The service principal's client secret: the one read from an upstream config.json
        (held in memory), else the content of sp_client_secret_file; None if neither."""
        if self._client_secret:
            return self._client_secret
        node_path = self._values.get("sp_client_secret_file")
        if not node_path:
            return None
        try:
            secret = self.host_path(node_path).read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            expected = f"a readable file holding the client secret ({err.__class__.__name__})"
        else:
            if secret:
                return secret
            expected = "a file holding the client secret, not an empty one"
        raise ConfigError([ConfigProblem("sp_client_secret_file", node_path, expected)], source=self.source)

    def artifact_urls(self, name, version, arch):
        """(url, checksum_url) of an artifact (kubernetes, containerd, runc, cni)."""
        if name not in ARTIFACTS:
            raise ValueError(f"artifact {name!r}: expected one of {', '.join(ARTIFACTS)}")
        if arch not in ARCHES:
            raise ValueError(f"arch {arch!r}: expected one of {', '.join(ARCHES)}")
        if not version:
            raise ValueError(f"{name}: a version is needed to build its download URL")
        mirror = self._values.get("artifact_mirror")
        if mirror:
            url = f"{mirror.rstrip('/')}/{MIRROR_FILENAMES[name].format(version=version, arch=arch)}"
            return url, url + ".sha256"
        url = self._values[f"{name}_url"].format(version=version, arch=arch)
        checksum_url = self._values[f"{name}_sha256_url"].format(url=url, version=version, arch=arch)
        return url, checksum_url

    def as_dict(self, redact=True):
        """The effective configuration, by key in file order. With redact, values whose key
        names a secret and proxy credentials are replaced by ***; paths of secret files stay."""
        out = {}
        for key, value in self._values.items():
            value = value.copy() if isinstance(value, (dict, list)) else value
            out[key] = _shown(key, value) if redact else value
        return out


# --------------------------------------------------------------------------------------
# Reading


def load(path=None, root="/", overrides=None):
    """Read, check and return the configuration; ConfigError lists every problem.

    `path` (default DEFAULT_PATH), if absolute, is a node path looked up under `root`; a
    relative one is taken from the working directory. `overrides`
    (key -> value, e.g. from command-line flags) replace the file's values before the
    checks; a value of None unsets a key. Files the configuration names (secret,
    certificate, CA bundle) are node paths, looked up under `root`.
    """
    file_path = _file_path(path, root)
    source = str(file_path)
    if not file_path.exists():
        err = ConfigError([ConfigProblem(
            "config file", source,
            "an existing file: create it with `aks-flex-node config import <config.json>` "
            f"or by editing {DEFAULT_PATH} (the package ships one with every key)")], source=source)
        err.remedy = f"create {source}: aks-flex-node config import <config.json>, or edit the shipped template"
        raise err
    raw, problems = _read_file(file_path)
    proxy = raw.get("https_proxy") or ""
    if redact_url(proxy) != proxy and stat.S_IMODE(file_path.stat().st_mode) & 0o077:
        problems.append(ConfigProblem("https_proxy", redact_url(proxy),
                                      f"no credentials in a file others can read: chmod 600 {source}"))
        raw["https_proxy"] = None
    return _build(raw, problems, source, root, overrides)


def from_values(values, root="/", source=None, overrides=None, client_secret=None, warnings=()):
    """Check a dict of key -> value (text or typed) as if it were a file; return a Config."""
    raw, problems = {}, []
    for key, value in values.items():
        _take_value(key, value, raw, problems, origin="value")
    return _build(raw, problems, source, root, overrides, client_secret=client_secret, warnings=warnings)


def _parse_problem(error):
    """A configobj parse error as a problem on its line."""
    if not hasattr(error, "line_number"):
        return ConfigProblem("config file", "", f"a file configobj can parse ({error})")
    kinds = {
        "DuplicateError": "each key and section once",
        "NestingError": "sections without nesting: [section] only",
        "UnreprError": "key = value",
    }
    expected = kinds.get(type(error).__name__, "key = value, a [section] line, or a # comment line")
    return ConfigProblem(f"line {error.line_number}", error.line.strip(), expected)


def _open_configobj(source, **kwargs):
    return configobj.ConfigObj(
        source, list_values=False, interpolation=False, encoding="utf-8", raise_errors=False,
        write_empty_values=True, file_error=True, **kwargs)


def _read_file(file_path):
    """(raw values by key, problems) from the file; structural problems are all reported."""
    problems = []
    try:
        parsed = _open_configobj(str(file_path))
    except configobj.ConfigObjError as err:
        # configobj goes on after a bad line: report every one, and check what it did read
        problems += [_parse_problem(e) for e in getattr(err, "errors", None) or [err]]
        parsed = getattr(err, "config", None)
        if parsed is None:
            raise ConfigError(problems, source=str(file_path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError([ConfigProblem("config file", str(file_path),
                                         f"a readable UTF-8 text file ({err.__class__.__name__}: {err})")],
                          source=str(file_path)) from None
    raw = {}
    sections = _sections()
    for key in parsed.scalars:
        problems.append(_misplaced(key, parsed[key], None))
    for name in parsed.sections:
        section = parsed[name]
        if name not in sections:
            near = difflib.get_close_matches(name, list(sections), n=1)
            hint = f" (did you mean [{near[0]}]?)" if near else ""
            problems.append(ConfigProblem(f"[{name}]", "", "one of the sections " +
                                          ", ".join(f"[{s}]" for s in sections) + hint))
            continue
        for sub in section.sections:
            problems.append(ConfigProblem(f"[{name}] [[{sub}]]", "",
                                          f"no subsections: keys go directly in [{name}]"))
        for key in section.scalars:
            value = section[key]
            if key not in sections[name]:
                problems.append(_misplaced(key, value, name))
                continue
            if section.inline_comments.get(key):
                problems.append(ConfigProblem(key, _shown(key, value),
                                              "no comment after the value (sh readers would take it as part "
                                              "of the value): put the comment on its own line"))
            _take_value(key, value, raw, problems, origin="file")
    return raw, problems


def _misplaced(key, value, section):
    """The problem of a key in the wrong place: another section, a typo, an inline secret."""
    home = _section_of().get(key)
    if home:
        where = f"[{section}]" if section else "outside any section"
        return ConfigProblem(key, _shown(key, value), f"{key} in section [{home}], not {where}")
    if _is_secret_key(key):
        return ConfigProblem(key, REDACTED,
                             "no secret in the configuration: write the client secret to a file only root "
                             "can read (chmod 600) and name that file in sp_client_secret_file")
    near = difflib.get_close_matches(key, keys(), n=1, cutoff=0.6) or \
        difflib.get_close_matches(key.lower().replace("-", "_"), keys(), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}?" if near else "see configuration.md for the list"
    return ConfigProblem(key, _shown(key, value), f"a known key ({hint})")


def _take_value(key, value, raw, problems, origin):
    """Put one key's text into raw, or a problem if it cannot be read as one line."""
    if key not in _section_of():
        problems.append(_misplaced(key, value, None))
        return
    text = value if isinstance(value, str) else serialize(key, value)
    if "\n" in text or "\r" in text:
        problems.append(ConfigProblem(key, _shown(key, text), "a value on a single line"))
        raw[key] = None  # reported: no "missing" problem on top
        return
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        problems.append(ConfigProblem(key, _shown(key, text),
                                      "the value without quotes (values are taken literally)"))
        raw[key] = None
        return
    if origin != "file" and "#" in text:
        problems.append(ConfigProblem(key, _shown(key, text),
                                      "a value without '#' (it starts a comment in the file)"))
        raw[key] = None
        return
    raw[key] = text


# --------------------------------------------------------------------------------------
# Checking


def _build(raw, problems, source, root, overrides, client_secret=None, warnings=()):
    problems = list(problems)
    raw = dict(raw)
    for key, value in (overrides or {}).items():
        if value is None and key in _section_of():
            raw.pop(key, None)
        else:
            _take_value(key, value, raw, problems, origin="override")
    reported = {key for key, value in raw.items() if value is None}
    values, failed = _validate(raw, reported, problems)
    failed |= reported
    _check_meaning(values, failed, root, client_secret, problems)
    if problems:
        problems.sort(key=lambda p: _key_order(p.key))
        raise ConfigError(problems, source=source)
    return Config(values, source=source, root=root, warnings=warnings, client_secret=client_secret)


def _validate(raw, reported, problems):
    """configobj validate over the non-empty values: (typed values, keys that failed)."""
    spec = _spec()
    sections = _sections()
    document = configobj.ConfigObj(configspec=spec, list_values=False, interpolation=False)
    for section, section_keys in sections.items():
        document[section] = {k: raw[k] for k in section_keys if raw.get(k)}  # "" = unset
    results = document.validate(_validator(), preserve_errors=True)
    failed = set()
    for _section_path, key, error in configobj.flatten_errors(document, results):
        if key is None:
            continue
        failed.add(key)
        if key in reported:
            continue
        if error is False:
            problems.append(ConfigProblem(key, "", _required_expected(key)))
        elif isinstance(error, Invalid):
            problems.append(ConfigProblem(key, _shown(key, raw.get(key, "")), error.expected))
        else:
            problems.append(ConfigProblem(key, _shown(key, raw.get(key, "")), str(error)))
    values = {}
    for section, section_keys in sections.items():
        for key in section_keys:
            if key not in failed:
                values[key] = document[section][key]
    return values, failed


def _check_meaning(values, failed, root, client_secret, problems):
    """Checks across keys and against the host, on the values that passed validate."""
    ok = lambda *names: not any(n in failed for n in names)  # noqa: E731

    if ok("cluster_resource_id"):
        cluster = parse_cluster_id(values["cluster_resource_id"])
        # The Arc machine may live in another subscription than the cluster; by default
        # it goes next to the cluster (upstream-go-agent.md §2: arc.resourceGroup).
        if ok("subscription_id") and not values["subscription_id"]:
            values["subscription_id"] = cluster.subscription_id
        if ok("arc_resource_group") and not values["arc_resource_group"]:
            values["arc_resource_group"] = cluster.resource_group

    if ok("machine_name") and not values["machine_name"]:
        hostname = _hostname(root)
        if is_machine_name(hostname.lower()):
            values["machine_name"] = hostname.lower()  # upstream #184/#189: lowercase default
        else:
            failed.add("machine_name")
            problems.append(ConfigProblem(
                "machine_name", f"{hostname} (this host's name)",
                f"{MACHINE_NAME_EXPECTED}: the hostname is not one, so set machine_name in [arc]"))

    if ok("cloud"):
        if values["cloud"] == clouds.CUSTOM:
            for key in ("arm_endpoint", "authority_host"):
                if ok(key) and not values[key]:
                    problems.append(ConfigProblem(key, "", f"an https URL: {key} is required with cloud = custom"))
        else:
            for key in ("arm_endpoint", "authority_host"):
                if ok(key) and values[key]:
                    problems.append(ConfigProblem(key, values[key], f"no value with cloud = {values['cloud']} "
                                                  "(its endpoints are known); set cloud = custom to use your own"))

    _check_auth(values, ok, client_secret, problems)

    if ok("ca_bundle") and values["ca_bundle"]:
        _check_file("ca_bundle", values["ca_bundle"], root, problems, private=False, pem=("CERTIFICATE",))
    if ok("sp_client_secret_file") and values["sp_client_secret_file"]:
        _check_file("sp_client_secret_file", values["sp_client_secret_file"], root, problems, private=True)
    if ok("sp_certificate_file") and values["sp_certificate_file"]:
        _check_file("sp_certificate_file", values["sp_certificate_file"], root, problems, private=True,
                    pem=("CERTIFICATE", "PRIVATE KEY"))

    if ok("node_labels"):
        labels = values["node_labels"]
        name = MANAGED_LABEL.partition("=")[0]
        if any(label.partition("=")[0] == name and label != MANAGED_LABEL for label in labels):
            problems.append(ConfigProblem("node_labels", serialize("node_labels", labels),
                                          f"{MANAGED_LABEL} or no {name} label: it is always false, "
                                          "or the cloud controller deletes the node"))
        elif MANAGED_LABEL not in labels:
            labels.append(MANAGED_LABEL)


def _check_auth(values, ok, client_secret, problems):
    if not ok("auth_method"):
        if ok("sp_client_id") and values.get("sp_client_id"):
            for problem in problems:
                if problem.key == "auth_method" and problem.value == "":
                    problem.expected += "; sp_client_id is set, so service-principal?"
        return
    method = values["auth_method"]
    sp_keys = ("sp_client_id", "sp_client_secret_file", "sp_certificate_file")
    if method == "service-principal":
        if ok("sp_client_id") and not values["sp_client_id"]:
            problems.append(ConfigProblem("sp_client_id", "", "the service principal's application (client) ID, "
                                                              "required with auth_method = service-principal"))
        secret, cert = values.get("sp_client_secret_file"), values.get("sp_certificate_file")
        if ok("sp_client_secret_file", "sp_certificate_file"):
            if secret and cert:
                problems.append(ConfigProblem("sp_certificate_file", cert,
                                              "only one of sp_client_secret_file and sp_certificate_file"))
            elif not secret and not cert and not client_secret:
                problems.append(ConfigProblem(
                    "sp_client_secret_file", "",
                    "a file (owned by root, mode 0600) holding the client secret, or sp_certificate_file: "
                    "one is required with auth_method = service-principal"))
    else:
        for key in sp_keys:
            if ok(key) and values[key]:
                problems.append(ConfigProblem(
                    key, values[key],
                    f"no value with auth_method = {method}: it is used with service-principal only"))
    if method != "managed-identity" and ok("managed_identity_client_id") and values["managed_identity_client_id"]:
        problems.append(ConfigProblem(
            "managed_identity_client_id", values["managed_identity_client_id"],
            f"no value with auth_method = {method}: it is used with managed-identity only"))


def _check_file(key, node_path, root, problems, private, pem=()):
    """A file named by the config: there, regular, not empty; a private one readable by its
    owner only and owned by root (or by the user running us); a PEM one with its blocks."""
    path = _host_path(root, node_path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        problems.append(ConfigProblem(key, node_path, f"an existing file ({path} does not exist)"))
        return
    except OSError as err:
        problems.append(ConfigProblem(key, node_path, f"a file aks-flex-node can read ({err.strerror})"))
        return
    if not stat.S_ISREG(st.st_mode):
        problems.append(ConfigProblem(key, node_path, "a regular file"))
        return
    if private:
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            problems.append(ConfigProblem(key, node_path, f"a file only its owner can read (mode 0600, not "
                                                          f"{mode:04o}): chmod 600 {node_path}"))
        if st.st_uid not in (0, os.geteuid()):
            problems.append(ConfigProblem(key, node_path, f"a file owned by root (its owner is uid {st.st_uid}): "
                                                          f"chown root: {node_path}"))
    if st.st_size == 0:
        problems.append(ConfigProblem(key, node_path, "a file that is not empty"))
        return
    if pem:
        try:
            text = path.read_bytes().decode("ascii", "replace")
        except OSError as err:
            problems.append(ConfigProblem(key, node_path, f"a file aks-flex-node can read ({err.strerror})"))
            return
        missing = [kind for kind in pem if f"-----BEGIN {kind}-----" not in text and
                   not re.search(rf"-----BEGIN [A-Z ]*{kind}-----", text)]
        if missing:
            problems.append(ConfigProblem(key, node_path, "a PEM file with " + " and ".join(
                f"a {kind} block" for kind in pem) + f" (no {' or '.join(missing)} block found)"))


def _hostname(root):
    """This host's name: the kernel's, as the kubelet sees it; under another root (tests,
    image builds) that root's /etc/hostname, if it has one."""
    if str(root or "/") != "/":
        path = _host_path(root, "/etc/hostname")
        try:
            for line in path.read_text("utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    return line
        except OSError:
            pass
    return socket.gethostname()


# --------------------------------------------------------------------------------------
# Writing


def write(path, values, root="/"):
    """Write values (key -> text or typed value) into the configuration file, atomically,
    mode 0600. An existing file keeps its other keys, comments and hand edits (configobj
    round trip); a new one gets the default file's layout and comments. `path` as for
    load(). Values are checked for shape (known key, one line); load() checks their
    meaning."""
    file_path = _file_path(path, root)
    source = str(file_path)
    problems = []
    texts = {}
    for key, value in values.items():
        raw = {}
        _take_value(key, value, raw, problems, origin="write")
        if raw.get(key) is not None:
            texts[key] = raw[key]
    if file_path.exists():
        try:
            document = _open_configobj(str(file_path))
        except configobj.ConfigObjError as err:
            problems += [_parse_problem(e) for e in getattr(err, "errors", None) or [err]]
    else:
        document = _open_configobj(render_default().splitlines())
    if problems:
        raise ConfigError(problems, source=source)
    spec = _spec()
    for key, text in texts.items():
        home = section_of(key)
        for name in document.sections:  # a hand-placed copy in the wrong section goes
            if name != home and key in document[name].scalars:
                del document[name][key]
        if home not in document.sections:
            document[home] = {}
            document.comments[home] = list(spec.comments.get(home, [])) or [""]
        if key not in document[home].scalars:
            document[home][key] = text
            document[home].comments[key] = list(spec[home].comments.get(key, []))
        document[home][key] = text
    document.filename = None
    # With an encoding set, configobj returns the lines encoded.
    lines = [line.decode("utf-8") if isinstance(line, bytes) else line for line in document.write()]
    _atomic_write(file_path, "\n".join(line.rstrip() for line in lines) + "\n", 0o600)
    return source


def _atomic_write(path, text, mode):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------------------
# The upstream agent's config.json


def load_upstream_json(path, root="/", overrides=None):
    """A Config from the upstream Go agent's config.json (so `--config config.json` works).

    The service principal's secret, if the file has one, is held in memory only
    (Config.client_secret()); conversion warnings are in Config.warnings.
    """
    from aks_flex_node import upstream_config

    file_path = _file_path(path, root)
    values, secrets, warnings = upstream_config.load_file(file_path)
    return from_values(values, root=root, source=str(file_path), overrides=overrides,
                       client_secret=secrets.get("sp_client_secret"), warnings=warnings)


def main(argv=None):
    """`python3 -m aks_flex_node.config default` prints the default configuration file."""
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["default"]:
        sys.stderr.write("usage: python3 -m aks_flex_node.config default\n")
        return 2
    sys.stdout.write(render_default())
    return 0


if __name__ == "__main__":
    sys.exit(main())
