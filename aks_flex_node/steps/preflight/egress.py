"""What a restricted network must let through, per join mode, and whether it does.

Before anything changes, each endpoint a join will need is probed the way its client will
reach it (the run's HttpPolicy: the proxy, no_proxy, the CA bundle), and each one missing
is named: its purpose, its URL, whether the proxy was used, and the host names the operator
must allow (with those its answers are known to send the client on to: a redirect, a
registry's data endpoint). The lists come from Learn, cited per entry, and are written out
per join mode in docs/air-gapped.md ("Network requirements").

- Azure (arc and agent-pool): ARM and Entra ID, the cloud's (clouds.py).
- The Arc service (arc): the Connected Machine agent's global hybrid identity endpoint,
  gbl.his.<cloud's HIS domain>, which every connect asks first for the machine's region
  (Learn, "Azure Arc network requirements"); the agent's other endpoints (the regional HIS,
  guest configuration, the notification service) are named in the remedy and the docs, not
  probed: their names depend on the region or carry wildcards.
- The artifacts (every mode): the mirror (artifact_mirror), else the host of each *_url
  template. A file:// mirror (a local directory) is not a network endpoint: not probed.
- The image registry (every mode): the registry of pause_image, reached by containerd, or
  the mirrors registry_mirrors names for it (REGISTRY_MIRRORS_KEY: the hook below).

HIMDS (on this machine, always direct) and the cluster's API server (its own CA, known only
once the credentials are) keep their own checks (checks.check_himds, check_cluster_api).

Each origin (scheme, host, port), with the CA it is checked against and the proxy it goes
through, is probed once per run, whichever checks ask for it (`reachable`): the checks run
at once (checks.run_checks), and in a small install the mirror, the registry and ARM may be
one server.

The checks here return verdicts, (severity, message, remedy, transient) tuples, which
checks.py makes Findings of (as identity.py's), one per missing endpoint.
"""

import dataclasses
import threading
import urllib.parse
import weakref
from typing import Tuple

from aks_flex_node import clouds
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.http_policy import ARC_HIS_HOSTS, HttpPolicy, redact
from aks_flex_node.steps.preflight import reachability

ERROR = "error"  # checks.ERROR (checks.py imports this module, not the other way round)

ARC_SOURCE = ('Learn, "Connected Machine agent network requirements" '
              "(https://learn.microsoft.com/azure/azure-arc/servers/network-requirements) and "
              '"Azure Arc network requirements" '
              "(https://learn.microsoft.com/azure/azure-arc/network-requirements-consolidated)")
AKS_SOURCE = ('Learn, "Outbound network and FQDN rules for AKS clusters" '
              "(https://learn.microsoft.com/azure/aks/outbound-rules-control-egress)")

# The Connected Machine agent's endpoints per cloud, from the Learn pages in ARC_SOURCE
# (the "URLs" table, rows required "Always"): the hybrid identity service (HIS: gbl.his.* is
# its global endpoint, which gives the region's), guest configuration (extensions), the
# notification service and its Service Bus relays, and Entra ID's hosts the agent uses
# besides the authority. Installing the agent (packages.microsoft.com) is not the join's.
ARC_SERVICE_HOSTS = {
    clouds.PUBLIC: ("*.his.arc.azure.com", "*.guestconfiguration.azure.com",
                    "guestnotificationservice.azure.com", "*.guestnotificationservice.azure.com",
                    "azgn*.servicebus.windows.net", "login.windows.net", "pas.windows.net"),
    clouds.US_GOVERNMENT: ("*.his.arc.azure.us", "*.guestconfiguration.azure.us", "pasff.usgovcloudapi.net"),
    clouds.CHINA: ("*.his.arc.azure.cn", "*.guestconfiguration.azure.cn",
                   "guestnotificationservice.azure.cn", "*.guestnotificationservice.azure.cn",
                   "azgn*.servicebus.chinacloudapi.cn", "login.partner.chinacloudapi.cn", "pas.chinacloudapi.cn"),
}

