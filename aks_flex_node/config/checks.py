"""The check functions configobj's Validator calls for each type the configspec names.

Each takes the raw string ("" = unset, which only reaches a check through a default of "")
and returns the typed value, or raises Invalid naming what is expected. They look at one
value only; what needs several keys or the host is in `semantic`.
"""

import ipaddress
import os
import re
import string
from urllib.parse import urlsplit

try:
    from configobj.validate import ValidateError, Validator, is_integer
except ImportError:
    # configobj 5.0.6 (Ubuntu 22.04's python3-configobj) ships `validate` as a top-level
    # module; 5.0.7 moved it into the package as configobj.validate and 5.0.8 keeps a
    # top-level `validate` shim whose own docstring says it is expected to go (configobj's
    # CHANGES.rst, "Release 5.0.8"). The one place the config imports it (spec.py and
    # model.py take it from here); not in azure/sdk_compat.py: the config never imports
    # the Azure SDK.
    from validate import ValidateError, Validator, is_integer

from aks_flex_node.config.cluster_ref import CLUSTER_ID_EXAMPLE, parse_cluster_id
from aks_flex_node.http_policy import is_loopback
from aks_flex_node.kubeversion import KubeVersion, VersionError


def validator(functions):
    """configobj's Validator with `functions` (configspec type name -> check) registered."""
    return Validator(functions)


class Invalid(ValidateError):
    def __init__(self, value, expected, shown=None):
        super().__init__(f"{value!r}: expected {expected}")
        self.value = value
        self.expected = expected
        self.shown = shown  # what an error may show of the value, when not all of it


# The longest text each configspec type accepts. spec.validator() checks it before the
# type's own check, so no pattern and no error message ever gets a megabyte. Where a
# documented limit exists it is the limit; elsewhere a bound well above any real value.
MAX_LENGTH = {
    "uuid": 64,  # 36 in the canonical form; the pattern says the rest
    "option": 64,
    "integer": 32,
    # RFC 9110 section 4.1 asks for at least 8000 octets; 2048 is far above any endpoint,
    # mirror or artifact URL we are given and what most browsers and proxies handle.
    "url": 2048,
    "url_template": 2048,
    "checksum_template": 2048,
    # PATH_MAX is 4096 bytes with the terminating NUL (limits.h, path_resolution(7)).
    "abs_path": 4095,
    "managed_dir": 4095,
    "command": 4095,
    "k8s_name": 253,  # an RFC 1123 subdomain; machine names stop at 54 (the check says so)
    # Learn, "Naming rules and restrictions for Azure resources": resource groups 1-90.
    "resource_group": 90,
    # Region names have no documented limit; the longest (australiasoutheast,
    # germanywestcentral, `az account list-locations`) have 18 characters.
    "location": 32,
    # /subscriptions/<36>/resourceGroups/<90>/providers/Microsoft.ContainerService/
    # managedClusters/<63> is 273 characters at most.
    "resource_id": 300,
    "version": 128,
    "k8s_version": 32,
    "upgrade_window": 64,  # "Mon,Tue,Wed,Thu,Fri,Sat,Sun 00:00-23:59" has 39 characters
    # distribution/reference: a repository name of at most 255 characters
    # (NameTotalLengthMax), a tag of 128, a sha256 digest of 71, and their separators.
    "image_ref": 512,
    # Lists: Azure allows 50 tags (check_key_value_list counts them), labels and taints
    # have per-item limits only; 16 KiB is far above what a node is given.
    "key_value_list": 16384,
    "taint_list": 16384,
    "host_list": 16384,
    "ip_address": 64,  # an IPv6 address with a zone index
    "cidr": 64,
    "dns_domain": 253,  # RFC 1035 section 2.3.4
    "host_port": 262,  # a 253-character name, or [IPv6], and :65535
    "role_preset": 64,
    "agent_pool": 64,  # 12 by the pattern; the check says so
    "api_server": 2048,
}
# Learn, "Use tags to organize your Azure resources": at most 50 tag name-value pairs.
MAX_TAGS = 50
_SHOWN_LENGTH = 40


class TooLong(Invalid):
    """A value longer than its type allows: the error shows its start and its length."""

    def __init__(self, value, limit):
        super().__init__(value, f"at most {limit} characters (this value has {len(value)})",
                         shown=shorten(value))
        self.limit = limit


