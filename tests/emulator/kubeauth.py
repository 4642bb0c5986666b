"""Who is calling the kube-apiserver stand-in, and what they may do.

Authentication, in the order the real server's union authenticator tries them (the first
that recognises the request wins; kubernetes/kubernetes pkg/kubeapiserver/authenticator/config.go:
x509 client certificates before any bearer token):

  x509            a client certificate the emulator CA signed (the TLS handshake verified the
                  chain), valid now by the emulator's clock (clock.py): user = CN, groups = O
                  (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates).
                  O=system:masters is the cluster admin. One outside its validity period is an
                  error, as in the real server (k8s.io/apiserver pkg/authentication/request/x509/x509.go
                  AuthenticateRequest: PeerCertificates[0].Verify checks the dates; the TLS layer
                  only requests the certificate): the bearer token, if any, is tried next
                  (union.go goes on after an error), and without one the answer is 401
                  Unauthorized (the anonymous authenticator is behind union.NewFailOnError).
  bootstrap-token Bearer <id>.<secret> matching a record of this cluster in
                  state.data["bootstrap_tokens"] (the emulator's kube-system/bootstrap-token-<id>
                  Secrets): user system:bootstrap:<id>, groups system:bootstrappers + auth_extra_groups
                  (https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/;
                  plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go).
  static-token    the cluster admin's token from listClusterAdminCredential (system:masters).
  azure-token     an Entra token the emulator minted for the AKS server application
                  (Azure/kubelogin docs/book/src/concepts/aks.md): user = the principal's object ID.

Authorization (`decide`, the one answer behind every 403 and every SelfSubjectAccessReview), per identity:

  admin                  everything.
  every authenticated    RBAC's default bindings: system:basic-user (self reviews) and
  user                   system:discovery (GET of /api, /apis, /version, health paths).
  azure-token            AKS with Azure RBAC: a role in APISERVER_ROLES at the cluster or a parent
                         scope, honoured `rbac_propagation_delay` seconds after its creation (Learn:
                         https://learn.microsoft.com/azure/role-based-access-control/troubleshooting).
  node (system:node:<n>  the Node authorizer (plugin/pkg/auth/authorizer/node/node_authorizer.go):
  in system:nodes)       nodes and pods subdivided by AuthorizeNodeWithSelectors on clusters of 1.32
                         and later (a node reads its own Node and pods bound to it only), leases by
                         name, everything else by the static NodeRules (bootstrappolicy/policy.go):
                         no node may delete a Node since 1.13. What a node may change is then
                         narrowed by NodeRestriction (`admit_node`, kube_pods for pods).
  bootstrap identity in  system:node-bootstrapper (CSR create/get/list/watch) and
  BOOTSTRAP_GROUP        certificatesigningrequests:nodeclient, the ClusterRoles upstream's
                         scripts/aks-flex-config binds that group to (Azure/AKSFlexNode); nothing else.
                         (The same script also binds system:node; we leave that out: a bootstrap token
                         should only be able to get a certificate.)
"""

import hmac
import re
from dataclasses import dataclass, field

from tests.emulator import clock, cluster_pki, constants as c
from tests.emulator import roles
from tests.emulator.httpbase import HttpError, Response

BOOTSTRAP_TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
# bootstrap.go: every auth-extra-group must be in the system:bootstrappers: namespace.
_EXTRA_GROUP = re.compile(r"^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$")
BOOTSTRAPPERS = "system:bootstrappers"
BOOTSTRAP_GROUP = "system:bootstrappers:aks-flex-node"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
MASTERS_GROUP = "system:masters"

