"""The few kube-apiserver calls we make, with the node's own token; stdlib only.

We only ever touch our own Node and the pods bound to it: read the Node (is it registered,
is it Ready?), cordon it, evict its pods (drain.py) and delete it on unbootstrap. A full
Kubernetes client would be hundreds of times the code for a handful of verbs.

A 403 is its own error type: right after the role assignments are made, the apiserver
answers 403 until Azure RBAC has propagated ("up to 10 minutes":
https://learn.microsoft.com/azure/role-based-access-control/troubleshooting), and callers poll on it.
"""

import collections
import json
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from aks_flex_node import cloud_values
from aks_flex_node.errors import AuthError, FlexNodeError, TemporaryError
from aks_flex_node.host import observed
from aks_flex_node.http_policy import DIRECT
from aks_flex_node.polling import poll


class KubeError(FlexNodeError):
    code = "kube"


class Unauthorized(AuthError):
    """401: the apiserver did not accept the token at all."""

    code = "kube_unauthorized"


class Forbidden(AuthError):
    """403: the token is valid but its identity may not do this (yet)."""

    code = "kube_forbidden"


# What one eviction request came to (drain.py decides what to do next):
#   evicted  200/201: the API server accepted it; the pod is now terminating
#   gone     404: the pod no longer exists (deleted meanwhile: the goal of an eviction)
#   blocked  429: a PodDisruptionBudget forbids it now; `message` names the budget
#   retry    409 or 5xx: try again (a concurrent budget update, a server hiccup, or a pod
#            two budgets select, which the API server refuses with a 500)
Eviction = collections.namedtuple("Eviction", "outcome message")

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
# The most of one answer we read: a Node is kilobytes, a node's pod list (250 pods at most,
# maxPods' bound) a few megabytes. A bigger answer is refused, not held in memory.
MAX_ANSWER = 32 * 1024 * 1024


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: it would carry our bearer token to another URL."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _message(payload, causes=False):
    """A Status object's message and, with `causes`, its details' causes (where an
    eviction's 429 names the PodDisruptionBudget)."""
    if not isinstance(payload, dict):
        return "no Status in the answer"
    parts = [payload.get("message") or payload.get("reason") or "no message"]
    details = payload.get("details")
    if causes and isinstance(details, dict) and isinstance(details.get("causes"), list):
        for cause in details["causes"]:
            if isinstance(cause, dict) and cause.get("message"):
                parts.append(cause["message"])
    # The API server's words reach the operator's terminal: shown as text, escapes escaped.
    return " ".join(_said(part) for part in parts)


def _said(text, limit=400):
    """A message from the API server, printable: a str as it is when it is plain text,
    anything else (control characters, another type) as a bounded repr."""
    if isinstance(text, str) and text.isprintable() and len(text) <= limit:
        return text
    return cloud_values.shown(text, limit)


def _node_summary(node):
    """What an operator needs to see about a node that is not Ready yet."""
    if node is None:
        return "no Node object"
    ready = [c for c in _conditions(node) if c.get("type") == "Ready"]
    if not ready:
        return "Node registered, no Ready condition yet"
    cond = ready[0]
    reason = f" ({_said(cond.get('reason'))}: {_said(cond.get('message'))})" if cond.get("reason") else ""
    info = _field(node, "status", "nodeInfo")
    version = info.get("kubeletVersion") if isinstance(info, dict) else None
    return f"Node Ready={_said(cond.get('status'))}{reason}" + (f", kubelet {_said(version)}" if version else "")