def shorten(text):
    """The start of a long text, for an error message; a short one is returned as is."""
    return text if len(text) <= _SHOWN_LENGTH else text[:_SHOWN_LENGTH] + "…"


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kubernetes qualified name part and label value (k8s.io apimachinery validation: 63 max,
# alphanumeric at both ends, '-', '_', '.' inside).
_K8S_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# Resource group names: common-types v5 ResourceGroupNameParameter, 1..90 characters.
_RESOURCE_GROUP = re.compile(r"^[-\w._()]{1,90}$")
# Arc machine names are at most 54 characters (HybridCompute 2026-07-15 openapi.json,
# machineName); node names are RFC 1123 subdomains, lowercase.
MACHINE_NAME_MAX = 54
MACHINE_NAME_EXPECTED = (
    "a lowercase name of letters, digits, '-' and '.', starting and ending with a letter "
    f"or digit, at most {MACHINE_NAME_MAX} characters (a Kubernetes node name that is "
    "also a valid Arc machine name)"
)
# A Machine of a FlexNodes agent pool: the machineName path parameter of Machines_Get and
# Machines_CreateOrUpdate (Azure/azure-rest-api-specs, specification/containerservice/
# resource-manager/Microsoft.ContainerService/aks/preview/2026-05-02-preview/managedClusters.json).
# In agent-pool mode the name is both that and the Node's name, so a dotted DNS host name,
# fine for an Arc machine and a Node, is not one.
AGENT_POOL_MACHINE_PATTERN = r"^[a-z][a-z0-9]{0,11}$|^[a-zA-Z0-9][-_a-zA-Z0-9]{0,39}$"
_AGENT_POOL_MACHINE = re.compile(AGENT_POOL_MACHINE_PATTERN)
AGENT_POOL_MACHINE_EXPECTED = (
    f"a Machine name of the agent pool (the AKS API's pattern {AGENT_POOL_MACHINE_PATTERN}) that is also "
    "a Kubernetes node name: lowercase letters, digits and '-', starting and ending with a letter or "
    "digit, at most 40 characters, no '.'"
)
_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z][0-9A-Za-z.-]*)?)$", re.ASCII)
_IMAGE_REF = re.compile(
    r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?"  # registry host (or first path part)
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"  # path
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$",  # tag, digest
    re.ASCII)
_QUANTITY = re.compile(r"^\d+(?:\.\d+)?(?:m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$", re.ASCII)
_PERCENT = re.compile(r"^\d+(?:\.\d+)?%$", re.ASCII)
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
    # "" reaches a check only through a default of "" (auth_method: required or not
    # depending on join_mode, which `semantic` decides).
    if value not in options and value != "":
        raise Invalid(value, "one of " + ", ".join(options))
    return value


ROLE_PRESETS = ("legacy",)
# The "minimal" preset assigned the Azure Kubernetes Service Flex Node Agent Role
# (8f139b0f-7eaf-460b-a9da-5b1246d9ed0d) to the Arc identity; that role has no
# DataActions (Azure/AKSFlexNode docs/usage/getting-started.md), so the kubelet it
# authenticates gets no Kubernetes permissions and the node never registers. Its
# least-privilege use is the agent pool's, which join_mode = agent-pool is.
RETIRED_ROLE_PRESETS = {
    "minimal": ("legacy; the minimal preset is gone: the Azure Kubernetes Service Flex Node Agent Role "
                "gives no Kubernetes permissions, so an Arc node with it cannot register. "
                "For least privilege use join_mode = agent-pool (docs/roles.md)"),
}


def check_role_preset(value):
    if value in RETIRED_ROLE_PRESETS:
        raise Invalid(value, RETIRED_ROLE_PRESETS[value])
    return check_option(value, *ROLE_PRESETS) if value else value


# AgentPool names: the AKS spec's agentPoolName pattern (Microsoft.ContainerService
# aks/preview/2026-05-02-preview/managedClusters.json, parameter AgentPoolNameParameter).
_AGENT_POOL = re.compile(r"^[a-z][a-z0-9]{0,11}$")
AGENT_POOL_EXPECTED = ("an agent pool name: a lowercase letter, then up to 11 lowercase letters or digits "
                       "(such as flexpool)")


def check_agent_pool(value):
    if value == "":
        return ""
    if not _AGENT_POOL.match(value):
        raise Invalid(value, AGENT_POOL_EXPECTED)
    return value


API_SERVER_EXPECTED = ("the API server as an https URL or host[:port], such as "
                       "https://aks-edge-dns-12345678.hcp.westeurope.azmk8s.io:443 or 10.1.0.4:6443")


def api_server_url(value):
    """An api_server value as https://host:port (443 when it names none), or None if it is
    not one: an https URL with nothing after the host but "/", or host[:port]."""
    if any(c.isspace() for c in value) or "\0" in value:
        return None
    text = value if "://" in value else "https://" + value
    try:
        parts = urlsplit(text)
        port = parts.port or 443
    except ValueError:
        return None
    host = parts.hostname
    if parts.scheme != "https" or not host or parts.username or parts.password:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or text.endswith(("?", "#")):
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not all(_DNS_LABEL.match(label) for label in host.split(".")):
            return None
        return f"https://{host}:{port}"
    return f"https://[{address}]:{port}" if address.version == 6 else f"https://{address}:{port}"


