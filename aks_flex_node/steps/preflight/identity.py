"""Preflight: is the name we join under already another machine's? (issue 26, identity collisions)

Fleets are built from cloned images, and a clone carries its parent's hostname (our default
machine_name) and /etc/machine-id. Nothing downstream stops two machines under one name:

- the kubelet, finding a Node of its name (Create answers AlreadyExists), reads it and patches
  it as its own (kubernetes/kubernetes, pkg/kubelet/kubelet_node_status.go,
  tryRegisterWithAPIServer), then writes status.nodeInfo (machineID from /etc/machine-id,
  systemUUID from /sys/class/dmi/id/product_uuid, bootID from /proc/sys/kernel/random/boot_id:
  pkg/kubelet/nodestatus/setters.go MachineInfo, from cAdvisor's machine info) every status
  update: two kubelets take turns at one Node, and NodeRestriction lets both, since both hold
  system:node:<name> (plugin/pkg/admission/noderestriction);
- `azcmagent connect` PUTs the Machine resource of its --resource-name. What Azure does when a
  Machine of that name exists and is Connected from another host is not documented (Learn's
  azcmagent connect and troubleshooting pages say nothing of it); the emulator models the
  conservative reading: the PUT takes the resource over (tests/emulator/hybridcompute.py).

So we ask before anything changes, as kubeadm join does for its Node name ("a Node with
name ... and status Ready already exists in the cluster": cmd/kubeadm/app/cmd/phases/join/
kubelet.go), but tell a rejoin of this machine from a clone by the machine ID the Node
reports. AWS nodeadm's node-inactive-validation (aws/eks-hybrid, internal/node/hybrid,
ValidateNodeIsInactive) only looks at this host (a kubelet environment file, /etc/kubernetes,
a running kubelet) and warns; it asks the cluster nothing.

- machine-id: this host's /etc/machine-id, read carefully (bounded, no link followed, no FIFO
  waited on). Missing, empty or "uninitialized" is a warning with the remedy: machine-id(5)
  documents an empty file as the image convention (systemd fills it at first boot) and
  "uninitialized" as the first-boot marker, and forbids all zeros. No other value is
  documented as an image default (we found none), so no list of them; a clone made from a
  booted machine has its parent's ID, which only the cluster can reveal (below).
- node-identity: the Node of our machine name, read with the credential this host already
  holds (the kubelet's client certificate, or in Arc mode the connected agent's HIMDS token)
  from the API server its kubeconfig names. Ready with another machine ID: refused (another
  machine is that node now). NotReady with another machine ID: a warning, since re-imaging a
  machine gives it a new ID under its old name and its Node goes NotReady meanwhile. A host
  that holds no credential yet (a first join) asks with the configured bootstrap token in
  bootstrap-token mode, where the cluster lets it read Nodes (kubeadm's kubeadm:get-nodes);
  otherwise it cannot ask: the Arc check below covers Arc mode, and an agent-pool first join
  is not checked (the pool's token comes after preflight, and AKS's may not read Nodes).
- arc-identity (Arc mode): the Machine of our machine name in Azure, read with the operator's
  ARM credential. Connected with a vmId other than this host's agent's: refused.
"""

import re
import threading

from aks_flex_node import kube
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import careful_read
from aks_flex_node.host.azcmagent import Azcmagent
from aks_flex_node.steps import cloud_reads, kubelet_auth

MACHINE_ID_PATH = "/etc/machine-id"
# machine-id(5): 32 lower-case hexadecimal characters and a newline; read a little more to
# tell a wrong file from a long one, never the size of whatever is there.
MACHINE_ID_MAX_BYTES = 4096
_MACHINE_ID = re.compile(r"^[0-9a-f]{32}$")
UNINITIALIZED = "uninitialized"  # machine-id(5): "First Boot Semantics"
REMEDY = ("give this machine its own ID before it joins: rm -f /etc/machine-id && "
          "systemd-machine-id-setup (machine-id(5); in an image, leave /etc/machine-id empty)")


# What a check here returns, for checks.py to turn into its Finding: (severity, message, remedy),
# severity "error" (refuse) or "warning"; None when nothing is wrong.
ERROR, WARNING = "error", "warning"