# Where a default download host sends its client on (an HTTP redirect the downloader
# follows): dl.k8s.io answers with a redirect to its CDN, cdn.dl.k8s.io (the Kubernetes
# project's download redirector); a GitHub release asset is served from
# objects.githubusercontent.com or release-assets.githubusercontent.com (GitHub's
# "Communicating with self-hosted runners" lists *.githubusercontent.com for downloads).
REDIRECTS = {
    "dl.k8s.io": ("cdn.dl.k8s.io",),
    "github.com": ("objects.githubusercontent.com", "release-assets.githubusercontent.com"),
}
REDIRECT_SOURCE = ('the download host and where it redirects (GitHub: docs.github.com, "Communicating '
                   'with self-hosted runners"; dl.k8s.io: its redirect to cdn.dl.k8s.io)')

# A registry whose layers come from another host: MCR's data endpoint (AKS_SOURCE:
# `*.data.mcr.microsoft.com` and `mcr-0001.mcr-msedge.net`, "Required for MCR storage backed
# by the Azure content delivery network"; microsoft/containerregistry,
# docs/client-firewall-rules.md).
REGISTRY_DATA = {"mcr.microsoft.com": ("*.data.mcr.microsoft.com", "mcr-0001.mcr-msedge.net")}
# docker.io's API is served from registry-1.docker.io (containerd, docs/hosts.md).
DOCKER_HUB = ("docker.io", "registry-1.docker.io")

# Issue 28's registry mirrors (containerd hosts.toml): the config key that maps a registry
# to its mirror, "registry=https://host[:port]" items (config/checks_registry.py), `_default`
# for every registry no other item names; the mirrors' CA in REGISTRY_CA_KEY. With a mirror
# for the pause image's registry the mirror is probed, never the registry (containerd asks
# only the mirror). `registry_mirrors()` reads the key where the configuration has it and
# finds nothing where it has not: the hook a configuration without the key passes through.
REGISTRY_MIRRORS_KEY = "registry_mirrors"
REGISTRY_CA_KEY = "registry_ca_file"
DEFAULT_NAMESPACE = "_default"

ARTIFACT_KEYS = (("kubernetes", "the Kubernetes node binaries"), ("containerd", "containerd"),
                 ("runc", "runc"), ("cni", "the CNI plugins"))


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One endpoint a join needs: what for, the URL probed, the host names a firewall must
    allow for it (the URL's own first), and where that need is documented."""

    purpose: str
    url: str
    allow: Tuple[str, ...]
    source: str
    policy: HttpPolicy = None  # the client's own policy when it is not the run's (containerd's)
    cafile: str = None  # the CA file it is checked against when not the policy's (a real path)


def _host(url):
    return (urllib.parse.urlsplit(url).hostname or "").lower()


def origin(url):
    """(scheme, host, port) of `url`: what is probed once per run."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port or {"https": 443, "http": 80}.get(parts.scheme)


def _get(cfg, key, default=None):
    try:
        return cfg[key]
    except KeyError:
        return default


# ---- what each join mode needs ------------------------------------------------------------------

def azure_endpoints(cfg):
    """ARM and Entra ID of the configured cloud (arc and agent-pool modes)."""
    endpoints = cfg.endpoints
    return [Endpoint("Azure Resource Manager", endpoints.arm, (_host(endpoints.arm),), AKS_SOURCE),
            Endpoint("Entra ID (sign-in)", endpoints.authority, (_host(endpoints.authority),), AKS_SOURCE)]


def api_server(server):
    """The cluster's API server (checks.check_cluster_api probes it with the cluster's CA,
    once this node knows it): on AKS <dns prefix>-<hash>.hcp.<region>.azmk8s.io (AKS_SOURCE:
    *.hcp.<location>.azmk8s.io)."""
    return Endpoint("the cluster's API server", server.rstrip("/") + "/readyz", (_host(server),), AKS_SOURCE)


def arc_endpoints(cfg):
    """The Arc service the Connected Machine agent needs for certain: the global HIS endpoint
    (every connect asks it for the region's); a custom cloud's is not known, so nothing."""
    cloud = _get(cfg, "cloud", clouds.PUBLIC)
    his = ARC_HIS_HOSTS.get(cloud)
    if not his:
        return []
    gbl = f"gbl.{his}"
    return [Endpoint("the Azure Arc hybrid identity service (the Connected Machine agent)", f"https://{gbl}/",
                     (gbl, *ARC_SERVICE_HOSTS[cloud]), ARC_SOURCE)]


def artifact_endpoints(cfg):
    """Where the binaries come from: the mirror, else each *_url template's host (one
    Endpoint per host, its purposes joined). A file:// mirror is not probed."""
    mirror = _get(cfg, "artifact_mirror") or ""
    if mirror:
        if urllib.parse.urlsplit(mirror).scheme.lower() == "file":
            return []
        return [Endpoint("the artifact mirror (artifact_mirror)", mirror, (_host(mirror),),
                         "this node's configuration (artifact_mirror)")]
    found = []
    for name, what in ARTIFACT_KEYS:
        template = _get(cfg, f"{name}_url") or ""
        url = template.replace("{version}", "0").replace("{arch}", "amd64")
        if not url:
            continue
        parts = urllib.parse.urlsplit(url)
        root = f"{parts.scheme}://{parts.netloc}/"
        host = _host(url)
        found.append(Endpoint(f"{what} ({name}_url)", root, (host, *REDIRECTS.get(host, ())), REDIRECT_SOURCE))
    return merged(found)