_READ = ("get", "list", "watch")
_CSR = "certificatesigningrequests"
CERTIFICATES = "certificates.k8s.io"
# The Node authorizer's static rules, bootstrappolicy NodeRules() (plugin/pkg/auth/authorizer/rbac/
# bootstrappolicy/policy.go), as {(API group, resource[/subresource]): verbs}, for what this stand-in
# serves or a SelfSubjectAccessReview may ask about. Since 1.13 nodes may no longer delete Node
# objects (kubernetes/kubernetes#71021, "Remove self-deletion permissions from kubelets").
# Left out on purpose: the graph-subdivided resources (secrets, configmaps, PVCs, PVs, resource
# claims, volume attachments, service account tokens, CSINodes, resource slices), which the real
# authorizer grants only for objects related to the node through its pods: the emulator keeps no
# such objects, so it answers "no" rather than invent a grant.
_NODE_RULES = {
    ("authentication.k8s.io", "tokenreviews"): ("create",),
    ("authorization.k8s.io", "subjectaccessreviews"): ("create",),
    ("authorization.k8s.io", "localsubjectaccessreviews"): ("create",),
    ("", "services"): _READ,
    ("", "nodes"): ("create", "get", "list", "watch", "update", "patch"),
    ("", "nodes/status"): ("update", "patch"),
    ("", "events"): ("create", "update", "patch"),
    ("events.k8s.io", "events"): ("create", "update", "patch"),
    ("", "pods"): _READ + ("create", "delete"),
    ("", "pods/status"): ("update", "patch"),
    ("", "pods/eviction"): ("create",),
    ("", "endpoints"): ("get",),
    (CERTIFICATES, _CSR): _READ + ("create",),
    # kubeadm binds system:certificates.k8s.io:certificatesigningrequests:selfnodeclient to system:nodes
    # (cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go).
    (CERTIFICATES, f"{_CSR}/selfnodeclient"): ("create",),
    ("node.k8s.io", "runtimeclasses"): _READ,
    ("storage.k8s.io", "csidrivers"): _READ,
}
# system:node-bootstrapper + system:certificates.k8s.io:certificatesigningrequests:nodeclient
# (bootstrappolicy/policy.go ClusterRoles).
_BOOTSTRAPPER_RULES = {
    (CERTIFICATES, _CSR): _READ + ("create",),
    (CERTIFICATES, f"{_CSR}/nodeclient"): ("create",),
}
# What RBAC's default bindings give every authenticated user (bootstrappolicy/policy.go):
# system:basic-user (self reviews) and system:discovery / system:public-info-viewer (non-resource URLs).
_BASIC_USER_RULES = {
    ("authorization.k8s.io", "selfsubjectaccessreviews"): ("create",),
    ("authorization.k8s.io", "selfsubjectrulesreviews"): ("create",),
}
DISCOVERY_PATHS = ("/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/readyz", "/version", "/version/",
                   "/openapi", "/openapi/*")
# AuthorizeNodeWithSelectors (KEP-4601): beta, on by default, from 1.32 (kubernetes/kubernetes#128168);
# alpha (off) in 1.31. With it a node reads only its own Node and the pods bound to it.
SELECTORS_MINOR = 32


@dataclass
class Attributes:
    """authorizer.Attributes: a resource request (group, resource, subresource, namespace, name,
    field selector) or a non-resource one (path)."""
    verb: str
    resource: str = ""
    subresource: str = ""
    group: str = ""
    namespace: str = ""
    name: str = ""
    field_selector: str = ""
    path: str = ""

    @property
    def full_resource(self):
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass
class User:
    name: str
    groups: list = field(default_factory=list)
    kind: str = ""  # x509, bootstrap-token, static-token, azure-token
    uid: str = ""

    @property
    def admin(self):
        return MASTERS_GROUP in self.groups

    @property
    def node_name(self):
        """The node this identity is, per the Node authorizer's identifier
        (pkg/auth/nodeidentifier/default.go): group system:nodes and user system:node:<name>."""
        if NODES_GROUP in self.groups and self.name.startswith(NODE_USER_PREFIX):
            return self.name[len(NODE_USER_PREFIX):] or None
        return None


