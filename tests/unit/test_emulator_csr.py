"""certificates.k8s.io/v1 on the kube-apiserver stand-in: the CSR API, the kubelet client
auto-approver and the signer (tests/emulator/certificates.py). The callers it uses are in
tests/apiserver_fixtures.py."""

import base64
import datetime
import email.utils
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.apiserver_fixtures import (CSRS, KubeClient, admin_client, bootstrap_token, csr_object, make_csr,
                                      node_client)
from tests.emulator import constants as C


def conditions(csr):
    return {c["type"]: c for c in csr["status"].get("conditions", [])}


@pytest.fixture
def boot(fresh_emulator):
    token = bootstrap_token(fresh_emulator)
    return KubeClient(fresh_emulator, token=token), token


def stored(emu, name, cluster=C.CLUSTER_NAME):
    """The emulator's own record of CSR `name` (with its bookkeeping keys), from /_emulator/state."""
    return {c["metadata"]["name"]: c for c in emu.state()["csrs"][cluster]}[name]


def _ca(emu):
    with open(emu.ca_bundle, "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def test_discovery_lists_the_certificates_group(fresh_emulator, boot):
    client, _ = boot
    status, groups = client("GET", "/apis")
    assert status == 200 and groups["kind"] == "APIGroupList"
    assert "certificates.k8s.io/v1" in [g["preferredVersion"]["groupVersion"] for g in groups["groups"]]
    status, group = client("GET", "/apis/certificates.k8s.io")
    assert status == 200 and group["kind"] == "APIGroup" and group["name"] == "certificates.k8s.io"
    status, resources = client("GET", "/apis/certificates.k8s.io/v1")
    assert status == 200 and resources["groupVersion"] == "certificates.k8s.io/v1"
    csr = next(r for r in resources["resources"] if r["name"] == "certificatesigningrequests")
    assert csr["kind"] == "CertificateSigningRequest" and "create" in csr["verbs"] and not csr["namespaced"]
    anonymous = KubeClient(fresh_emulator)
    assert anonymous("GET", "/apis")[0] == 401


def test_bootstrap_csr_is_approved_and_signed_by_the_cluster_ca(fresh_emulator, boot):
    client, token = boot
    csr_pem, _ = make_csr("system:node:n1")
    # What the client claims as requester is ignored: the server fills it in.
    body = csr_object(csr_pem, name="node-csr-1", username="system:admin", groups=["system:masters"])
    status, created = client("POST", CSRS, body)
    assert status == 201, created
    token_id = token.split(".")[0]
    assert created["spec"]["username"] == f"system:bootstrap:{token_id}"
    assert "system:bootstrappers" in created["spec"]["groups"]
    assert "system:bootstrappers:aks-flex-node" in created["spec"]["groups"]
    assert "system:masters" not in created["spec"]["groups"]
    assert stored(fresh_emulator, "node-csr-1")["_authenticatedBy"] == "bootstrap-token"
    approved = conditions(created)["Approved"]
    assert approved["status"] == "True" and approved["reason"] == "AutoApproved"
    assert approved["message"] == "Auto approving kubelet client certificate after SubjectAccessReview."

    cert = x509.load_pem_x509_certificate(base64.b64decode(created["status"]["certificate"]))
    ca = _ca(fresh_emulator)
    assert cert.issuer == ca.subject
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    assert cert.subject == x509.load_pem_x509_csr(csr_pem).subject
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    # --cluster-signing-duration's default, 8760h, backdated 5 minutes as kube-controller-manager does.
    lifetime = cert.not_valid_after - cert.not_valid_before
    assert datetime.timedelta(days=365) - datetime.timedelta(seconds=2) <= lifetime <= \
        datetime.timedelta(days=365, minutes=5, seconds=2)
    # GET and LIST (fieldSelector) show the same object.
    status, got = client("GET", f"{CSRS}/node-csr-1")
    assert status == 200 and got["status"]["certificate"] == created["status"]["certificate"]
    client("POST", CSRS, csr_object(make_csr("system:node:n2")[0], name="node-csr-2"))
    status, listing = client("GET", f"{CSRS}?fieldSelector=metadata.name%3Dnode-csr-2")
    assert status == 200 and [i["metadata"]["name"] for i in listing["items"]] == ["node-csr-2"]
    assert len(client("GET", CSRS)[1]["items"]) == 2
    assert client("POST", CSRS, body)[0] == 409


@pytest.mark.parametrize("change, expected", [
    ({"request": base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()},
     "spec.request: Invalid value: PEM block type must be CERTIFICATE REQUEST"),
    ({"request": "not base64!"}, "spec.request: Invalid value: not base64"),
    ({"signerName": ""}, "spec.signerName: Required value"),
    ({"signerName": "kubelet"}, "spec.signerName: Invalid value: 'kubelet'"),
    ({"usages": ["client auth", "flying"]}, "spec.usages[1]: Unsupported value: 'flying'"),
    ({"usages": []}, "spec.usages: Required value"),
    ({"expirationSeconds": 599},
     "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600"),
])
def test_invalid_csrs_are_422_naming_the_field(boot, change, expected):
    client, _ = boot
    body = csr_object(make_csr()[0])
    body["spec"].update(change)
    status, answer = client("POST", CSRS, body)
    assert status == 422 and answer["reason"] == "Invalid", answer
    assert expected in answer["message"]


def test_a_request_with_a_broken_signature_is_422(boot):
    client, _ = boot
    csr = x509.load_pem_x509_csr(make_csr()[0])
    der = bytearray(csr.public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0x01  # the last byte is inside the signature
    pem = b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(bytes(der)) + \
        b"-----END CERTIFICATE REQUEST-----\n"
    status, answer = client("POST", CSRS, csr_object(pem))
    assert status == 422 and "spec.request: Invalid value" in answer["message"], answer


@pytest.mark.parametrize("kwargs, spec", [
    ({"orgs": ("system:nodes", "extra")}, {}),        # O must be exactly [system:nodes]
    ({"orgs": ()}, {}),
    ({"cn": "node1"}, {}),                            # CN must be system:node:<name>
    ({"sans": ("n1.example.com",)}, {}),              # no SANs
    ({}, {"usages": ["digital signature", "client auth", "server auth"]}),
    ({}, {"usages": ["client auth"]}),                # exactly one of the two allowed sets
    ({}, {"signerName": "kubernetes.io/kubelet-serving"}),
    ({}, {"signerName": "kubernetes.io/kube-apiserver-client"}),
])
def test_csrs_the_approver_does_not_recognise_stay_pending(boot, kwargs, spec):
    client, _ = boot
    body = csr_object(make_csr(**kwargs)[0])
    body["spec"].update(spec)
    status, created = client("POST", CSRS, body)
    assert status == 201, created
    status, got = client("GET", f"{CSRS}/{created['metadata']['name']}")
    assert status == 200 and got["status"] == {}, got


def test_masters_group_with_the_client_signer_is_forbidden(fresh_emulator):
    admin = admin_client(fresh_emulator)
    body = csr_object(make_csr("mallory", orgs=("system:masters",))[0],
                      signer="kubernetes.io/kube-apiserver-client", usages=["client auth"])
    status, answer = admin("POST", CSRS, body)
    assert status == 403 and "system:masters group is not allowed" in answer["message"]


def test_without_auto_approval_csrs_wait_for_a_manual_approval(fresh_emulator, boot):
    client, _ = boot
    fresh_emulator.settings(csr_auto_approve=False)
    status, created = client("POST", CSRS, csr_object(make_csr()[0], name="pending"))
    assert status == 201 and created["status"] == {}
    assert client("GET", f"{CSRS}/pending")[1]["status"] == {}
    # A bootstrapper cannot approve its own request, nor delete it.
    created["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Me"}]}
    status, answer = client("PUT", f"{CSRS}/pending/approval", created)
    assert status == 403 and 'cannot update resource "certificatesigningrequests/approval" in API group ' \
        '"certificates.k8s.io"' in answer["message"]
    assert client("DELETE", f"{CSRS}/pending")[0] == 403
    # kubectl certificate approve, as the cluster admin: the signer issues it.
    admin = admin_client(fresh_emulator)
    status, approved = admin("PUT", f"{CSRS}/pending/approval", created)
    assert status == 200 and conditions(approved)["Approved"]["reason"] == "Me"
    assert approved["status"]["certificate"]
    status, gone = admin("DELETE", f"{CSRS}/pending")
    assert status == 200 and gone["status"] == "Success"
    assert client("GET", f"{CSRS}/pending")[0] == 404


