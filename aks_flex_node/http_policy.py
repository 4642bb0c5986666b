"""The one HTTP policy of a run: which proxy (if any) a URL goes through, and which CAs it trusts.

Built once from the config (`https_proxy`, `no_proxy`, `ca_bundle`) and used by every HTTP
client of ours (the Azure SDK clients and credentials, the downloader, the kube client,
preflight), and handed to the services we configure: containerd and the kubelet get it as
an environment file their systemd drop-ins name, the Arc agent as its own `proxy.url` /
`proxy.bypass` settings. The process environment's http(s)_proxy / no_proxy are NOT read:
a join must do the same from an operator's shell, from apt's maintainer scripts and from the
agent's systemd unit (which has no such variables), so the config is the only source.

no_proxy is matched as Go's golang.org/x/net/http/httpproxy matches NO_PROXY (the code
containerd and the kubelet run): a host, a domain (`example.com` matches it and its
subdomains, `.example.com` and `*.example.com` only the subdomains), an IP address, a CIDR,
each optionally with `:port`, or `*` for everything. Python's urllib and curl know no CIDRs
(Learn, "HTTP proxy support in Azure Kubernetes Service"), so we match here, not there.
Unlike Go, our own clients do not skip the proxy for loopback by themselves: HIMDS, the only
loopback service we call, is always reached directly (azure/himds.py).

TLS (docs/configuration.md, "TLS"): every context of ours verifies the chain, the validity
dates and the host name, never less, and decides the rest by what it trusts, the same on
every Python (Debian 12's 3.11 sets none of Python 3.13's new default flags, 13's sets them
all; we set or clear each, so a certificate is accepted or refused the same on both):
- the system's CAs (the public Web PKI: ARM, Entra ID, the default artifact hosts):
  VERIFY_X509_STRICT as on Python 3.13, OpenSSL's checks of the RFC 5280 profile (an
  Authority Key Identifier on what a CA issued, a Subject Key Identifier, a critical
  basicConstraints and a keyUsage on a CA). Public CAs must issue that profile (the
  CA/Browser Forum's Baseline Requirements), so it costs nothing and refuses what no
  public CA may issue;
- a CA we were given (ca_bundle: a TLS-inspecting proxy's or a mirror's CA; the cluster's
  CA from AKS or cluster_ca_file): without VERIFY_X509_STRICT. Nothing binds a private CA to
  the profile: TLS-inspecting appliances mint leaves without the Authority Key Identifier,
  and a cluster CA made by Go before 1.15 has no Subject Key Identifier. The other clients of
  the same CAs on the node accept them (Go's kubelet and containerd, curl, the Azure SDK's
  urllib3 on both releases), and the profile adds nothing to whom the chain proves the peer
  to be: refusing there would stop a node on Debian 13 that works on 12.
VERIFY_X509_PARTIAL_CHAIN (Python 3.13's too) everywhere: an intermediate CA given in
ca_bundle is a trust anchor as it stands.

Standard library only and cheap to import: `aks-flex-node token` must not pay for the SDK.
"""

import dataclasses
import ipaddress
import ssl
import urllib.parse
import urllib.request
from typing import Optional, Tuple

REDACTED = "***"
# Go's net/http reads the upper-case names first, curl and most other tools the lower-case
# ones (curl ignores HTTP_PROXY): the services get both spellings.
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy")
# What a node's services never send through the proxy, whatever no_proxy says: the node
# itself and in-cluster names. AKS adds these (and the cluster's CIDRs) to a cluster's
# effectiveNoProxy (Learn, "HTTP proxy support in Azure Kubernetes Service").
SERVICE_NO_PROXY = ("localhost", "127.0.0.1", "::1", ".svc")
# azcmagent's proxy.bypass takes service names, not hosts (Learn, "Manage and maintain the
# Azure Connected Machine agent", proxy bypass): the names we can map from no_proxy.
ARC_HIS_HOSTS = {
    "AzurePublicCloud": "his.arc.azure.com",
    "AzureUSGovernment": "his.arc.azure.us",
    "AzureChinaCloud": "his.arc.azure.cn",
}


