"""Values read from the wire (ARM, Entra, listBootstrapData, kubeconfigs, the API server),
checked where they enter, as configuration input is.

A value from a service is input like any other: a version becomes a download path and a
directory name, a host name a URL and a kubeconfig, CA data the trust of the kubelet. One
bad value from a broken or hostile answer must stop the run before anything is written,
with an error that names the answer (`source`, e.g. "ARM managedClusters GET"), the field
(its wire name, e.g. properties.currentKubernetesVersion) and the value (repr, bounded).
That error is permanent (exit 1): asking again gets the same answer, so it is never the
temporary class (exit 75) an agent retries forever.

One parse function per kind of value; each returns the value as we use it, or raises
BadCloudValue. Standard library only: kube/ uses them too, and `token` must stay light.
"""

import base64
import ipaddress
import re
import ssl
import urllib.parse

from aks_flex_node.errors import FlexNodeError
from aks_flex_node.kubeversion import KubeVersion, VersionError

SHOWN_MAX = 80  # characters of a bad value shown in an error (a megabyte answer stays readable)
HIDDEN = "(hidden)"


def shown(value, limit=SHOWN_MAX):
    """repr(value), cut to `limit` characters: control characters come out escaped, never raw."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class BadCloudValue(FlexNodeError):
    """A service answered with a value we refuse to use. Nothing was changed."""

    code = "bad-cloud-value"

    def __init__(self, source, field, value, expected, *, secret=False, code=None):
        self.source, self.field, self.expected = source, field, expected
        self.value = HIDDEN if secret else shown(value)
        super().__init__(f"{source}: {field} = {self.value}: expected {expected}",
                         remedy="the service's answer is wrong or was altered on the way: check the "
                         "resource in Azure (and any proxy between this machine and Azure); "
                         "asking again gets the same answer",
                         code=code)

    def to_dict(self):
        out = super().to_dict()
        out.update({"source": self.source, "field": self.field, "value": self.value, "expected": self.expected})
        return out


# ---- one parser per kind of value --------------------------------------------------------

def kube_release(value, source, field):
    """A Kubernetes release MAJOR.MINOR.PATCH (a leading "v" taken): the version we install,
    whose text names download paths and directories. No surrounding space: KubeVersion.parse
    strips it, and a version is never sent padded."""
    if not isinstance(value, str) or value != value.strip():
        raise BadCloudValue(source, field, value, "a Kubernetes release MAJOR.MINOR.PATCH such as 1.31.2")
    try:
        return KubeVersion.parse_release(value)
    except VersionError:
        raise BadCloudValue(source, field, value, "a Kubernetes release MAJOR.MINOR.PATCH such as 1.31.2") from None


def kube_version(value, source, field):
    """Any Kubernetes version KubeVersion reads (a gitVersion "v1.29.7-eks-1234", a minor
    line "1.32"); the text itself is returned, checked."""
    if not isinstance(value, str) or value != value.strip():
        raise BadCloudValue(source, field, value, "a Kubernetes version such as v1.31.2")
    try:
        KubeVersion.parse(value)
    except VersionError:
        raise BadCloudValue(source, field, value, "a Kubernetes version such as v1.31.2") from None
    return value


# RFC 1123 host names (labels of letters, digits and inner hyphens, 253 characters in all),
# an optional :port; no scheme, path, user or space.
_LABEL = r"[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*", re.ASCII)
HOST_EXPECTED = "a host name such as aks-one-dns-1a2b.hcp.westeurope.azmk8s.io (no scheme, path or space)"


def _host_ok(host):
    if _HOST_NAME.fullmatch(host):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return "%" not in host  # a zone index is this machine's, never a service's


def host_port(value, source, field):
    """(host, port or None) of "host" or "host:port" (an FQDN as ARM and the bootstrap data
    give it)."""
    if isinstance(value, str) and value.count(":") <= 1:
        host, colon, port = value.partition(":")
        if _host_ok(host) and (not colon or (port.isascii() and port.isdigit() and 0 < int(port) < 65536
                                             and len(port) <= 5)):
            return host, int(port) if colon else None
    raise BadCloudValue(source, field, value, HOST_EXPECTED)


def host_name(value, source, field):
    """A host name alone (an FQDN): no port."""
    host, port = host_port(value, source, field)
    if port is not None:
        raise BadCloudValue(source, field, value, HOST_EXPECTED + ", no port")
    return host


def https_url(value, source, field, path_allowed=False):
    """An https:// URL of a host (an API server, an ARM endpoint): no user, fragment, space or
    control character; a path and query only where `path_allowed` (an operation's URL), never
    a ".." segment. Returned as given."""
    expected = "an https:// URL of a host" + (" and a path" if path_allowed else ", such as https://host:443")
    if not isinstance(value, str) or len(value) > 2048 or any(c.isspace() or not c.isprintable() for c in value):
        raise BadCloudValue(source, field, value, expected)
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError:
        raise BadCloudValue(source, field, value, expected) from None
    host = parts.hostname or ""
    ok = (parts.scheme == "https" and _host_ok(host.strip("[]")) and not parts.username
          and (path_allowed or not parts.query) and not parts.fragment and "@" not in parts.netloc
          and (port is None or port > 0)
          and (path_allowed or parts.path in ("", "/")) and ".." not in parts.path.split("/"))
    if not ok:
        raise BadCloudValue(source, field, value, expected)
    return value


def ca_pem(value, source, field):
    """PEM bytes of the CA certificate(s) in base64 `value` (str, or bytes as an SDK decodes
    nothing for us), which an SSL context accepts as trust anchors."""
    expected = "base64 of the cluster CA's PEM certificate(s)"
    try:
        pem = base64.b64decode(value, validate=True) if isinstance(value, (str, bytes)) else b""
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise ValueError("no certificate")
        ssl.create_default_context(cadata=pem.decode("ascii"))
    except (ValueError, UnicodeDecodeError, ssl.SSLError):
        raise BadCloudValue(source, field, value, expected) from None
    return pem


_SEGMENT = re.compile(r"[-\w.()]{1,260}", re.ASCII)


def resource_id(value, source, field):
    """An ARM resource ID: /subscriptions/<id>/..., segments of letters, digits and -_.() with
    no empty, "." or ".." segment (it becomes part of request paths and role scopes)."""
    expected = "an ARM resource ID /subscriptions/<id>/resourceGroups/<group>/providers/..."
    if not isinstance(value, str) or len(value) > 2048 or not value.lower().startswith("/subscriptions/"):
        raise BadCloudValue(source, field, value, expected)
    segments = value[1:].split("/")
    if any(not _SEGMENT.fullmatch(s) or s in (".", "..") for s in segments):
        raise BadCloudValue(source, field, value, expected)
    return value


_ARM_NAME = re.compile(r"[A-Za-z0-9](?:[-_.A-Za-z0-9]{0,78}[A-Za-z0-9_])?", re.ASCII)


def resource_name(value, source, field):
    """An ARM resource name (a cluster, a pool, a machine, a location)."""
    if not isinstance(value, str) or not _ARM_NAME.fullmatch(value):
        raise BadCloudValue(source, field, value, "a resource name of letters, digits, '-', '_' and '.'")
    return value


_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)


def guid(value, source, field):
    """A GUID (a principal or tenant ID), lower case."""
    if not isinstance(value, str) or not _GUID.fullmatch(value):
        raise BadCloudValue(source, field, value, "a GUID such as 3edc37a8-542d-43cb-85ac-70b9fd00b330")
    return value.lower()


def count(value, source, field, low, high):
    """An integer from `low` to `high` (JSON true is not 1)."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BadCloudValue(source, field, value, f"an integer from {low} to {high}")
    return value


# A Kubernetes resource quantity, in apimachinery's grammar (k8s.io/apimachinery
# pkg/api/resource/quantity.go): a signed number, then a binary (Ki..Ei), decimal (m, k..E)
# or exponent (e<n>, E<n>) suffix. The API server writes it in canonical form, which is not
# always digits: 1000 devices are "1k". Longer than 64 characters, or an exponent beyond 64,
# is refused rather than computed. Exact, in integers (no fractions module: the agent's every
# pass imports this one).
_QUANTITY = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d{1,3}|[mkMGTPE]?)", re.ASCII)
_QUANTITY_MAX = 64
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}  # powers of 2
_DECIMAL_SI = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}  # powers of 10