def registry_mirrors(cfg):
    """{registry: (mirror URL, ...)} from REGISTRY_MIRRORS_KEY's typed value (a list of
    "registry=url" items; its text or a mapping read the same), or {} without the key."""
    value = _get(cfg, REGISTRY_MIRRORS_KEY)
    if not value:
        return {}
    if isinstance(value, dict):
        items = value.items()
    else:
        text = value if isinstance(value, str) else ",".join(str(v) for v in value)
        items = (part.partition("=")[::2] for part in text.split(",") if "=" in part)
    mirrors = {}
    for registry, urls in items:
        urls = [urls] if isinstance(urls, str) else list(urls)
        mirrors.setdefault(registry.strip().lower(), []).extend(u.strip() for u in urls if u.strip())
    return {registry: tuple(urls) for registry, urls in mirrors.items()}


def _registry_cafile(cfg):
    node_path = _get(cfg, REGISTRY_CA_KEY)
    paths = getattr(cfg, "paths", None)
    if not node_path:
        return None
    return str(paths.real(node_path)) if paths is not None else node_path


def image_registry(reference):
    """The registry host of an image reference, as containerd reads it (distribution's
    reference normalisation): a first component with a dot, a colon or `localhost`, else
    docker.io."""
    first, slash, _rest = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first.lower()
    return DOCKER_HUB[0]


def registry_endpoints(cfg, policy):
    """The registry of pause_image, or the mirrors registry_mirrors gives it, as containerd
    reaches them: through the proxy its environment names, which skips the node itself
    (HttpPolicy.service_no_proxy)."""
    containerd = dataclasses.replace(policy, no_proxy=tuple(policy.service_no_proxy(_get(cfg, "cluster_domain"))))
    registry = image_registry(_get(cfg, "pause_image") or "")
    every = registry_mirrors(cfg)
    mirrors = every.get(registry) or every.get(DEFAULT_NAMESPACE)
    if mirrors:
        return merged([Endpoint(f"the registry mirror of {registry} ({REGISTRY_MIRRORS_KEY}; pause_image and "
                                "every pod's images)", url.rstrip("/") + "/v2/", (_host(url),),
                                f"this node's configuration ({REGISTRY_MIRRORS_KEY})", containerd,
                                _registry_cafile(cfg))
                       for url in mirrors])
    api = DOCKER_HUB[1] if registry == DOCKER_HUB[0] else registry
    # The OCI distribution API answers at /v2/ (opencontainers/distribution-spec, spec.md).
    return [Endpoint(f"the image registry {registry} (pause_image and every pod's images)", f"https://{api}/v2/",
                     (api, *REGISTRY_DATA.get(registry, ())), AKS_SOURCE, containerd)]


