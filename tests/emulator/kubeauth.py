"""Who is calling the kube-apiserver stand-in, and what they may do.

Authentication, in the order the real server's union authenticator tries them (the first
that recognises the request wins; kubernetes/kubernetes pkg/kubeapiserver/authenticator/config.go:
x509 client certificates before any bearer token):

  x509            a client certificate the emulator CA signed (the TLS handshake verified the
                  chain and the validity period): user = CN, groups = O
                  (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates).
                  O=system:masters is the cluster admin. An expired certificate fails the TLS
                  handshake here (Python's ssl), where the real server answers 401: either way no access.
  bootstrap-token Bearer <id>.<secret> matching a record of this cluster in
                  state.data["bootstrap_tokens"] (the emulator's kube-system/bootstrap-token-<id>
                  Secrets): user system:bootstrap:<id>, groups system:bootstrappers + auth_extra_groups
                  (https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/;
                  plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go).
  static-token    the cluster admin's token from listClusterAdminCredential (system:masters).
  azure-token     an Entra token the emulator minted for the AKS server application
                  (Azure/kubelogin docs/book/src/concepts/aks.md): user = the principal's object ID.

Authorization (`authorize`), per identity:

  admin                  everything.
  azure-token            AKS with Azure RBAC: a role in APISERVER_ROLES at the cluster or a parent
                         scope, honoured `rbac_propagation_delay` seconds after its creation (Learn:
                         https://learn.microsoft.com/azure/role-based-access-control/troubleshooting).
  node (system:node:<n>  the Node authorizer's static rules, bootstrappolicy NodeRules()
  in system:nodes)       (https://kubernetes.io/docs/reference/access-authn-authz/node/;
                         plugin/pkg/auth/authorizer/node/node_authorizer.go falls back to
                         plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go NodeRules), plus
                         certificatesigningrequests/selfnodeclient, which kubeadm binds to system:nodes
                         (cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go); what a node may
                         change is then narrowed by NodeRestriction (`admit_node`).
  bootstrap identity in  system:node-bootstrapper (CSR create/get/list/watch) and
  BOOTSTRAP_GROUP        certificatesigningrequests:nodeclient, the ClusterRoles upstream's
                         scripts/aks-flex-config binds that group to (Azure/AKSFlexNode); nothing else.
                         (The same script also binds system:node; we leave that out: a bootstrap token
                         should only be able to get a certificate.)
"""

import hmac
import re
import time
from dataclasses import dataclass, field

from tests.emulator import constants as c
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
# (resource, verbs) allowed by the Node authorizer's static rules (NodeRules) and kubeadm's selfnodeclient binding.
_NODE_RULES = {
    "nodes": _READ + ("create", "update", "patch", "delete"),
    "nodes/status": ("update", "patch"),
    _CSR: _READ + ("create",),
    f"{_CSR}/selfnodeclient": ("create",),
}
# system:node-bootstrapper + system:certificates.k8s.io:certificatesigningrequests:nodeclient
# (bootstrappolicy/policy.go ClusterRoles).
_BOOTSTRAPPER_RULES = {
    _CSR: _READ + ("create",),
    f"{_CSR}/nodeclient": ("create",),
}


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
    """The caller as a User, or None for an anonymous request; 401 for a token nobody accepts."""
    subject = req.peer_subject
    if subject.get("commonName"):
        groups = list(subject.get("organizationName", [])) + ["system:authenticated"]
        return User(subject["commonName"][0], groups, "x509")
    header = req.header("Authorization") or ""
    if not header:
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
    if record and record["expires_on"] > time.time() and record["audience"] == c.AKS_SERVER_APP_ID:
        return User(record["principal"], ["system:authenticated"], "azure-token", uid=record["principal"])
    raise unauthorized()


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
    if expiration is not None and time.time() >= float(expiration):
        raise unauthorized()
    if not record.get("usage_bootstrap_authentication"):
        raise unauthorized()
    extra = list(record.get("auth_extra_groups") or [])
    if any(not _EXTRA_GROUP.match(g) for g in extra):
        raise unauthorized()
    groups = [BOOTSTRAPPERS] + [g for g in extra if g != BOOTSTRAPPERS]
    return User(f"system:bootstrap:{token_id}", groups + ["system:authenticated"], "bootstrap-token")


# -- authorization ---------------------------------------------------------------------------

def allowed(app, cl, user, verb, resource):
    """Whether `user` may `verb` `resource` (cluster-scoped; names are NodeRestriction's business)."""
    if user.admin:
        return True
    if user.kind == "azure-token":
        return _azure_rbac_allows(app.state, cl, user.name)
    if user.node_name:
        return verb in _NODE_RULES.get(resource, ())
    if BOOTSTRAP_GROUP in user.groups:
        return verb in _BOOTSTRAPPER_RULES.get(resource, ())
    return False


def _azure_rbac_allows(state, cl, principal):
    if not cl["azure_rbac"]:
        return False
    now = time.time()
    delay = state.settings["rbac_propagation_delay"]
    for a in roles.assignments_covering(state.data["role_assignments"].values(), principal, cl["id"]):
        if a["role_guid"] in c.APISERVER_ROLES and now - a["created"] >= delay:
            return True
    return False


def authorize(app, cl, user, verb, resource, name=None, group=""):
    """403 in the apiserver's words unless `allowed`."""
    if allowed(app, cl, user, verb, resource):
        return
    plural = resource.partition("/")[0]
    what = f'{plural} "{name}"' if name else plural
    message = (f'{what} is forbidden: User "{user.name}" cannot {verb} resource "{resource}" '
               f'in API group "{group}" at the cluster scope')
    if user.kind == "azure-token":
        message += ": User does not have access to the resource in Azure. Update role assignment to allow access."
    details = {"name": name, "kind": plural} if name else {"kind": plural}
    if group:
        details["group"] = group
    raise status(403, "Forbidden", message, details)


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