def status(code, reason, message, details=None):
    """A metav1.Status error as the apiserver writes it."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return HttpError(Response.json(code, body))


def unauthorized():
    return status(401, "Unauthorized", "Unauthorized")


# -- authentication --------------------------------------------------------------------------

def authenticate(app, cl, req):
    """The caller as a User, or None for an anonymous request; 401 for a token nobody accepts
    or a client certificate out of its dates with no token besides."""
    subject = req.peer_subject
    certificate_failed = False
    if subject.get("commonName"):
        # Signed by a CA the cluster had before a rotation: the handshake let it through, the
        # x509 authenticator does not (cluster_pki.py).
        current = req.peer_issuer.get("commonName") == [cluster_pki.issuer_name_of(app, cl)]
        if current and _valid_now(req.peer_validity):
            groups = list(subject.get("organizationName", [])) + ["system:authenticated"]
            return User(subject["commonName"][0], groups, "x509")
        certificate_failed = True
    header = req.header("Authorization") or ""
    if not header:
        if certificate_failed:
            raise unauthorized()
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthorized()
    user = _bootstrap_user(app.state, cl, token)
    if user is not None:
        return user
    if cl.get("admin") and hmac.compare_digest(token, cl["admin"]["token"]):
        return User("clusterAdmin", [MASTERS_GROUP, "system:authenticated"], "static-token")
    record = app.state.lookup_token(token)
    if record and record["expires_on"] > clock.now() and record["audience"] == c.AKS_SERVER_APP_ID:
        return User(record["principal"], ["system:authenticated"], "azure-token", uid=record["principal"])
    raise unauthorized()


def _valid_now(validity):
    """x509.Certificate.Verify's date check (Go crypto/x509 verify.go: "certificate has
    expired or is not yet valid"), on the emulator's clock: NotBefore <= now <= NotAfter."""
    if validity is None:
        return False
    not_before, not_after = validity
    return not_before <= clock.now() <= not_after


def bootstrap_tokens(state, cl):
    """This cluster's bootstrap token records, by token ID (the contract's
    state.data["bootstrap_tokens"][cluster_id.lower()][token_id])."""
    return state.data.get("bootstrap_tokens", {}).get(cl["id"].lower(), {})


def _bootstrap_user(state, cl, token):
    """bootstrap.go's AuthenticateToken. A token not shaped like a bootstrap token is not ours
    (None: the next authenticator tries); one that is but fails any check is a 401 (no other
    authenticator accepts that shape)."""
    m = BOOTSTRAP_TOKEN.match(token)
    if not m:
        return None
    token_id, secret = m.groups()
    record = bootstrap_tokens(state, cl).get(token_id)
    if record is None:
        raise unauthorized()
    if not hmac.compare_digest(str(record.get("token_secret", "")), secret):
        raise unauthorized()
    expiration = record.get("expiration")
    if expiration is not None and clock.now() >= float(expiration):
        raise unauthorized()
    if not record.get("usage_bootstrap_authentication"):
        raise unauthorized()
    extra = list(record.get("auth_extra_groups") or [])
    if any(not _EXTRA_GROUP.match(g) for g in extra):
        raise unauthorized()
    groups = [BOOTSTRAPPERS] + [g for g in extra if g != BOOTSTRAPPERS]
    return User(f"system:bootstrap:{token_id}", groups + ["system:authenticated"], "bootstrap-token")


# -- authorization ---------------------------------------------------------------------------

def decide(app, cl, user, attrs):
    """(allowed, reason) for `attrs`, as the union authorizer answers: the first authorizer that
    allows wins; a denial carries the reasons the others gave (none give an explicit deny here)."""
    if user.admin:
        return True, ""
    if attrs.path:
        if attrs.verb == "get" and _path_matches(attrs.path):
            return True, ('RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole '
                          '"system:discovery" to Group "system:authenticated"')
    elif attrs.verb in _BASIC_USER_RULES.get((attrs.group, attrs.full_resource), ()):
        return True, ('RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole '
                      '"system:basic-user" to Group "system:authenticated"')
    reason = ""
    if user.node_name:
        ok, reason = _node_authorizer(app, cl, user.node_name, attrs)
        if ok:
            return True, ""
    if BOOTSTRAP_GROUP in user.groups and not attrs.path:
        if attrs.verb in _BOOTSTRAPPER_RULES.get((attrs.group, attrs.full_resource), ()):
            return True, ""
        if (attrs.verb, attrs.group, attrs.full_resource) == ("get", "", "nodes") and \
                app.state.settings["bootstrap_get_nodes"] == "on":
            return True, ""  # kubeadm:get-nodes (profiles.py, bootstrap_get_nodes)
    if user.kind == "azure-token":
        if _azure_rbac_allows(app.state, cl, user.name):
            return True, ""
        reason = "User does not have access to the resource in Azure. Update role assignment to allow access."
    return False, reason


def _path_matches(path):
    for pattern in DISCOVERY_PATHS:
        if pattern.endswith("*") and path.startswith(pattern[:-1]) or path == pattern:
            return True
    return False