class MachineId:
    """This host's /etc/machine-id: `value` (32 hex characters) or None, and `problem`, a stable
    word when it is not a usable ID: absent, empty, uninitialized, malformed, unreadable."""

    def __init__(self, value=None, problem=None, detail=""):
        self.value, self.problem, self.detail = value, problem, detail

    def __repr__(self):
        return f"MachineId(value={self.value!r}, problem={self.problem!r})"


def read_machine_id(host):
    """This host's machine ID (MachineId), read through the host door's careful read."""
    try:
        raw = host.read_carefully(MACHINE_ID_PATH, MACHINE_ID_MAX_BYTES)
    except careful_read.Unsafe as unsafe:
        return MachineId(problem="absent" if unsafe.code == "absent" else "unreadable", detail=unsafe.why)
    text = raw.decode("ascii", errors="replace").strip()
    if not text:
        return MachineId(problem="empty")
    if text == UNINITIALIZED:
        return MachineId(problem="uninitialized")
    if not _MACHINE_ID.match(text):
        return MachineId(problem="malformed", detail=f"{text[:64]!r}: expected 32 lower-case hexadecimal characters")
    if not text.strip("0"):  # machine-id(5): "This ID may not be all zeros."
        return MachineId(problem="malformed", detail=f"{text!r}: all zeros, which machine-id(5) forbids")
    return MachineId(value=text)


def machine_id_verdict(ctx):
    """A warning when this host has no machine ID of its own (missing, empty, uninitialized,
    malformed, unreadable): the kubelet reports whatever is there as the Node's machineID."""
    mid = read_machine_id(ctx.host)
    if mid.value is not None:
        return None
    what = {"absent": "does not exist", "empty": "is empty (an image's, not yet filled at first boot)",
            "uninitialized": "says \"uninitialized\" (the first boot never finished)",
            "malformed": f"holds {mid.detail}"}.get(mid.problem, f"cannot be read: {mid.detail}")
    return WARNING, f"{MACHINE_ID_PATH} {what}: the cluster could not tell this machine's Node from a clone's", REMEDY


_SHOWN = threading.Lock()  # preflight's checks run at once; the agent is asked once per run


def agent_shown(ctx):
    """`azcmagent show -j` of this run, asked once and kept in ctx.data for the arc phase ({}
    when it printed nothing); an agent that fails raises, each time (check_himds says so)."""
    with _SHOWN:
        if ctx.data.azcmagent_shown is None:
            ctx.data.azcmagent_shown = Azcmagent(ctx.host, ctx.config.azcmagent).show() or {}
        return ctx.data.azcmagent_shown


def _connected_shown(ctx):
    """agent_shown when the agent is connected, else None (not installed or failing: the
    azcmagent and himds checks say so; here it only means no connection of this host's)."""
    try:
        shown = agent_shown(ctx)
    except FlexNodeError:
        return None
    return shown if str(shown.get("status", "")).lower() == "connected" else None


def _node_client(ctx):
    """A client of the API server as this host's own node identity, or None when this host
    holds none before the join (see the module's docstring)."""
    auth = kubelet_auth.for_mode(ctx.mode)
    try:
        server, ca_pem = kubelet_auth.api_server_of(ctx.host, auth)
    except FlexNodeError:
        return _bootstrap_token_client(ctx)  # no kubeconfig: a first join
    if ctx.mode.tls_bootstrap:
        if not auth.has_identity(ctx):
            return _bootstrap_token_client(ctx)  # no client certificate of the kubelet's yet
        return auth.client_of(ctx, server, ca_pem)
    if _connected_shown(ctx) is None:
        return None  # no HIMDS token before the agent connects
    return auth.client_of(ctx, server, ca_pem)


def _bootstrap_token_client(ctx):
    """Bootstrap-token mode: the configured token, API server and CA, known before any
    change. Whether the token may read Nodes is the cluster's choice: kubeadm (1.18 and later)
    grants it to bootstrap tokens with its kubeadm:get-nodes ClusterRole (kubernetes.io,
    "Troubleshooting kubeadm": "Not possible to join a v1.18 Node to a v1.17 cluster due to
    missing RBAC"), and Azure/AKSFlexNode's kubeadm e2e binds that role to
    system:bootstrappers:aks-flex-node (hack/e2e/lib/node-join-kubeadm.sh); AKS's pool tokens
    may not (node_identity_verdict then knows nothing). Other modes: None (the pool's token
    comes with the cluster phase, after preflight)."""
    cfg = ctx.config
    if ctx.mode is not JoinMode.BOOTSTRAP_TOKEN or not cfg.api_server_url:
        return None
    ca_pem, token = cfg.cluster_ca(), cfg.bootstrap_token()
    if not ca_pem or not token:
        return None
    return kube.KubeClient(cfg.api_server_url, ca_pem.encode(), token_provider=lambda: token,
                           policy=ctx.http_policy)


