"""certificates.k8s.io/v1 on the kube-apiserver stand-in: the CSR API, kube-controller-manager's
auto-approver and its signer (https://kubernetes.io/docs/reference/access-authn-authz/certificate-signing-requests/).

Served (discovery documents: kube_discovery.py): certificatesigningrequests POST / GET / LIST (fieldSelector metadata.name=) / DELETE, plus
PUT .../{name}/approval (what `kubectl certificate approve|deny` sends). No watch: clients poll.

The server, not the client, fills spec.username, spec.groups and spec.uid from the
authenticated caller (pkg/registry/certificates/certificates/strategy.go PrepareForCreate) and
clears any status sent. A created CSR also records how its requester authenticated
("_authenticatedBy": x509, bootstrap-token, static-token or azure-token; the approver's
SubjectAccessReview needs it): emulator bookkeeping, kept in the stored object (state.json,
/_emulator/state "csrs") and stripped from every API answer (`public`), as apiserver.py does
for Nodes, so that answers carry only fields of the v1 CertificateSigningRequest schema.

The controllers run synchronously: right after a create, and over every CSR of the cluster on
each GET or LIST (so a CSR left Pending is approved once `csr_auto_approve` is turned on, and
one approved by hand is signed on the next read). A kubelet therefore usually finds its
certificate in the POST's answer already; the real one polls or watches, and so must ours.

Approver (pkg/controller/certificates/approver/sarapprove.go), when the setting
`csr_auto_approve` (default True) is on: a CSR for signer kubernetes.io/kube-apiserver-client-kubelet
whose request passes ValidateKubeletClientCSR (pkg/apis/certificates/v1/helpers.go: O exactly
[system:nodes], CN system:node:<name>, no DNS/email/IP/URI SANs, usages exactly {digital signature,
key encipherment, client auth} or {digital signature, client auth}) is approved when its
requester may create certificatesigningrequests/selfnodeclient (requester = CN) or, failing
that, .../nodeclient (kubeauth: a node identity, a bootstrap identity of the aks-flex-node group,
or an admin). Anything else stays Pending.

Signer (pkg/controller/certificates/signer/signer.go): approved CSRs of
kubernetes.io/kube-apiserver-client-kubelet and kubernetes.io/kube-apiserver-client are signed
by the emulator CA (the CA in caCertData / the kubeconfigs) with the requested usages, for
min(spec.expirationSeconds, setting `csr_signing_duration`) (kube-controller-manager
--cluster-signing-duration, default 8760h); a request the signer rejects gets a Failed condition
(reason SignerValidationFailure). Other signers are not signed. One deliberate difference:
upstream backdates NotBefore by 5 minutes even for short lifetimes; here a lifetime under 8 h is
not backdated, so that a kubelet's rotation deadline (70-90 % of NotAfter - NotBefore) lies in the
future when tests use lifetimes of seconds.

Time is the emulator's clock (clock.py), as for everything else in the modelled world: a
certificate is dated by it, a CSR's timestamps too, and kubeauth judges a client certificate's
dates by it. A test renews a kubelet's certificate by moving the clock past the renewal
point (tests/apiserver_fixtures.py advance_past_renewal), never by waiting real seconds.
"""

import base64
import binascii
import datetime
import re
import secrets
import uuid

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.emulator import clock, cluster_pki, kubeauth
from tests.emulator.httpbase import Response
from tests.emulator.kubeauth import status
from tests.emulator.state import iso_seconds

GROUP = "certificates.k8s.io"
VERSION = "v1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
RESOURCE = "certificatesigningrequests"
KIND = "CertificateSigningRequest"

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"

# Settings (owned by profiles.SETTINGS) and their defaults, read with state.settings.get.
AUTO_APPROVE_SETTING, AUTO_APPROVE_DEFAULT = "csr_auto_approve", True
SIGNING_DURATION_SETTING, SIGNING_DURATION_DEFAULT = "csr_signing_duration", 31536000.0  # 8760h

# k8s.io/api/certificates/v1 types.go KeyUsage values.
SUPPORTED_USAGES = (
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth",
    "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel",
    "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
)
_KUBELET_CLIENT_USAGES = ({"digital signature", "key encipherment", "client auth"},
                          {"digital signature", "client auth"})
_KEY_USAGES = {"signing": "digital_signature", "digital signature": "digital_signature",
               "key encipherment": "key_encipherment"}
_EXT_USAGES = {"client auth": ExtendedKeyUsageOID.CLIENT_AUTH}
# ValidateSignerName (pkg/apis/certificates/validation/validation.go): a domain, "/", a path.
_SIGNER = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[^/]+$")
_MIN_EXPIRATION = 600  # validation.go: "may not specify a duration less than 600 seconds (10 minutes)"
_SHORT = datetime.timedelta(hours=8)
_BACKDATE = datetime.timedelta(minutes=5)


