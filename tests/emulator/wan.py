"""The WAN profile: what a real network and real Azure cost, added to the emulator's answers.

On loopback the emulator answers in well under a millisecond; a node that joins a real
cluster waits tens of milliseconds on every ARM and Entra ID answer, downloads release
files of tens of megabytes, waits for RBAC to propagate and for `azcmagent connect`. Each
of those costs is one setting (profiles.SETTINGS), 0 by default so that tests stay fast,
and `BENCH` holds the figures of the bench's WAN profile (issue 30). The client waits
them for real: the emulator sleeps before it answers (outside its state lock, so other
requests go on), one round trip per request.

Not modelled (so the profile is a lower bound of a real network, never above it): TCP's
and TLS's handshakes on a new connection (one and one more round trip), TCP slow start,
DNS, loss. The figures and where they come from: tests/emulator/README.md, "The WAN
profile".
"""

import threading
import time

# The settings, one knob per service: seconds of round trip added to each request.
RTT_SETTINGS = {
    "arm": "wan_arm_rtt",
    "entra": "wan_entra_rtt",
    "apiserver": "wan_apiserver_rtt",
    "himds": "wan_himds_rtt",
    "artifacts": "wan_artifacts_rtt",
}

# The bench's WAN profile (issue 30): a node in a datacentre or an office some way from its
# Azure region. artifact_rate is bytes per second of the node's link, shared by every
# download at once (Link below); artifact_real_sizes makes the stand-in artifacts cost the
# link what the real files would (REAL_SIZES).
BENCH = {
    "wan_arm_rtt": 0.060,
    "wan_entra_rtt": 0.040,
    "wan_apiserver_rtt": 0.020,
    "wan_himds_rtt": 0.001,
    "wan_artifacts_rtt": 0.020,
    "artifact_rate": 25 * 1000 * 1000,
    "artifact_real_sizes": True,
    "rbac_propagation_delay": 30.0,
    "arc_connect_delay": 15.0,
}

# Bytes of the real linux/amd64 release files at the versions the configspec defaults to
# (aks_flex_node/configspec.ini): APPROXIMATE, to check against each project's release page
# (where they are listed) before a figure is cited: nothing here could read those pages (no
# network). The bench's cold-join bound moves with them. By the emulator's artifact kind
# (artifacts.PATTERNS):
#   kubernetes: kubernetes-node-linux-amd64.tar.gz of v1.30-v1.34 (kubelet, kubectl,
#               kubeadm, kube-proxy, kube-log-runner), https://dl.k8s.io/v1.3x.y/ (the
#               CHANGELOG's "Node Binaries" table links each),
#   containerd: containerd-2.0.4-linux-amd64.tar.gz,
#               https://github.com/containerd/containerd/releases/tag/v2.0.4,
#   runc:       runc.amd64 of v1.1.12, https://github.com/opencontainers/runc/releases/tag/v1.1.12,
#   cni:        cni-plugins-linux-amd64-v1.9.1.tgz,
#               https://github.com/containernetworking/plugins/releases.
REAL_SIZES = {
    "kubernetes": 120_000_000,
    "containerd": 33_000_000,
    "runc": 10_700_000,
    "cni": 50_000_000,
}


def delay(settings, kind, method, path):
    """Seconds to wait before answering this request: its service's round trip, and for
    the Arc agent stand-in's last step of `azcmagent connect` (its POST /_emulator/himds/bind,
    tests/fakes/bin/azcmagent) the rest of a real connect (installing and starting himds,
    the first heartbeat: arc_connect_delay)."""
    setting = RTT_SETTINGS.get(kind)
    if setting:
        return settings.get(setting) or 0.0
    if kind == "admin" and method == "POST" and path.rstrip("/").lower().endswith("/_emulator/himds/bind"):
        return settings.get("arc_connect_delay") or 0.0
    return 0.0


def charge_factor(settings, kind, size):
    """Bytes the link is charged per byte sent of an artifact of `kind` that is `size` bytes
    here: the real file's size over the stand-in's when artifact_real_sizes is on, else 1."""
    if not settings.get("artifact_real_sizes") or kind not in REAL_SIZES or size <= 0:
        return 1.0
    return max(1.0, REAL_SIZES[kind] / size)


class Link:
    """The node's one link to the artifact host: every body paced at `rate` bytes per second
    shares it (two downloads at once each go at about half the rate, as on a real link).
    `reserve` books `nbytes` after whatever is already booked and says when they have gone."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._free_at = 0.0

    def reserve(self, nbytes, rate):
        with self._lock:
            start = max(self._clock(), self._free_at)
            self._free_at = start + nbytes / rate
            return self._free_at