def selectors_enabled(cl):
    """Whether this cluster's version has AuthorizeNodeWithSelectors on by default."""
    major, minor = (int(x) for x in cl["kubernetes_version"].split(".")[:2])
    return (major, minor) >= (1, SELECTORS_MINOR)


def field_equals(field_selector, field):
    """The value `field` must equal in a field selector ("a=b,c==d"), or None."""
    for clause in filter(None, (field_selector or "").split(",")):
        m = re.match(r"^([^=!]+)(==|=)([^=]*)$", clause)
        if m and m.group(1).strip() == field:
            return m.group(3)
    return None


def _node_authorizer(app, cl, node_name, a):
    """NodeAuthorizer.Authorize (plugin/pkg/auth/authorizer/node/node_authorizer.go) for what this
    stand-in has: nodes and pods subdivided when AuthorizeNodeWithSelectors is on, leases by name,
    everything else by the static rules."""
    if a.path:
        return False, ""
    gated = selectors_enabled(cl)
    if (a.group, a.resource) == ("", "nodes") and gated:
        if a.subresource == "" and a.verb in ("create", "update", "patch"):
            return True, ""  # NodeRestriction limits a node to its own Node object
        if a.subresource == "" and a.verb in _READ:
            if a.name == node_name:
                return True, ""
            if not a.name:
                return False, f"node '{node_name}' cannot read all nodes, only its own Node object"
            return False, f"node '{node_name}' cannot read '{a.name}', only its own Node object"
        if a.subresource == "status" and a.verb in ("update", "patch"):
            return True, ""
        return False, ""
    if (a.group, a.resource) == ("", "pods") and gated:
        if a.subresource == "":
            if a.verb == "get":
                return _pod_bound(app, cl, node_name, a)
            if a.verb in ("list", "watch"):
                if field_equals(a.field_selector, "spec.nodeName") == node_name:
                    return True, ""
                if a.name:
                    return _pod_bound(app, cl, node_name, a)
                return False, "can only list/watch pods with spec.nodeName field selector"
            if a.verb in ("create", "delete"):
                return True, ""  # NodeRestriction: mirror pods / pods bound to the node
        elif a.subresource == "status" and a.verb in ("update", "patch"):
            return True, ""
        elif a.subresource == "eviction" and a.verb == "create":
            return True, ""
        return False, ""
    if (a.group, a.resource) == ("coordination.k8s.io", "leases"):
        if a.verb not in ("get", "create", "update", "patch", "delete"):
            return False, "can only get, create, update, patch, or delete a node lease"
        if a.namespace != "kube-node-lease":
            return False, 'can only access leases in the "kube-node-lease" system namespace'
        if a.verb != "create" and a.name != node_name:
            return False, "can only access node lease with the same name as the requesting node"
        return True, ""
    return a.verb in _NODE_RULES.get((a.group, a.full_resource), ()), ""


def _pod_bound(app, cl, node_name, a):
    """The graph check for a pod: is it bound to this node (spec.nodeName)?"""
    pod = app.state.kube_objects(cl["id"], "pods").get(f"{a.namespace}/{a.name}")
    if pod is not None and (pod.get("spec") or {}).get("nodeName") == node_name:
        return True, ""
    return False, f"no relationship found between node '{node_name}' and this object"


def allowed(app, cl, user, verb, resource, group=""):
    """Whether `user` may `verb` `resource` ("plural" or "plural/subresource") cluster-wide."""
    plural, _, sub = resource.partition("/")
    return decide(app, cl, user, Attributes(verb, plural, sub, group))[0]


def _azure_rbac_allows(state, cl, principal):
    if not cl["azure_rbac"]:
        return False
    now = clock.now()
    delay = state.settings["rbac_propagation_delay"]
    for a in roles.assignments_covering(state.data["role_assignments"].values(), principal, cl["id"]):
        if a["role_guid"] in c.APISERVER_ROLES and now - a["created"] >= delay:
            return True
    return False