# -- the API --------------------------------------------------------------------------------

def public(csr):
    """A CSR as the API shows it: without the emulator's bookkeeping keys ("_authenticatedBy")."""
    return {k: v for k, v in csr.items() if not k.startswith("_")}


def _store(state, cl):
    return state.data.setdefault("csrs", {}).setdefault(cl["id"].lower(), {})


def handle(app, cl, user, req, segments):
    """/apis/certificates.k8s.io/v1/certificatesigningrequests[/{name}[/approval]]."""
    rest = segments[4:]
    if len(rest) > 2 or (len(rest) == 2 and rest[1] != "approval"):
        raise status(404, "NotFound", "the server could not find the requested resource")
    name = rest[0] if rest else None
    sub = "approval" if len(rest) == 2 else None
    verb = {("GET", False): "list", ("GET", True): "get", ("POST", False): "create",
            ("DELETE", True): "delete"}.get((req.method, name is not None))
    if sub:
        verb = "update" if req.method == "PUT" else None
    if verb is None:
        raise status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    if verb in ("list", "get") and req.q("watch") in ("1", "true"):
        raise status(405, "MethodNotAllowed", "the emulator's apiserver does not serve watches: poll with GET")
    kubeauth.authorize(app, cl, user, verb, f"{RESOURCE}/{sub}" if sub else RESOURCE, name, GROUP)
    csrs = _store(app.state, cl)
    if verb == "create":
        csr = _create(app, cl, user, csrs, req)
        reconcile(app, cl, [csr])
        return Response.json(201, public(csr))
    reconcile(app, cl, list(csrs.values()))
    if verb == "list":
        field = req.q("fieldSelector") or ""
        wanted = field.split("=", 1)[1] if field.startswith("metadata.name=") else None
        if field and wanted is None:
            raise status(400, "BadRequest", f'field label not supported: {field.split("=", 1)[0]}')
        items = [x for n, x in sorted(csrs.items()) if wanted is None or n == wanted]
        return Response.json(200, {"kind": f"{KIND}List", "apiVersion": GROUP_VERSION,
                                   "metadata": {"resourceVersion": str(app.state.data["resource_version"])},
                                   "items": [public(x) for x in items]})
    csr = csrs.get(name)
    if csr is None:
        raise status(404, "NotFound", f'{RESOURCE}.{GROUP} "{name}" not found',
                     {"name": name, "group": GROUP, "kind": RESOURCE})
    if verb == "get":
        return Response.json(200, public(csr))
    if verb == "delete":
        del csrs[name]
        app.state.mark_dirty()
        return Response.json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                   "details": {"name": name, "group": GROUP, "kind": RESOURCE,
                                               "uid": csr["metadata"]["uid"]}})
    _set_approval(app, cl, csr, req)
    return Response.json(200, public(csr))


def _invalid(name, problems):
    text = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
    return status(422, "Invalid", f'{KIND}.{GROUP} "{name}" is invalid: {text}',
                  {"name": name, "group": GROUP, "kind": KIND,
                   "causes": [{"reason": "FieldValueInvalid", "message": p, "field": p.split(":", 1)[0]}
                              for p in problems]})