def test_turning_auto_approval_on_approves_pending_csrs_on_the_next_read(fresh_emulator, boot):
    client, _ = boot
    fresh_emulator.settings(csr_auto_approve=False)
    client("POST", CSRS, csr_object(make_csr()[0], name="later"))
    fresh_emulator.settings(csr_auto_approve=True)
    status, got = client("GET", f"{CSRS}/later")
    assert status == 200 and "Approved" in conditions(got) and got["status"]["certificate"]


def test_client_signer_signs_an_approved_daemon_csr(fresh_emulator):
    """kubernetes.io/kube-apiserver-client: not auto-approved, signed once approved (upstream's
    daemon credential, O {system:nodes, aks-flex-node-daemons})."""
    admin = admin_client(fresh_emulator)
    body = csr_object(make_csr("system:node:n1", orgs=("system:nodes", "aks-flex-node-daemons"))[0],
                      name="daemon", signer="kubernetes.io/kube-apiserver-client")
    status, created = admin("POST", CSRS, body)
    assert status == 201 and created["status"] == {}
    created["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "FlexController"}]}
    status, approved = admin("PUT", f"{CSRS}/daemon/approval", created)
    assert status == 200 and approved["status"]["certificate"]


def test_signing_duration_setting_and_expiration_seconds(fresh_emulator, boot):
    client, _ = boot
    status, created = client("POST", CSRS, csr_object(make_csr()[0], expirationSeconds=3600))
    cert = x509.load_pem_x509_certificate(base64.b64decode(created["status"]["certificate"]))
    assert abs((cert.not_valid_after - cert.not_valid_before).total_seconds() - 3600) <= 2  # short: no backdate
    fresh_emulator.settings(csr_signing_duration=6.0)
    status, created = client("POST", CSRS, csr_object(make_csr()[0], expirationSeconds=3600))
    cert = x509.load_pem_x509_certificate(base64.b64decode(created["status"]["certificate"]))
    assert abs((cert.not_valid_after - cert.not_valid_before).total_seconds() - 6) <= 1


def _epoch(naive_utc):
    return naive_utc.replace(tzinfo=datetime.timezone.utc).timestamp()


def test_client_certificates_are_dated_and_judged_by_the_emulators_clock(fresh_emulator):
    """Signed at the emulator's time and judged by it: a certificate signed after the clock
    moved (not yet valid by this machine's clock) passes the TLS handshake and authenticates;
    once the clock passes its NotAfter the apiserver answers 401, as the real kube-apiserver's
    x509 authenticator does, and a bearer token sent with it is tried next (union.go)."""
    emu = fresh_emulator
    emu.settings(csr_signing_duration=3600.0)
    emu.advance_clock(86400)
    boot = KubeClient(emu, token=bootstrap_token(emu))
    csr_pem, key_pem = make_csr("system:node:n1")
    status, created = boot("POST", CSRS, csr_object(csr_pem))
    assert status == 201, created
    cert_pem = base64.b64decode(created["status"]["certificate"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    world = emu.admin("GET", "clock")["now"]
    assert _epoch(cert.not_valid_before) > time.time() + 3600  # this machine's clock: not yet valid
    assert world - 600 <= _epoch(cert.not_valid_before) <= world  # the emulator's: signed just now
    # The apiserver's Date header is the emulator's clock (the fake kubelet renews by it).
    _, headers, _ = emu.http("GET", f"{emu.apiserver}/readyz")
    assert abs(email.utils.parsedate_to_datetime(headers["Date"]).timestamp() - world) < 600

    node = KubeClient(emu, cert=(cert_pem, key_pem))
    status, body = node("GET", "/api/v1/nodes/n1")
    assert (status, body["reason"]) == (404, "NotFound"), body  # authenticated as the node: no such Node yet
    emu.advance_clock(3601)  # past NotAfter
    status, body = node("GET", "/api/v1/nodes/n1")
    assert (status, body["reason"], body["message"]) == (401, "Unauthorized", "Unauthorized"), body
    # The expired certificate with the cluster admin's token: the token authenticates.
    admin_token = admin_client(emu).token
    both = KubeClient(emu, token=admin_token, cert=(cert_pem, key_pem))
    assert both("GET", "/api/v1/nodes/n1")[0] == 404


def test_a_node_renews_its_own_certificate_but_not_another_nodes(fresh_emulator):
    node, _ = node_client(fresh_emulator, "n1")
    status, renewed = node("POST", CSRS, csr_object(make_csr("system:node:n1")[0]))
    assert status == 201 and renewed["spec"]["username"] == "system:node:n1"
    assert stored(fresh_emulator, renewed["metadata"]["name"])["_authenticatedBy"] == "x509"
    assert conditions(renewed)["Approved"]["message"] == \
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    assert renewed["status"]["certificate"]
    # A node has no nodeclient permission: a request for another node's name waits.
    status, other = node("POST", CSRS, csr_object(make_csr("system:node:n2")[0]))
    assert status == 201 and other["status"] == {}
    assert node("DELETE", f"{CSRS}/{other['metadata']['name']}")[0] == 403


# What the v1.32.0 OpenAPI definitions declare for the CSR API's answers: each definition's
# properties and, for a property holding another definition, which one (in a list: its items').
# None: not walked further (a scalar, a free-form map, or a definition the stand-in never fills).
# Source: kubernetes/kubernetes api/openapi-spec/swagger.json at v1.32.0, definitions
# io.k8s.api.certificates.v1.CertificateSigningRequest{,List,Spec,Status,Condition} and
# io.k8s.apimachinery.pkg.apis.meta.v1.{ObjectMeta,ListMeta} (the same release's definitions
# as tests/data/k8s-openapi/README.md describes).
V1_32_CSR_SCHEMA = {
    "CertificateSigningRequest": {"apiVersion": None, "kind": None, "metadata": "ObjectMeta",
                                  "spec": "CertificateSigningRequestSpec",
                                  "status": "CertificateSigningRequestStatus"},
    "CertificateSigningRequestList": {"apiVersion": None, "kind": None, "metadata": "ListMeta",
                                      "items": ["CertificateSigningRequest"]},
    "CertificateSigningRequestSpec": dict.fromkeys(("expirationSeconds", "extra", "groups", "request",
                                                    "signerName", "uid", "usages", "username")),
    "CertificateSigningRequestStatus": {"certificate": None, "conditions": ["CertificateSigningRequestCondition"]},
    "CertificateSigningRequestCondition": dict.fromkeys(("lastTransitionTime", "lastUpdateTime", "message",
                                                         "reason", "status", "type")),
    "ObjectMeta": dict.fromkeys(("annotations", "creationTimestamp", "deletionGracePeriodSeconds",
                                 "deletionTimestamp", "finalizers", "generateName", "generation", "labels",
                                 "managedFields", "name", "namespace", "ownerReferences", "resourceVersion",
                                 "selfLink", "uid")),
    "ListMeta": dict.fromkeys(("continue", "remainingItemCount", "resourceVersion", "selfLink")),
}


def undeclared(value, definition, where="$"):
    """The paths of `value`'s fields that V1_32_CSR_SCHEMA[definition] does not declare."""
    found = []
    declared = V1_32_CSR_SCHEMA[definition]
    for key, item in value.items():
        inner = declared.get(key, ...)
        if inner is ...:
            found.append(f"{where}.{key}")
        elif isinstance(inner, str):
            found += undeclared(item, inner, f"{where}.{key}")
        elif isinstance(inner, list):
            for i, element in enumerate(item):
                found += undeclared(element, inner[0], f"{where}.{key}[{i}]")
    return found


def test_no_answer_carries_a_field_the_v1_32_schema_does_not_declare(fresh_emulator, boot):
    """Every kind of CSR answer (create, get, list, approval, as each kind of requester, approved,
    pending, signed, failed) holds only declared fields: the stand-in's bookkeeping
    ("_authenticatedBy") stays in /_emulator/state."""
    client, _ = boot
    admin = admin_client(fresh_emulator)
    node, _ = node_client(fresh_emulator, "n1")
    answers = []
    status, created = client("POST", CSRS, csr_object(make_csr()[0], name="boot", expirationSeconds=3600))
    answers.append(("CertificateSigningRequest", status, created))
    answers.append(("CertificateSigningRequest", *node("POST", CSRS, csr_object(make_csr()[0], name="renew"))))
    # Approved by hand with usages the client signer refuses: a Failed condition.
    body = csr_object(make_csr("daemon", orgs=("aks-flex-node-daemons",))[0], name="daemon",
                      signer="kubernetes.io/kube-apiserver-client", usages=["digital signature", "server auth"])
    status, pending = admin("POST", CSRS, body)
    answers.append(("CertificateSigningRequest", status, pending))
    pending["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "ByHand"}]}
    status, failed = admin("PUT", f"{CSRS}/daemon/approval", pending)
    assert status == 200 and conditions(failed)["Failed"]["reason"] == "SignerValidationFailure", failed
    answers.append(("CertificateSigningRequest", status, failed))
    answers.append(("CertificateSigningRequest", *client("GET", f"{CSRS}/boot")))
    answers.append(("CertificateSigningRequestList", *admin("GET", CSRS)))
    answers.append(("CertificateSigningRequestList", *client("GET", f"{CSRS}?fieldSelector=metadata.name%3Dboot")))
    for definition, status, answer in answers:
        assert status in (200, 201), answer
        assert undeclared(answer, definition) == [], answer
    assert len(answers[-2][2]["items"]) == 4  # the node's own bootstrap CSR, boot, renew, daemon
    # The bookkeeping is still there for the approver and for tests.
    kinds = {c["metadata"]["name"]: c["_authenticatedBy"] for c in fresh_emulator.state()["csrs"][C.CLUSTER_NAME]}
    assert (kinds["boot"], kinds["renew"], kinds["daemon"]) == ("bootstrap-token", "x509", "static-token")
