"""Sending the node's conditions (conditions.py) and events (events.py) to its own Node, as
the node: the kubelet's client certificate in the TLS bootstrap modes, the HIMDS token the
kubelet's exec plugin uses in Arc mode. The Node authorizer and NodeRestriction allow a node
exactly this much: PATCH its own Node's status, create events
(kubernetes.io/docs/reference/access-authn-authz/node/).

Best effort and bounded: a failure is one warning with its code, never the run's failure;
each request has SEND_TIMEOUT seconds; the configured proxy is used (http_policy).

After a run, nothing is sent when the conditions are those last sent less than
report_record.RESYNC seconds ago and the pass has no event (report_record.py: NPD's
heartbeat): a converged node's agent pass costs the API server and HIMDS nothing.
"""

import collections
import datetime
import logging

from aks_flex_node import http_policy, kube, paths
from aks_flex_node.azure import himds
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.health import conditions, events, report_record
from aks_flex_node.steps import kubelet_auth
from aks_flex_node.steps.preflight import identity

log = logging.getLogger(__name__)

# Seconds for each request: a pass that is over must not wait on an API server that does not
# answer (node-problem-detector's default apiserver-wait-timeout is minutes; we report again
# on the next pass).
SEND_TIMEOUT = 5

# What kubelet_auth's TLS bootstrap mechanism reads of a run's context, outside a run.
_Side = collections.namedtuple("_Side", "host http_policy")


def another_machines(node, machine_id):
    """The machine ID the Node reports when it is not `machine_id` (this host's), else None: a
    clone of this machine, refused by preflight's node-identity check, must not write its
    failure onto the Node of the machine that holds the name (identity.py)."""
    theirs = identity.reported_machine_id(node)
    return theirs if machine_id and theirs and theirs != machine_id else None


def send(client, node_name, summary, lifetimes, now, machine_id=None):
    """Read the Node, set our conditions on it (keeping each lastTransitionTime while its status
    is the same), create this pass's events; return the events sent, None when the Node is not
    there (a join that failed before the kubelet registered it) or is another machine's."""
    node = client.get_node(node_name)
    if node is None:
        return None
    theirs = another_machines(node, machine_id)
    if theirs:
        log.warning("Node %r reports machine ID %r, not this machine's %r: nothing reported to it",
                    node_name, theirs, machine_id)
        return None
    current = (node.get("status") or {}).get("conditions") or []
    current = current if isinstance(current, list) else []
    wanted = conditions.conditions_of(summary, lifetimes, now, current)
    if wanted:
        client.patch_node_status(node_name, conditions.status_patch(wanted))
    sent = events.events_of(summary, current, wanted)
    for seq, event in enumerate(sent):
        client.create_event(events.NAMESPACE, events.event_body(node, event, now, seq, name=node_name))
    return sent