class KubeClient:
    def __init__(self, server, ca_pem, token_provider=None, timeout=15, policy=None, client_cert=None):
        """`server` is the apiserver URL, `ca_pem` the cluster CA (PEM bytes),
        `token_provider()` returns a bearer token (called per request, so a refreshed
        token is picked up), `policy` the run's http_policy.HttpPolicy (the proxy for the
        apiserver's host, unless no_proxy covers it); None: direct. The environment's
        proxy variables are never read. The CA is the cluster's, never ca_bundle.
        `client_cert`: instead of a token, a PEM file with a client certificate and its key
        (the kubelet's, in the TLS bootstrap modes); TemporaryError while it does not exist."""
        parts = urllib.parse.urlsplit(server or "")
        if parts.scheme != "https" or not parts.hostname:
            raise KubeError(f"apiserver server = {server!r}: expected an https:// URL")
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.max_answer = MAX_ANSWER
        self._token_provider = token_provider
        self.policy = policy if policy is not None else DIRECT
        try:
            context = self.policy.ssl_context(cadata=ca_pem.decode("ascii"))
        except (ssl.SSLError, ValueError, UnicodeDecodeError, AttributeError) as err:
            raise KubeError(f"apiserver certificate-authority-data: expected PEM certificates ({err})") from None
        if client_cert is not None:
            try:
                context.load_cert_chain(client_cert)
            except FileNotFoundError:
                raise TemporaryError(f"{client_cert} does not exist: the kubelet has no client certificate yet",
                                     remedy="the kubelet gets it by TLS bootstrap: journalctl -u kubelet") from None
            except (ssl.SSLError, OSError) as err:
                raise KubeError(f"{client_cert}: expected a PEM client certificate and key ({err})") from None
        self._opener = self.policy.opener(self.server, context, _NoRedirect())

    def _call(self, method, path, body=None, content_type="application/json", answered=()):
        """Return (status, parsed JSON or None); raise typed errors for 401/403/no answer.
        `body` (a dict) is sent as JSON with `content_type`; statuses in `answered` (429 or
        5xx the caller handles itself, e.g. an eviction a budget forbids) are returned."""
        url = self.server + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            url,
            data=data,
            method=method,
            headers={"Accept": "application/json"},
        )
        if data is not None:
            request.add_header("Content-Type", content_type)
        if self._token_provider is not None:
            request.add_header("Authorization", f"Bearer {self._token_provider()}")
        try:
            # A read the agent's drift probe leaves to its real passes (host/observed.py).
            with observed.deferred("the API server"), \
                    self._opener.open(request, timeout=self.timeout) as response:
                status, body = response.status, response.read(self.max_answer + 1)
        except urllib.error.HTTPError as err:
            with err:
                status, body = err.code, err.read(self.max_answer + 1)
        except (urllib.error.URLError, OSError, socket.timeout) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, ssl.SSLCertVerificationError):
                # Not worth retrying: the CA we were given does not vouch for this server.
                raise KubeError(
                    f"apiserver {self.server} presented a certificate the cluster CA does not verify: "
                    f"{reason.verify_message}",
                    remedy="the CA comes from listClusterUserCredential or the pool's bootstrap data; check https_proxy (a TLS-intercepting "
                    "proxy) and that server and CA belong to the same cluster",
                    code="apiserver-tls-untrusted",
                ) from None
            raise TemporaryError(
                f"cannot reach the apiserver at {self.server}: {reason}",
                remedy="check the network path (and https_proxy/no_proxy) from this machine to the cluster",
                code="apiserver-unreachable",
            ) from None
        if len(body) > self.max_answer:
            raise cloud_values.BadCloudValue(f"API server {self.server} {method} {path}", "body",
                                             f"over {self.max_answer} bytes", f"at most {self.max_answer} bytes")
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        message = _said(payload.get("message")) if isinstance(payload, dict) and payload.get("message") else None
        if status == 401:
            raise Unauthorized(
                f"apiserver {self.server} refused the node's token for {method} {path} (401): {message or ''}".rstrip(": "),
                remedy="the token was not accepted: check that the Arc machine identity exists and HIMDS issues tokens",
            )
        if status == 403:
            raise Forbidden(
                f"apiserver {self.server} forbids {method} {path} (403): {message or ''}".rstrip(": "),
                remedy="the node identity lacks Kubernetes permissions; right after the role "
                "assignments this lasts until Azure RBAC propagates (up to 10 minutes)",
            )
        if (status >= 500 or status == 429) and status not in answered:
            raise TemporaryError(f"apiserver {self.server} answered {status} to {method} {path}: {message or ''}")
        return status, payload

    @staticmethod
    def _node_path(name):
        if not name or "/" in name:
            raise KubeError(f"node name = {name!r}: expected a Kubernetes node name")
        return "/api/v1/nodes/" + urllib.parse.quote(name, safe="")

    def authenticates(self):
        """Whether the API server takes this client's credential: GET /api (discovery, which
        every authenticated user may read) answers 401 to one it rejects, which is never
        taken as anonymous (kubernetes.io/docs/reference/access-authn-authz/authentication/
        #anonymous-requests); a 403 still means it was taken (what it may do is RBAC's)."""
        try:
            self._call("GET", "/api")
        except Unauthorized:
            return False
        except Forbidden:
            return True
        return True

    def get_node(self, name):
        status, payload = self._call("GET", self._node_path(name))
        if status == 404:
            return None
        if status != 200 or not isinstance(payload, dict):
            raise KubeError(f"GET node {name!r}: unexpected answer {status}")
        return payload

    def node_ready(self, name):
        """True/False from the Ready condition; None when the Node does not exist."""
        node = self.get_node(name)
        return None if node is None else is_ready(node)

    def delete_node(self, name):
        """True when deleted, False when it was not there."""
        status, _payload = self._call("DELETE", self._node_path(name))
        if status == 404:
            return False
        if status not in (200, 202):
            raise KubeError(f"DELETE node {name!r}: unexpected answer {status}")
        return True

    def server_version(self):
        """The API server's gitVersion (e.g. "v1.30.4") from GET /version, checked as a
        Kubernetes version (cloud_values.BadCloudValue when it is not one)."""
        status, payload = self._call("GET", "/version")
        if status != 200 or not isinstance(payload, dict):
            raise KubeError(f"GET /version: unexpected answer {status}: expected a version object with gitVersion")
        return cloud_values.kube_version(payload.get("gitVersion"), f"API server {self.server} GET /version",
                                         "gitVersion")

    def patch_node(self, name, patch):
        """Apply a strategic merge patch to the Node; return the patched Node, None when it
        does not exist. Without a resourceVersion in the patch there is no precondition, so
        a 409 means another writer raced us: TemporaryError, try again (API conventions,
        "Concurrency Control and Consistency")."""
        status, payload = self._call("PATCH", self._node_path(name), body=patch, content_type=STRATEGIC_MERGE)
        if status == 404:
            return None
        if status == 409:
            raise TemporaryError(f"PATCH node {name!r}: conflict (409): {_message(payload)}")
        if status != 200 or not isinstance(payload, dict):
            raise KubeError(f"PATCH node {name!r}: unexpected answer {status}: {_message(payload)}")
        return payload

    def patch_node_status(self, name, patch):
        """Strategic merge patch of the Node's status subresource (PATCH
        /api/v1/nodes/<name>/status: what node-problem-detector's condition manager sends,
        k8s.io/node-problem-detector pkg/exporters/k8sexporter/condition/manager.go). Conditions
        merge by type, so the kubelet's own stay. Return the Node; None when it does not exist."""
        status, payload = self._call("PATCH", self._node_path(name) + "/status", body=patch,
                                     content_type=STRATEGIC_MERGE)
        if status == 404:
            return None
        if status == 409:
            raise TemporaryError(f"PATCH node {name!r} status: conflict (409): {_message(payload)}")
        if status != 200 or not isinstance(payload, dict):
            raise KubeError(f"PATCH node {name!r} status: unexpected answer {status}: {_message(payload)}")
        return payload

    def create_event(self, namespace, event):
        """POST an events.k8s.io/v1 Event (a dict) in `namespace`; return what was stored."""
        if not (isinstance(namespace, str) and _DNS_LABEL.fullmatch(namespace)):
            raise KubeError(f"event namespace = {namespace!r}: expected a namespace (a DNS label)")
        path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        status, payload = self._call("POST", path, body=event)
        if status not in (200, 201) or not isinstance(payload, dict):
            raise KubeError(f"POST event in {namespace!r}: unexpected answer {status}: {_message(payload, causes=True)}")
        return payload

    def list_pods_on_node(self, name):
        """Every pod bound to the node, in all namespaces (fieldSelector spec.nodeName, which
        the Node authorizer lets a node use on its own pods)."""
        self._node_path(name)  # validates the name
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={name}"})
        status, payload = self._call("GET", f"/api/v1/pods?{query}")
        items = payload.get("items") if isinstance(payload, dict) else None
        if status != 200 or not isinstance(items, list):
            raise KubeError(f"LIST pods on node {name!r}: unexpected answer {status}: {_message(payload)}")
        source = f"API server {self.server} LIST pods on node {name}"
        for i, item in enumerate(items):
            _check_pod(item, source, f"items[{i}]")
        return items

    def evict_pod(self, namespace, name):
        """POST a policy/v1 Eviction for the pod; return an Eviction (see above). The API
        server checks the pod's PodDisruptionBudget before deleting it
        (kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/)."""
        for part in (namespace, name):
            if not part or "/" in part:
                raise KubeError(f"pod {namespace}/{name}: expected a namespace and a pod name")
        path = (f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/pods/"
                f"{urllib.parse.quote(name, safe='')}/eviction")
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        status, payload = self._call("POST", path, body=body, answered=(429, 500, 502, 503, 504))
        if status in (200, 201):
            return Eviction("evicted", "")
        if status == 404:
            return Eviction("gone", "")
        if status == 429:
            return Eviction("blocked", _message(payload, causes=True))
        if status == 409 or status >= 500:
            return Eviction("retry", f"{status}: {_message(payload, causes=True)}")
        raise KubeError(f"evict pod {namespace}/{name}: unexpected answer {status}: {_message(payload)}")