class ProxySettingError(ValueError):
    """https_proxy or no_proxy cannot be handed to a consumer as they are."""


def redact(url):
    """http://user:pass@host:3128 -> http://***@host:3128 (credentials never reach output),
    also without a scheme ("user:pass@host:3128")."""
    if not isinstance(url, str) or "@" not in url:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    return f"{scheme}{sep}{REDACTED}@{authority.rpartition('@')[2]}{slash}{path}"


def is_loopback(host):
    """127.0.0.0/8, ::1 or localhost: a host that is this machine, by address or by its
    reserved name (RFC 6761 section 6.3)."""
    if (host or "").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def has_credentials(url):
    return bool(url) and "@" in urllib.parse.urlsplit(url).netloc


def _split_host_port(text):
    """("host", "port" or "") of "host", "host:port", "[v6]:port" or a bare IPv6 address."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, port
    return text, ""


@dataclasses.dataclass(frozen=True)
class _Entry:
    kind: str  # all | cidr | ip | domain
    value: object
    port: str = ""
    match_host: bool = False


def parse_no_proxy(entries):
    """The no_proxy entries (a list, or a comma-separated string) as matchers, Go's rules."""
    if isinstance(entries, str):
        entries = entries.split(",")
    parsed = []
    for raw in entries or ():
        text = str(raw).strip().lower()
        if not text:
            continue
        if text == "*":
            return (_Entry("all", None),)
        try:
            parsed.append(_Entry("cidr", ipaddress.ip_network(text, strict=False)) if "/" in text
                          else _Entry("ip", ipaddress.ip_address(text)))
            continue
        except ValueError:
            pass
        host, port = _split_host_port(text)
        if not host:
            continue
        try:
            parsed.append(_Entry("ip", ipaddress.ip_address(host), port))
            continue
        except ValueError:
            pass
        if host.startswith("*."):
            host = host[1:]
        match_host = not host.startswith(".")
        parsed.append(_Entry("domain", host if host.startswith(".") else "." + host, port, match_host))
    return tuple(parsed)


def verifying_context(cafile=None, cadata=None):
    """A TLS client context (the module's docstring, "TLS"): the system's CAs with Python
    3.13's strict profile checks, or the CA in `cafile`/`cadata` without them."""
    context = ssl.create_default_context(cafile=cafile, cadata=cadata)
    if cafile is None and cadata is None:
        context.verify_flags |= ssl.VERIFY_X509_STRICT
    else:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


def _default_port(scheme):
    return {"https": "443", "http": "80"}.get(scheme, "")