def check_api_server(value):
    if value == "":
        return ""
    if api_server_url(value) is None:
        raise Invalid(value, API_SERVER_EXPECTED)
    return value


def check_integer(value, min=None, max=None):
    # int() takes any Unicode digit ("١١٠"); the kubelet and every file we write do not.
    if isinstance(value, str) and not value.isascii():
        raise Invalid(value, f"a whole number from {min} to {max}, in the digits 0-9")
    try:
        return is_integer(value, min, max)
    except ValidateError:
        raise Invalid(value, f"a whole number from {min} to {max}") from None


def check_url(value, scheme="https", credentials="no", host="any"):
    """`host = "loopback"`: only a URL on this machine (the HIMDS endpoint: its challenge
    key travels in clear over http, and it must never leave the machine)."""
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
    if host == "loopback" and not is_loopback(parts.hostname):
        raise Invalid(value, expected + " on this machine: 127.0.0.0/8, [::1] or localhost "
                             "(the HIMDS key must not leave the machine)")
    return value


def check_abs_path(value):
    if value == "":
        return ""
    if not value.startswith("/") or "\0" in value:
        raise Invalid(value, "an absolute path, starting with /")
    return os.path.normpath(value)


def check_command(value, search_path="yes"):
    """One program, run with the arguments aks-flex-node gives it: never "program args".
    The exec credential plugin's `command` in the kubelet's kubeconfig is one executable,
    its arguments go in `args` (client-go plugin/pkg/client/auth/exec/exec.go runs
    exec.Command(cmd, args...)), and we run azcmagent from an argv list, so a space would
    only ever be part of a file name that does not exist. `search_path = "no"`: an absolute
    path only (the kubelet's PATH is not ours to know)."""
    where = "an absolute path" if search_path == "no" else "a name found in PATH or an absolute path"
    expected = f"one program: {where}, without arguments (aks-flex-node passes them itself)"
    if any(c.isspace() for c in value):
        raise Invalid(value, expected + ": no spaces")
    if value.startswith("/"):
        return check_abs_path(value)
    if search_path == "no":
        raise Invalid(value, expected + ": starting with /")
    if not _COMMAND_NAME.match(value):
        raise Invalid(value, expected + ": a name of letters, digits, '.', '_', '+' and '-'")
    return value


def is_machine_name(name):
    if not name or len(name) > MACHINE_NAME_MAX:
        return False
    return all(_DNS_LABEL.match(label) for label in name.split("."))


def is_agent_pool_machine_name(name):
    """A name the agent pool takes for a Machine (the spec's pattern) and the cluster for the
    Node (is_machine_name): the two together."""
    return bool(_AGENT_POOL_MACHINE.match(name)) and is_machine_name(name)


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
    try:
        if value == value.strip():  # the value as typed, blanks included, is what is refused
            return str(KubeVersion.parse_release(value))
    except VersionError:
        pass
    raise Invalid(value, "a Kubernetes version x.y.z such as 1.30.4, or empty for the cluster's")


def check_upgrade_window(value):
    from aks_flex_node import window

    try:
        parsed = window.parse(value)
    except window.WindowError as err:
        raise Invalid(value, str(err) if str(err) == window.EXPECTED else f"{window.EXPECTED}: {err}") from None
    return "" if parsed is None else str(parsed)


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
        if len(pairs) > MAX_TAGS:
            raise Invalid(value, f"at most {MAX_TAGS} Azure tags (there are {len(pairs)})",
                          shown=shorten(value))
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


def check_cidr(value, min_addresses="1"):
    """A network as address/prefix-length, the prefix length written out (ipaddress takes
    a bare address as a /32), with at least `min_addresses` addresses."""
    expected = "a network in CIDR notation with no host bits set, such as 10.244.0.0/24"
    address, slash, length = value.partition("/")
    if not slash or not (length.isascii() and length.isdigit()):
        raise Invalid(value, expected + ": the /prefix-length is required")
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError:
        raise Invalid(value, expected) from None
    least = int(min_addresses)
    if network.num_addresses < least:
        longest = network.max_prefixlen - (least - 1).bit_length()
        raise Invalid(value, f"{expected}, of at least {least} addresses: /{longest} or shorter "
                             f"(a /{network.prefixlen} has {network.num_addresses})")
    return str(network)


def check_dns_domain(value):
    if len(value) > 253 or not all(_DNS_LABEL.match(label) for label in value.split(".")):
        raise Invalid(value, "a lowercase DNS domain such as cluster.local")
    return value


def check_host_port(value):
    expected = "host:port such as 127.0.0.1:10257 (an IPv6 address in brackets: [::1]:10257)"
    host, colon, port = value.rpartition(":")
    if not colon or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
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