def reported_machine_id(node):
    """status.nodeInfo.machineID of the API server's Node object, "" when it has none or the
    object is not shaped as a Node (an answer we cannot read says nothing of who holds it)."""
    status = node.get("status") if isinstance(node, dict) else None
    info = status.get("nodeInfo") if isinstance(status, dict) else None
    value = info.get("machineID") if isinstance(info, dict) else None
    return value if isinstance(value, str) else ""


def node_claim(node, ours):
    """What the Node object `node` says of who holds the name, against our machine ID `ours`:
    None (ours, or it says no ID), "ready" (another machine, Ready) or "stale" (another,
    NotReady)."""
    theirs = reported_machine_id(node)
    if not theirs or theirs == ours:
        return None
    return "ready" if kube.is_ready(node) else "stale"


def _node_of(ctx, client, name):
    """The Node `name` as `client` reads it: the run's shared read (steps/node.py NodeSeen,
    steps/cloud_reads.py) when it asked the same API server, which rbac-propagation and
    node-ready take too, else read now. What the read raised is raised here."""
    seen = cloud_reads.node(ctx)
    if seen is None or seen.server.rstrip("/") != client.server:
        return client.get_node(name)
    if seen.error is not None:
        raise seen.error
    return seen.node


def node_identity_verdict(ctx):
    name = ctx.config.machine_name
    mid = read_machine_id(ctx.host)
    if mid.value is None:
        return None  # no ID to compare; check_machine_id warns
    client = _node_client(ctx)
    if client is None:
        return None
    try:
        node = _node_of(ctx, client, name)
    except (kube.Forbidden, kube.Unauthorized):
        return None  # this credential may not read Nodes (a bootstrap token on AKS): unknown
    if node is None:
        return None
    claim = node_claim(node, mid.value)
    theirs = reported_machine_id(node)
    if claim == "ready":
        return (ERROR, f"Node {name!r} is Ready and reports machine ID {theirs!r}; this machine's is "
                     f"{mid.value!r}: another machine is that node (a clone of this one?)",
                     "set machine_name to a name of this machine's own; if that machine is gone, "
                     f"kubectl delete node {name}; if this is a clone, give it its own ID: {REMEDY}")
    if claim == "stale":
        return (WARNING, f"Node {name!r} is NotReady and reports machine ID {theirs!r}, not this machine's "
                       f"{mid.value!r}: it is taken over (a re-imaged machine keeps its name)",
                       f"if another machine still uses the name, set machine_name instead; "
                       f"else kubectl delete node {name} clears its old status")
    return None


def _local_vm_id(ctx):
    """This host's Arc agent's vmId when it is connected, else None."""
    shown = _connected_shown(ctx)
    return (str(shown.get("vmId") or "").lower() or None) if shown else None


def arc_identity_verdict(ctx):
    cfg = ctx.config
    # The run's shared read (steps/cloud_reads.py): the arc phase takes the same answer.
    machine = cloud_reads.machine(ctx)
    if machine is None or not machine.vm_id:
        return None
    ours = _local_vm_id(ctx)
    if ours == machine.vm_id.lower():
        return None  # this host's own connection: a rejoin
    status = (machine.status or "").lower()
    where = f"Arc machine {cfg.arc_resource_group}/{cfg.machine_name}"
    if status == "connected":
        return (ERROR, f"{where} is Connected from another host (vmId {machine.vm_id!r}; this host's agent is "
                     f"{'connected as ' + repr(ours) if ours else 'not connected'})",
                     "set machine_name to a name of this machine's own; if that host is gone, delete the "
                     f"Arc machine (az connectedmachine delete -g {cfg.arc_resource_group} -n {cfg.machine_name})")
    return (WARNING, f"{where} exists with another host's vmId {machine.vm_id!r} and is {machine.status}: "
                   "connecting takes it over", "if that host still exists, set machine_name instead")

