"""configobj check of registry_mirrors: which registry's images containerd pulls from which
mirror ("mcr.microsoft.com=https://registry.example:5000, docker.io=https://...").

The registry is named as containerd names a registry host namespace, the directory its
hosts.toml lives in under config_path: "[registry_host_name|IP address][:port]", or
`_default` for every registry no other namespace matches (containerd docs/hosts.md,
"Registry Host Namespace"). containerd looks the directory up by the name in the image
reference as it is written, so the name is held to the lowercase form image references use.
The mirror is an https URL of a registry root: nothing after the host but "/" (containerd
adds /v2 itself), no user:password (hosts.toml holds no credentials: docs/air-gapped.md).
"""

import ipaddress
import re
from urllib.parse import urlsplit

from aks_flex_node.config.checks import _DNS_LABEL, Invalid

DEFAULT_NAMESPACE = "_default"
EXAMPLE = "mcr.microsoft.com=https://registry.example:5000"
# A DNS name's limit (RFC 1035 section 2.3.4) and ":65535".
NAMESPACE_MAX = 253 + 6
_PORT = re.compile(r"^[0-9]{1,5}$")


def namespace_problem(name):
    """Why `name` is not a registry host namespace containerd looks up, or None."""
    if name == DEFAULT_NAMESPACE:
        return None
    if not name:
        return "no registry name before '='"
    if "://" in name or "/" in name:
        return (f"{name!r} is not a registry host: the registry as image references name it, "
                "host[:port] with no scheme and no path (mcr.microsoft.com, registry.example:5000)")
    if len(name) > NAMESPACE_MAX:
        return f"{name[:40]!r}... is longer than a host name and port ({NAMESPACE_MAX} characters)"
    host, colon, port = name.partition(":")
    if colon and not (_PORT.match(port) and 0 < int(port) < 65536):
        return f"{name!r} has no port from 1 to 65535 after ':' (IPv6 addresses are not supported as registry names)"
    try:
        ipaddress.IPv4Address(host)
        return None
    except ValueError:
        pass
    if host != host.lower():
        return (f"{name!r} is not lowercase: containerd finds the registry's hosts.toml by the name as the "
                "image reference writes it, which is lowercase")
    if not all(_DNS_LABEL.match(label) for label in host.split(".")):
        return f"{name!r} is not a host name, an IPv4 address or _default"
    return None


def mirror_url(value):
    """The mirror URL `value` as https://host[:port], or None when it is not one: https,
    a host, no user:password, nothing after the host but "/"."""
    # Printable ASCII only (an international name in its xn-- form): nothing a TOML string
    # would have to escape, nothing a terminal would act on.
    if not all(0x20 < ord(c) < 0x7F for c in value) or any(c in '"\\' for c in value):
        return None
    try:
        parts = urlsplit(value)
        parts.port  # raises ValueError on a bad port
    except ValueError:
        return None
    if parts.scheme != "https" or not parts.hostname or "@" in parts.netloc:
        return None
    if parts.port == 0 or parts.netloc.endswith(":"):
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or value.endswith(("?", "#")):
        return None
    try:
        ipaddress.ip_address(parts.hostname)
    except ValueError:
        if not all(_DNS_LABEL.match(label) for label in parts.hostname.lower().split(".")):
            return None
    return f"https://{parts.netloc}"


MIRROR_EXPECTED = ("an https URL of the mirror's registry root, https://host[:port] with nothing after it "
                   "(no path, no user:password)")


def check_registry_mirrors(value):
    """The typed value: a list of "namespace=https://host[:port]" items, each registry once."""
    if value == "":
        return []
    expected = f"registry=mirror pairs separated by commas, such as {EXAMPLE}"
    items, seen = [], set()
    for item in value.split(","):
        item = item.strip()
        if not item:
            raise Invalid(value, expected + ": an empty item between commas")
        name, equals, url = (part.strip() for part in item.partition("="))
        if not equals:
            raise Invalid(value, f"{expected}: {item!r} has no '='")
        problem = namespace_problem(name)
        if problem:
            raise Invalid(value, f"{expected}: {problem}")
        if name in seen:
            raise Invalid(value, f"{expected}, each registry once: {name} is named twice")
        seen.add(name)
        normal = mirror_url(url)
        if normal is None:
            raise Invalid(value, f"{expected}: the mirror of {name}, {url!r}, is not {MIRROR_EXPECTED}")
        items.append(f"{name}={normal}")
    return items


def mirror_pairs(items):
    """[(namespace, mirror URL)] of registry_mirrors' typed value, in its order."""
    return [tuple(item.split("=", 1)) for item in items]