def report(client_of, node_name, summary, lifetimes, now=None, host=None):
    """`send`, best effort: True when sent (or nothing new to send), False when not (a
    warning says why). `client_of()` builds the node's client; it may fail (no credential
    yet) or give None. With `host`, the record of the last send (report_record.py) decides
    whether anything is sent, and a send is recorded."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    wanted_digest = None
    if host is not None:
        wanted = conditions.conditions_of(summary, lifetimes, now)
        wanted_digest = report_record.digest(node_name, wanted)
        # The Node as we last left it has `wanted` on it: the events a pass would send then.
        quiet = not events.events_of(summary, wanted, wanted)
        if quiet and report_record.already_sent(report_record.read(host), node_name, wanted_digest,
                                                int(now.timestamp())):
            log.debug("Node %r already has these conditions: nothing sent", node_name)
            return True
    try:
        client = client_of()
        if client is None:
            return False
        machine_id = identity.read_machine_id(host).value if host is not None else None
        if send(client, node_name, summary, lifetimes, now, machine_id) is None:
            return False
    except FlexNodeError as err:
        log.warning("conditions and events not sent to Node %r (%s): %s", node_name, err.code, err.message)
        return False
    if wanted_digest is not None:
        try:
            report_record.write(host, node_name, wanted_digest, now.timestamp())
        except FlexNodeError as err:  # the next pass sends again: no harm but the cost
            log.warning("%s not written (%s): %s", paths.NODE_REPORT_RECORD, err.code, err.message)
    return True


def report_upgrade_started(client_of, node, node_name, previous, target, now=None):
    """The KubeletUpgradeStarted event regarding `node` (the Node as the upgrade just read
    it), best effort and bounded like `report`: False (and a warning) when not sent."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    try:
        client = client_of()
        if client is None:
            return False
        client.create_event(events.NAMESPACE, events.event_body(
            node, events.upgrade_started_event(previous, target), now, name=node_name))
        return True
    except FlexNodeError as err:
        log.warning("KubeletUpgradeStarted event not sent to Node %r (%s): %s", node_name, err.code, err.message)
        return False
    except Exception as err:  # noqa: BLE001 - an event must never stop the upgrade it announces
        log.warning("KubeletUpgradeStarted event not sent to Node %r: %s: %s", node_name, type(err).__name__, err)
        return False


def report_leave(client_of, node_name, now=None):
    """The NodeLeaving event, best effort, before the node's credential is removed."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    try:
        client = client_of()
        if client is None:
            return False
        node = client.get_node(node_name)
        if node is None:
            return False
        client.create_event(events.NAMESPACE, events.event_body(node, events.leave_event(), now, name=node_name))
        return True
    except FlexNodeError as err:
        log.warning("NodeLeaving event not sent to Node %r (%s): %s", node_name, err.code, err.message)
        return False


def node_client(cfg, host, policy=None):
    """A client of the API server as this node, or None when the node holds no identity yet.
    The API server and its CA come from the kubelet's kubeconfig (kubelet_auth.api_server_of)."""
    auth = kubelet_auth.for_mode(cfg.mode)
    server, ca_pem = kubelet_auth.api_server_of(host, auth)
    policy = policy if policy is not None else http_policy.HttpPolicy.from_config(cfg)
    if cfg.mode.tls_bootstrap:
        # The kubelet's certificate, as kubelet_auth hands it to a client of the run's.
        side = _Side(host=host, http_policy=policy)
        if not auth.has_identity(side):
            return None  # no client certificate of the kubelet's yet
        client = auth.client_of(side, server, ca_pem)
        client.timeout = SEND_TIMEOUT
        return client

    fetched = []

    def token():  # one HIMDS token for the few requests of a report
        if not fetched:
            fetched.append(himds.get_token(cfg.himds_endpoint, himds.AKS_RESOURCE, cfg.himds_key_dir,
                                           root=str(host.root), timeout=SEND_TIMEOUT,
                                           attempts=1).access_token)
        return fetched[0]

    return kube.KubeClient(server, ca_pem, token, policy=policy, timeout=SEND_TIMEOUT)


def after_run(host, cfg, summary, lifetimes, timestamp):
    """A reporter of health/__init__.py's after-run hook: the conditions and events of the
    bootstrap pass `summary` (status.json's), stamped with the moment they are sent
    (`timestamp`, the run's end, is the other reporters'). An unbootstrap reports nothing here: its Node and credential are gone (report_leave is sent
    before)."""
    if not isinstance(summary, dict) or summary.get("dry_run") or summary.get("operation") != "bootstrap":
        return False
    # The moment of sending, not the run's end (`timestamp`, whole seconds): an event's
    # eventTime is when it happened, as client-go stamps it (time.Now()), and a whole-second
    # time would put this pass's events before the KubeletUpgradeStarted sent during it.
    now = datetime.datetime.now(datetime.timezone.utc)
    return report(lambda: node_client(cfg, host), cfg.machine_name, summary, lifetimes, now, host=host)