@dataclasses.dataclass(frozen=True)
class HttpPolicy:
    """`https_proxy`: the proxy URL for outbound http and https, or None (direct);
    `no_proxy`: the entries reached directly; `ca_bundle`: a PEM file (a path on this
    machine) trusted instead of the system's CAs for Azure and downloads, or None."""

    https_proxy: Optional[str] = None
    no_proxy: Tuple[str, ...] = ()
    ca_bundle: Optional[str] = None

    def __post_init__(self):
        no_proxy = self.no_proxy
        if isinstance(no_proxy, str):
            no_proxy = no_proxy.split(",")
        object.__setattr__(self, "no_proxy", tuple(e.strip() for e in no_proxy or () if e and e.strip()))
        object.__setattr__(self, "https_proxy", self.https_proxy or None)
        object.__setattr__(self, "ca_bundle", self.ca_bundle or None)
        object.__setattr__(self, "_matchers", parse_no_proxy(self.no_proxy))

    def __repr__(self):
        return (f"HttpPolicy(https_proxy={redact(self.https_proxy)!r}, no_proxy={self.no_proxy!r}, "
                f"ca_bundle={self.ca_bundle!r})")

    @classmethod
    def from_config(cls, cfg):
        """From config.Config: its https_proxy, no_proxy and the endpoints' ca_bundle (already
        a path on this machine, under the config's root)."""
        endpoints = getattr(cfg, "endpoints", None)
        return cls(https_proxy=_get(cfg, "https_proxy"), no_proxy=tuple(_get(cfg, "no_proxy") or ()),
                   ca_bundle=getattr(endpoints, "ca_bundle", None))

    @property
    def shown_proxy(self):
        """The proxy as it may be logged or shown."""
        return redact(self.https_proxy)

    # ---- our own clients -------------------------------------------------------------------

    def bypasses(self, url):
        """True when `url` (or a bare host) is reached without the proxy per no_proxy."""
        parts = urllib.parse.urlsplit(url if "://" in url else "//" + url)
        host = (parts.hostname or "").lower().rstrip(".")
        try:
            port = str(parts.port or _default_port(parts.scheme))
        except ValueError:
            port = ""
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        for entry in self._matchers:
            if entry.kind == "all":
                return True
            if entry.port and entry.port != port:
                continue
            if entry.kind == "cidr" and ip is not None and ip.version == entry.value.version \
                    and ip in entry.value:
                return True
            if entry.kind == "ip" and ip is not None and ip == entry.value:
                return True
            if entry.kind == "domain" and (host.endswith(entry.value)
                                           or (entry.match_host and host == entry.value[1:])):
                return True
        return False

    def proxy_for(self, url):
        """The proxy URL for a request to `url`, or None for a direct connection."""
        if not self.https_proxy or self.bypasses(url):
            return None
        return self.https_proxy

    def proxies_for(self, url):
        """A requests/azure-core `proxies` mapping for calls to `url`: {} means direct.
        Pair it with use_env_settings=False (see sdk_options) so the environment adds nothing."""
        proxy = self.proxy_for(url)
        return {"http": proxy, "https": proxy} if proxy else {}

    def sdk_options(self, url):
        """Keyword arguments for an Azure SDK client or credential talking to `url`: the
        proxy decided here, the environment's proxy variables and REQUESTS_CA_BUNDLE ignored
        (azure-core's RequestsTransport use_env_settings sets requests' trust_env)."""
        options = {"use_env_settings": False}
        proxies = self.proxies_for(url)
        if proxies:
            options["proxies"] = proxies
        if self.ca_bundle:
            options["connection_verify"] = self.ca_bundle
        return options

    def ssl_context(self, cafile=None, cadata=None):
        """A verifying TLS context (verifying_context): `cadata`/`cafile` when given (a
        cluster CA), else the configured ca_bundle, else the system's CAs."""
        if cadata is not None or cafile is not None:
            return verifying_context(cafile=cafile, cadata=cadata)
        return verifying_context(cafile=self.ca_bundle)

    def trusted(self, cafile=None):
        """What a context from ssl_context(cafile) trusts, for a message that says why a
        certificate was refused."""
        if cafile is not None:
            return f"the CA in {cafile}"
        if self.ca_bundle:
            return f"ca_bundle = {self.ca_bundle}"
        return "the system's CAs"

    def opener(self, url, context=None, *handlers):
        """A urllib opener for requests to `url`: through the proxy or direct as decided here
        (an explicit ProxyHandler, so urllib never falls back to the environment)."""
        proxy = self.proxy_for(url)
        proxy_handler = urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {})
        https = urllib.request.HTTPSHandler(context=context if context is not None else self.ssl_context())
        return urllib.request.build_opener(proxy_handler, https, *handlers)

    # ---- the services we configure ------------------------------------------------------

    def service_no_proxy(self, cluster_domain=None):
        """The NO_PROXY a node's services get: the configured entries, then the node itself
        and in-cluster names (duplicates dropped, order kept)."""
        extra = list(SERVICE_NO_PROXY)
        if cluster_domain:
            extra.append("." + cluster_domain.strip(".").lower())
        out = []
        for entry in (*self.no_proxy, *extra):
            if entry.lower() not in (e.lower() for e in out):
                out.append(entry)
        return out

    def service_environment(self, cluster_domain=None):
        """[(name, value)] for a Go service (containerd, the kubelet), or [] without a proxy."""
        if not self.https_proxy:
            return []
        no_proxy = ",".join(self.service_no_proxy(cluster_domain))
        return [(name, self.https_proxy) for name in PROXY_VARIABLES] + \
               [(name, no_proxy) for name in NO_PROXY_VARIABLES]

    def environment_file(self, cluster_domain=None):
        """The content of a systemd EnvironmentFile= with service_environment, or None.

        Values are single-quoted: systemd reads them verbatim, no escapes, no specifiers
        (systemd.exec(5), EnvironmentFile=); a value holding a quote or a line break cannot
        be written that way and is refused, naming the key (percent-encode it in the URL).
        """
        environment = self.service_environment(cluster_domain)
        if not environment:
            return None
        lines = ["# Written by aks-flex-node from https_proxy and no_proxy in its config."]
        for name, value in environment:
            if "'" in value or any(ord(c) < 0x20 or ord(c) == 0x7f for c in value):
                key = "https_proxy" if name in PROXY_VARIABLES else "no_proxy"
                shown = redact(value) if key == "https_proxy" else value
                raise ProxySettingError(f"{key} = {shown!r}: expected no quote (') or control "
                                        "character; percent-encode it in the URL")
            lines.append(f"{name}='{value}'")
        return ("\n".join(lines) + "\n").encode()

    # ---- the Arc agent ---------------------------------------------------------------

    def check_for_azcmagent(self):
        """Refuse what the Connected Machine agent cannot use: "Azure Arc-enabled servers
        doesn't support using proxy servers that require authentication, TLS (HTTPS)
        connections" (Learn, "Manage and maintain the Azure Connected Machine agent").
        A credential would also have to go on its command line (`azcmagent config set
        proxy.url <url>`), where any user can read it (proc(5), /proc/<pid>/cmdline)."""
        if not self.https_proxy:
            return
        if has_credentials(self.https_proxy):
            raise ProxySettingError(
                f"https_proxy = {self.shown_proxy!r}: the Azure Connected Machine agent does not "
                "support a proxy that requires authentication (and the credentials would be on "
                "its command line): expected http://host:port without user:password@")
        if urllib.parse.urlsplit(self.https_proxy).scheme != "http":
            raise ProxySettingError(
                f"https_proxy = {self.shown_proxy!r}: the Azure Connected Machine agent does not "
                "support a TLS (https://) proxy: expected http://host:port")

    def azcmagent_proxy(self, endpoints=None):
        """(proxy.url, proxy.bypass) for `azcmagent config set`: the proxy or None, and the
        service names no_proxy covers (AAD: the authority host, ARM: the ARM host, Arc: the
        cloud's HIS host), sorted. Raises ProxySettingError when the agent cannot use it."""
        if not self.https_proxy:
            return None, []
        self.check_for_azcmagent()
        bypass = []
        if endpoints is not None:
            if getattr(endpoints, "authority", None) and self.bypasses(endpoints.authority):
                bypass.append("AAD")
            if getattr(endpoints, "arm", None) and self.bypasses(endpoints.arm):
                bypass.append("ARM")
            his = ARC_HIS_HOSTS.get(getattr(endpoints, "name", None))
            if his and self.bypasses("https://" + his):
                bypass.append("Arc")
        return self.https_proxy, sorted(bypass)


def _get(cfg, key):
    try:
        return cfg[key]
    except (KeyError, TypeError):
        return getattr(cfg, key, None)


DIRECT = HttpPolicy()