def forbidden_message(user, attrs, reason=""):
    """The authorizer's part of a 403 (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
    responsewriters/errors.go forbiddenMessage)."""
    if attrs.path:
        text = f'User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
    elif attrs.namespace:
        text = (f'User "{user.name}" cannot {attrs.verb} resource "{attrs.full_resource}" in API group '
                f'"{attrs.group}" in the namespace "{attrs.namespace}"')
    else:
        text = (f'User "{user.name}" cannot {attrs.verb} resource "{attrs.full_resource}" in API group '
                f'"{attrs.group}" at the cluster scope')
    return f"{text}: {reason}" if reason else text


def check(app, cl, user, attrs):
    """403 in the apiserver's words (errors.NewForbidden) unless `decide` allows."""
    ok, reason = decide(app, cl, user, attrs)
    if ok:
        return
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    if attrs.path:
        raise status(403, "Forbidden", f"forbidden: {forbidden_message(user, attrs, reason)}", {})
    what = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    details = {"name": attrs.name, "kind": attrs.resource} if attrs.name else {"kind": attrs.resource}
    if attrs.group:
        details["group"] = attrs.group
    raise status(403, "Forbidden", f"{what} is forbidden: {forbidden_message(user, attrs, reason)}", details)


def authorize(app, cl, user, verb, resource, name=None, group=""):
    """`check` for a cluster-scoped request ("plural" or "plural/subresource")."""
    plural, _, sub = resource.partition("/")
    check(app, cl, user, Attributes(verb, plural, sub, group, name=name or ""))


# -- NodeRestriction admission ---------------------------------------------------------------

# pkg/kubelet/apis/well_known_labels.go: the kubernetes.io / k8s.io labels a kubelet may set.
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"


def _namespace(label):
    return label.split("/", 1)[0] if "/" in label else ""


def _in_namespace(namespace, domain):
    return namespace == domain or namespace.endswith("." + domain)


def is_kubelet_label(label):
    """IsKubeletLabel in pkg/kubelet/apis/well_known_labels.go."""
    return label in KUBELET_LABELS or any(_in_namespace(_namespace(label), ns) for ns in KUBELET_LABEL_NAMESPACES)


def forbidden_labels(labels):
    """getForbiddenLabels in plugin/pkg/admission/noderestriction/admission.go: labels under
    node-restriction.kubernetes.io/, and kubernetes.io / k8s.io labels a kubelet does not own
    (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#noderestriction)."""
    bad = []
    for label in labels:
        ns = _namespace(label)
        if _in_namespace(ns, NODE_RESTRICTION_NAMESPACE):
            bad.append(label)
        elif (_in_namespace(ns, "kubernetes.io") or _in_namespace(ns, "k8s.io")) and not is_kubelet_label(label):
            bad.append(label)
    return sorted(bad)


def _modified_labels(new, old):
    """getModifiedLabels: keys added, removed or changed."""
    new, old, absent = new or {}, old or {}, object()
    return {k for k in set(new) | set(old) if new.get(k, absent) != old.get(k, absent)}


def admit_node(user, operation, name, new=None, old=None):
    """NodeRestriction's admitNode for a node identity (others pass): a node may create, change
    and delete only its own Node, may not register with or change to forbidden labels, and may
    not change its taints (plugin/pkg/admission/noderestriction/admission.go)."""
    node_name = user.node_name
    if node_name is None:
        return
    if name != node_name:
        raise _node_forbidden(name, f'node "{node_name}" is not allowed to modify node "{name}"')
    if operation == "create":
        labels = ((new or {}).get("metadata") or {}).get("labels") or {}
        bad = forbidden_labels(_modified_labels(labels, {}))
        if bad:
            raise _node_forbidden(name, f'node "{node_name}" is not allowed to set the following labels: '
                                        + ", ".join(bad))
    elif operation == "update":
        if ((new or {}).get("spec") or {}).get("taints") != ((old or {}).get("spec") or {}).get("taints"):
            raise _node_forbidden(name, f'node "{node_name}" is not allowed to modify taints')
        bad = forbidden_labels(_modified_labels(new["metadata"].get("labels"), old["metadata"].get("labels")))
        if bad:
            raise _node_forbidden(name, f'node "{node_name}" is not allowed to modify labels: ' + ", ".join(bad))


def _node_forbidden(name, reason):
    return status(403, "Forbidden", f'nodes "{name}" is forbidden: {reason}', {"name": name, "kind": "nodes"})