def merged(endpoints):
    """One Endpoint per probed origin: purposes joined, host names and sources unioned."""
    by_origin = {}
    for endpoint in endpoints:
        key = origin(endpoint.url)
        seen = by_origin.get(key)
        if seen is None:
            by_origin[key] = endpoint
            continue
        by_origin[key] = dataclasses.replace(
            seen, purpose=f"{seen.purpose}; {endpoint.purpose}",
            allow=tuple(dict.fromkeys(seen.allow + endpoint.allow)),
            source=seen.source if endpoint.source == seen.source else f"{seen.source}; {endpoint.source}")
    return list(by_origin.values())


def wanted(cfg, mode, policy):
    """Every network endpoint a join in `mode` needs, in the order preflight probes them
    (the API server and HIMDS aside: their own checks)."""
    return [*(azure_endpoints(cfg) if mode.asks_azure else ()),
            *(arc_endpoints(cfg) if mode is JoinMode.ARC else ()),
            *artifact_endpoints(cfg), *registry_endpoints(cfg, policy)]


# ---- probing, once per origin per run --------------------------------------------------------

class _Probe:
    def __init__(self):
        self.lock = threading.Lock()
        self.done = False
        self.failure = None


_RUNS = weakref.WeakKeyDictionary()  # the run's context -> {key: _Probe}
_RUNS_LOCK = threading.Lock()


def reachable(ctx, url, policy=None, cafile=None):
    """reachability.reachable(url) through `policy` (the run's by default), asked once per
    run for each origin, CA and proxy: a second check asking for the same waits for the
    first one's answer instead of probing again."""
    policy = policy or ctx.http_policy
    key = (origin(url), cafile, policy.proxy_for(url), policy.ca_bundle)
    with _RUNS_LOCK:
        probes = _RUNS.setdefault(ctx, {})
        probe = probes.setdefault(key, _Probe())
    with probe.lock:
        if not probe.done:
            probe.failure = reachability.reachable(url, policy, cafile=cafile)
            probe.done = True
        return probe.failure


def verdict(endpoint, failure, policy):
    """The error for one missing endpoint: its purpose, its URL, whether the proxy was used
    and why, and the host names to allow."""
    proxy = policy.proxy_for(endpoint.url)
    if proxy:
        via = f"through the proxy {redact(proxy)}"
    elif policy.https_proxy:
        via = "directly (no_proxy covers it)"
    else:
        via = "directly (no https_proxy)"
    again = " (tried twice)" if failure.transient else ""
    message = f"{endpoint.purpose}: {endpoint.url} is unreachable {via}{again}: {failure.why}"
    where = "the firewall and the proxy" if proxy else "the firewall"
    remedy = (f"allow HTTPS to {', '.join(endpoint.allow)} in {where} ({endpoint.source}); "
              "check DNS and https_proxy / no_proxy in the config (docs/air-gapped.md, Network requirements)")
    return (ERROR, message, remedy, failure.transient)


def verdicts(ctx, endpoints):
    """One verdict per endpoint of `endpoints` that does not answer."""
    found = []
    for endpoint in endpoints:
        policy = endpoint.policy or ctx.http_policy
        failure = reachable(ctx, endpoint.url, policy, endpoint.cafile)
        if failure:
            found.append(verdict(endpoint, failure, policy))
    return found


# ---- the checks (registered in checks.py) --------------------------------------------------

def azure_services(ctx):
    return verdicts(ctx, azure_endpoints(ctx.config))


def arc_services(ctx):
    return verdicts(ctx, arc_endpoints(ctx.config))


def artifact_hosts(ctx):
    return verdicts(ctx, artifact_endpoints(ctx.config))


def registry_hosts(ctx):
    return verdicts(ctx, registry_endpoints(ctx.config, ctx.http_policy))