def parse_request(data):
    """spec.request (base64-decoded bytes) as a cryptography CSR; ValueError naming the problem
    (certificates.ParseCSR and CheckSignature in validation.go)."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    if "-----BEGIN CERTIFICATE REQUEST-----" not in text:
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    try:
        csr = x509.load_pem_x509_csr(data)
    except ValueError as e:
        raise ValueError(f"x509: malformed certificate request: {e}")
    if not csr.is_signature_valid:
        raise ValueError("x509: ECDSA verification failure")
    return csr


def _create(app, cl, user, csrs, req):
    try:
        body = req.json()
    except Exception:
        raise status(400, "BadRequest", "the request body is not a JSON CertificateSigningRequest")
    if not isinstance(body, dict):
        raise status(400, "BadRequest", "the request body is not a JSON CertificateSigningRequest")
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    name = meta.get("name") or ""
    if not name and meta.get("generateName"):
        name = f'{meta["generateName"]}{secrets.token_hex(3)[:5]}'
    problems = []
    if body.get("apiVersion") not in (None, GROUP_VERSION) or body.get("kind") not in (None, KIND):
        problems.append(f"apiVersion/kind: Invalid value: {body.get('apiVersion')}/{body.get('kind')}: "
                        f"expected {GROUP_VERSION} {KIND}")
    if not name:
        problems.append("metadata.name: Required value: name or generateName is required")
    elif "/" in name or "%" in name or name in (".", ".."):
        problems.append(f"metadata.name: Invalid value: {name!r}: may not contain '/' or '%' or be '.' or '..'")
    request = spec.get("request")
    try:
        der = base64.b64decode(request or "", validate=True)
        if not der:
            problems.append("spec.request: Required value")
        else:
            parse_request(der)
    except (binascii.Error, TypeError):
        problems.append("spec.request: Invalid value: not base64 of a PEM CERTIFICATE REQUEST")
    except ValueError as e:
        problems.append(f"spec.request: Invalid value: {e}")
    signer = spec.get("signerName")
    if not signer:
        problems.append("spec.signerName: Required value")
    elif not isinstance(signer, str) or not _SIGNER.match(signer):
        problems.append(f"spec.signerName: Invalid value: {signer!r}: must be a fully qualified domain and path "
                        "of the form 'example.com/signer-name'")
    usages = spec.get("usages")
    if not usages or not isinstance(usages, list):
        problems.append("spec.usages: Required value")
    else:
        seen = set()
        for i, u in enumerate(usages):
            if u not in SUPPORTED_USAGES:
                problems.append(f"spec.usages[{i}]: Unsupported value: {u!r}")
            elif u in seen:
                problems.append(f"spec.usages[{i}]: Duplicate value: {u!r}")
            seen.add(u)
    expiration = spec.get("expirationSeconds")
    if expiration is not None and (not isinstance(expiration, int) or isinstance(expiration, bool)
                                   or expiration < _MIN_EXPIRATION):
        problems.append(f"spec.expirationSeconds: Invalid value: {expiration!r}: may not specify a duration less "
                        f"than {_MIN_EXPIRATION} seconds (10 minutes)")
    if problems:
        raise _invalid(name or "", problems)
    csr_x509 = parse_request(base64.b64decode(request))
    # CertificateSubjectRestriction admission (plugin/pkg/admission/certificates/subjectrestriction).
    orgs = [a.value for a in csr_x509.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if signer == CLIENT_SIGNER and kubeauth.MASTERS_GROUP in orgs:
        raise status(403, "Forbidden", f'{RESOURCE}.{GROUP} "{name}" is forbidden: use of {CLIENT_SIGNER} '
                                       f"signer with {kubeauth.MASTERS_GROUP} group is not allowed")
    if name in csrs:
        raise status(409, "AlreadyExists", f'{RESOURCE}.{GROUP} "{name}" already exists',
                     {"name": name, "group": GROUP, "kind": RESOURCE})
    new_spec = {"request": request, "signerName": signer, "usages": list(usages),
                "username": user.name, "groups": list(user.groups)}
    if user.uid:
        new_spec["uid"] = user.uid
    if expiration is not None:
        new_spec["expirationSeconds"] = expiration
    csr = {"apiVersion": GROUP_VERSION, "kind": KIND,
           "metadata": {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": iso_seconds(clock.now()),
                        "resourceVersion": app.state.next_resource_version()},
           "spec": new_spec, "status": {},
           "_authenticatedBy": user.kind}  # bookkeeping: `public` strips it from answers
    csrs[name] = csr
    app.state.mark_dirty()
    return csr


def _set_approval(app, cl, csr, req):
    body = req.json()
    wanted = [cond for cond in ((body.get("status") or {}).get("conditions") or []) if isinstance(cond, dict)]
    types = {cond.get("type") for cond in wanted}
    if "Approved" in types and "Denied" in types:
        raise _invalid(csr["metadata"]["name"], ["status.conditions: Invalid value: Approved and Denied conditions "
                                                 "are mutually exclusive"])
    for cond in wanted:
        if cond.get("type") in ("Approved", "Denied") and not _condition(csr, cond["type"]):
            _add_condition(csr, cond["type"], cond.get("reason") or "KubectlApprove", cond.get("message") or "")
    csr["metadata"]["resourceVersion"] = app.state.next_resource_version()
    reconcile(app, cl, [csr])


# -- the controllers --------------------------------------------------------------------------

def _condition(csr, kind):
    return any(c.get("type") == kind and c.get("status", "True") == "True"
               for c in csr["status"].get("conditions") or [])


def _add_condition(csr, kind, reason, message):
    now = iso_seconds(clock.now())
    csr["status"].setdefault("conditions", []).append(
        {"type": kind, "status": "True", "reason": reason, "message": message,
         "lastUpdateTime": now, "lastTransitionTime": now})


def kubelet_client_problem(csr_x509, usages):
    """ValidateKubeletClientCSR (pkg/apis/certificates/v1/helpers.go): None or what is wrong."""
    orgs = [a.value for a in csr_x509.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if orgs != [kubeauth.NODES_GROUP]:
        return "subject organization is not system:nodes"
    try:
        sans = csr_x509.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = []
    for kind, what in ((x509.DNSName, "DNS"), (x509.RFC822Name, "Email"), (x509.IPAddress, "IP"),
                       (x509.UniformResourceIdentifier, "URI")):
        if sans and sans.get_values_for_type(kind):
            return f"{what} subjectAltNames are not allowed"
    if not _common_name(csr_x509).startswith(kubeauth.NODE_USER_PREFIX):
        return "subject common name does not begin with system:node:"
    if set(usages) not in _KUBELET_CLIENT_USAGES or len(set(usages)) != len(usages):
        return "usages did not match [client auth digital signature key encipherment]"
    return None


def client_usages_problem(usages):
    """validAPIServerClientUsages (signer.go) for kubernetes.io/kube-apiserver-client."""
    for u in usages:
        if u not in ("digital signature", "key encipherment", "client auth"):
            return f"invalid usage for client certificate: {u}"
    if "client auth" not in usages:
        return "missing required usage for client certificate: client auth"
    return None


def _common_name(csr_x509):
    names = csr_x509.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return names[0].value if names else ""


def _requester(csr):
    spec = csr["spec"]
    return kubeauth.User(spec["username"], list(spec.get("groups") or []), csr.get("_authenticatedBy", ""),
                         spec.get("uid", ""))


def reconcile(app, cl, csrs):
    """One pass of the approver, then the signer, over `csrs`."""
    for csr in csrs:
        if app.state.settings.get(AUTO_APPROVE_SETTING, AUTO_APPROVE_DEFAULT):
            _approve(app, cl, csr)
        _sign(app, cl, csr)


def _approve(app, cl, csr):
    """sarApprover.handle: self node client first, then node client; a SubjectAccessReview
    (here kubeauth.allowed) of create on the matching subresource decides."""
    if csr["status"].get("certificate") or _condition(csr, "Approved") or _condition(csr, "Denied"):
        return
    spec = csr["spec"]
    if spec["signerName"] != KUBELET_CLIENT_SIGNER:
        return
    request = parse_request(base64.b64decode(spec["request"]))
    if kubelet_client_problem(request, spec["usages"]) is not None:
        return
    requester = _requester(csr)
    recognizers = []
    if spec["username"] == _common_name(request):
        recognizers.append(("selfnodeclient", "Auto approving self kubelet client certificate after "
                                              "SubjectAccessReview."))
    recognizers.append(("nodeclient", "Auto approving kubelet client certificate after SubjectAccessReview."))
    for subresource, message in recognizers:
        if kubeauth.allowed(app, cl, requester, "create", f"{RESOURCE}/{subresource}", GROUP):
            _add_condition(csr, "Approved", "AutoApproved", message)
            csr["metadata"]["resourceVersion"] = app.state.next_resource_version()
            return


def _sign(app, cl, csr):
    """signer.handle for the two client signers, with the cluster's CA as it is now (cluster_pki.py)."""
    spec = csr["spec"]
    if (csr["status"].get("certificate") or not _condition(csr, "Approved") or _condition(csr, "Failed")
            or spec["signerName"] not in (KUBELET_CLIENT_SIGNER, CLIENT_SIGNER)):
        return
    request = parse_request(base64.b64decode(spec["request"]))
    if spec["signerName"] == KUBELET_CLIENT_SIGNER:
        problem = kubelet_client_problem(request, spec["usages"])
    else:
        problem = client_usages_problem(spec["usages"])
    if problem:
        _add_condition(csr, "Failed", "SignerValidationFailure", problem)
    else:
        lifetime = signing_duration(app.state.settings, spec.get("expirationSeconds"))
        pem = cluster_pki.ca_of(app, cl).sign_csr(request, now=clock.now(), lifetime=lifetime,
                              key_usages={_KEY_USAGES[u] for u in spec["usages"] if u in _KEY_USAGES},
                              extended_usages=[_EXT_USAGES[u] for u in spec["usages"] if u in _EXT_USAGES],
                              backdate=_BACKDATE if lifetime >= _SHORT else datetime.timedelta(0))
        csr["status"]["certificate"] = base64.b64encode(pem).decode()
    csr["metadata"]["resourceVersion"] = app.state.next_resource_version()
    app.state.mark_dirty()


def signing_duration(settings, expiration_seconds):
    """signer.duration: the cluster signing duration, or the requested expirationSeconds when
    shorter (never under 10 minutes)."""
    ttl = datetime.timedelta(seconds=float(settings.get(SIGNING_DURATION_SETTING, SIGNING_DURATION_DEFAULT)))
    if expiration_seconds is None:
        return ttl
    requested = datetime.timedelta(seconds=expiration_seconds)
    if requested > ttl:
        return ttl
    return max(requested, datetime.timedelta(minutes=10))