def _quantity(value):
    """(numerator, denominator) of quantity `value` (a string, or a JSON integer: a Quantity
    unmarshals from one too), or None when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value, 1
    match = _QUANTITY.fullmatch(value) if isinstance(value, str) and len(value) <= _QUANTITY_MAX else None
    if match is None or not (match.group(2) or match.group(3)):  # a number needs a digit
        return None
    sign, whole, fraction, suffix = match.groups()
    fraction = fraction or ""
    numerator, denominator = int(whole + fraction or "0"), 10 ** len(fraction)
    if suffix in _BINARY_SI:
        numerator <<= _BINARY_SI[suffix]
    else:
        power = _DECIMAL_SI[suffix] if suffix in _DECIMAL_SI else int(suffix[1:])
        if abs(power) > _QUANTITY_MAX:
            return None
        if power >= 0:
            numerator *= 10 ** power
        else:
            denominator *= 10 ** -power
    return (-numerator if sign == "-" else numerator), denominator


def device_count(value, source, field):
    """A count of devices in a Node's capacity or allocatable (an extended resource such as
    nvidia.com/gpu): a quantity whose value is a whole number of 0 or more."""
    amount = _quantity(value)
    if amount is None or amount[0] < 0 or amount[0] % amount[1]:
        raise BadCloudValue(source, field, value, "a Kubernetes quantity that is a whole count of 0 or more "
                            "(such as 2 or 1k)")
    return amount[0] // amount[1]