# Names of namespaces (a DNS label) and pods (a DNS subdomain): Kubernetes' object names
# (kubernetes.io/docs/concepts/overview/working-with-objects/names/); they go into request
# paths and messages.
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)


def _check_pod(pod, source, at):
    """A pod of a LIST answer has the shape drain reads: objects where it expects objects,
    a namespace and a name as Kubernetes names them (cloud_values.BadCloudValue otherwise)."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict):
        raise cloud_values.BadCloudValue(source, f"{at}.metadata", meta, "an object")
    name, namespace = meta.get("name"), meta.get("namespace", "default")
    if not (isinstance(name, str) and _DNS_SUBDOMAIN.fullmatch(name)):
        raise cloud_values.BadCloudValue(source, f"{at}.metadata.name", name, "a pod name (a DNS subdomain)")
    if not (isinstance(namespace, str) and _DNS_LABEL.fullmatch(namespace)):
        raise cloud_values.BadCloudValue(source, f"{at}.metadata.namespace", namespace, "a namespace (a DNS label)")
    owners = meta.get("ownerReferences")
    if owners is not None and not (isinstance(owners, list) and all(isinstance(o, dict) for o in owners)):
        raise cloud_values.BadCloudValue(source, f"{at}.metadata.ownerReferences", owners, "a list of objects")
    for field in ("annotations",):
        if meta.get(field) is not None and not isinstance(meta[field], dict):
            raise cloud_values.BadCloudValue(source, f"{at}.metadata.{field}", meta[field], "an object")
    if pod.get("status") is not None and not isinstance(pod["status"], dict):
        raise cloud_values.BadCloudValue(source, f"{at}.status", pod["status"], "an object")


def kubelet_version(node, source):
    """A Node's status.nodeInfo.kubeletVersion, checked as a Kubernetes version
    (cloud_values.BadCloudValue naming `source` otherwise); None when it reports none."""
    reported = _field(node, "status", "nodeInfo", "kubeletVersion")
    if reported is None or reported == "":
        return None
    return cloud_values.kube_version(reported, source, "status.nodeInfo.kubeletVersion")


def is_ready(node):
    """Whether a Node object's Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in _conditions(node))


