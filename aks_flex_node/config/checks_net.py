"""configobj checks of the network values: IP addresses, CIDRs, DNS domains, host:port, the
no_proxy list and the API server (api_server_url: the one spelling of it as a URL)."""

import ipaddress
import re
from urllib.parse import urlsplit

from aks_flex_node.config.checks import _DNS_LABEL, Invalid


_NO_PROXY_ENTRY = re.compile(r"^[A-Za-z0-9.*:\[\]/_-]+$")


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


def check_ip_address(value):
    if value == "":
        return ""
    if "%" in value:
        # Python's ipaddress takes an IPv6 zone index ("fe80::1%eth0"); the kubelet's
        # --node-ip does not (it parses with Go's net.ParseIP, which has no zones:
        # k8s.io/utils/net ParseIPSloppy), a DNS server address names no local link, and a
        # '%' in a unit file is a systemd specifier (systemd.unit(5), "Specifiers").
        raise Invalid(value, "an IPv4 or IPv6 address such as 10.0.0.10, without a zone index (%eth0)")
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
