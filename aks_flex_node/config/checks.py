"""The check functions configobj's Validator calls for each type the configspec names.

Each takes the raw string ("" = unset, which only reaches a check through a default of "")
and returns the typed value, or raises Invalid naming what is expected. They look at one
value only; what needs several keys or the host is in `semantic`.
"""

import os
import re
import string
from urllib.parse import unquote, urlsplit

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

from aks_flex_node import window
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
    "mirror": 2048,
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
    # Registries and their mirrors: a handful of host=https://host:port pairs.
    "registry_mirrors": 16384,
}
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

_COMMAND_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")


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


MIRROR_LOCAL = "file:// and an absolute path (file:///media/usb/aks-flex-node; a space written %20)"
MIRROR_EXPECTED = f"a URL starting with https:// and naming a host, or {MIRROR_LOCAL}"


def check_mirror(value):
    """artifact_mirror: an https URL (check_url's rules), or a local directory as a file URL
    with an empty authority and an absolute path (RFC 8089 section 2: file:///path; a
    relative path, or a host, is refused rather than guessed at). Percent-escapes in the
    path are decoded where it is used (config/model.py mirror_directory)."""
    if value == "" or not value.lower().startswith("file:"):
        try:
            return check_url(value)
        except Invalid as err:
            raise Invalid(value, f"{err.expected}; or {MIRROR_LOCAL}") from None
    if any(c.isspace() for c in value) or "\0" in value:
        raise Invalid(value, MIRROR_EXPECTED)
    parts = urlsplit(value)
    path = unquote(parts.path)
    if parts.scheme != "file" or not value.startswith("file:///") or parts.netloc or parts.query \
            or parts.fragment or "\0" in path or not path.startswith("/"):
        raise Invalid(value, MIRROR_EXPECTED)
    if any(segment in (".", "..") for segment in path.split("/")):
        raise Invalid(value, MIRROR_EXPECTED + ", without . or .. in it")
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