def _field(doc, *path):
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def _conditions(node):
    """A Node's status.conditions that are objects; none when the answer has another shape."""
    conditions = _field(node, "status", "conditions")
    return [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []


# The kubelet reports Ready a few seconds after it starts, and a join waits on it: poll
# often during those seconds (at 1 s the Node was Ready about 0.5 s before the poll saw it,
# on the join's critical path), then at 1 s, when a slow Node waits on the CNI or on its
# certificate and a few GETs a second would only load the API server.
READY_FAST_DELAY = 0.2
READY_FAST_FOR = 5.0
READY_SLOW_DELAY = 1.0


def wait_node_ready(client_for, name, timeout, remedy="check `journalctl -u kubelet` and `aks-flex-node status`",
                    clock=time.monotonic, sleep=time.sleep, accept=None):
    """Poll until the Node is Ready (and `accept(node)`, when given: a kubelet version);
    return it. `client_for()` gives the client of each attempt (a kubelet's certificate
    appears and rotates meanwhile). 401/403/absent count as "not yet" (the credential or RBAC
    may still be propagating); after `timeout` seconds a TemporaryError says what was last seen."""

    def probe():
        try:
            node = client_for().get_node(name)
        except (Unauthorized, Forbidden, TemporaryError) as err:
            return False, err.message
        if is_ready(node) and (accept is None or accept(node)):
            return True, node
        return False, _node_summary(node)

    def give_up(last_seen):
        return TemporaryError(f"node {name!r} not Ready after {timeout:g}s; last seen: {last_seen}", remedy=remedy)

    return poll_fast_then_slow(probe, timeout, give_up, clock=clock, sleep=sleep)


def poll_fast_then_slow(probe, timeout, give_up, clock=time.monotonic, sleep=time.sleep,
                        fast_delay=READY_FAST_DELAY, fast_for=READY_FAST_FOR,
                        slow_delay=READY_SLOW_DELAY, slow_max=None):
    """polling.poll every `fast_delay` for the first `fast_for` seconds, then from
    `slow_delay` (doubling up to `slow_max`, when given) until `timeout`."""

    class StillWaiting(Exception):
        pass

    fast_for = min(fast_for, timeout)
    try:
        return poll(probe, timeout=fast_for, delay=fast_delay, give_up=lambda _: StillWaiting(),
                    clock=clock, sleep=sleep)
    except StillWaiting:
        return poll(probe, timeout=timeout - fast_for, delay=slow_delay, max_delay=slow_max,
                    give_up=give_up, clock=clock, sleep=sleep)


def readyz(server, ca_pem, policy=None, timeout=10):
    """GET /readyz (anonymous: a public path of every kube-apiserver) over TLS verified with
    `ca_pem`; return when it answers 200, else raise: TemporaryError for no answer or a 5xx,
    KubeError when the CA does not vouch for the server or it answers something else."""
    status, _payload = KubeClient(server, ca_pem, timeout=timeout, policy=policy)._call("GET", "/readyz")
    if status != 200:
        raise KubeError(f"apiserver {server} answered {status} to GET /readyz")
