"""SelfSubjectAccessReview (authorization.k8s.io/v1) on the kube-apiserver stand-in: what
`kubectl auth can-i` asks (pkg/registry/authorization/selfsubjectaccessreview/rest.go).

The answer comes from kubeauth.decide, the same authorizer the server enforces on every other
request: a "yes" here is a request that would pass, a "no" one that would get 403. Admission
(NodeRestriction) is not part of the answer, as upstream. Creating the review needs no more than
being authenticated (system:basic-user); it is not stored.
"""

from tests.emulator import kubeauth
from tests.emulator.httpbase import Response
from tests.emulator.kubeauth import status

GROUP = "authorization.k8s.io"
KIND = "SelfSubjectAccessReview"


def create(app, cl, user, req):
    try:
        body = req.json()
    except Exception:
        body = None
    if not isinstance(body, dict):
        raise status(400, "BadRequest", f"the request body is not a JSON {KIND}")
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    # pkg/apis/authorization/validation/validation.go ValidateSelfSubjectAccessReviewSpec.
    if bool(resource) == bool(non_resource):
        which = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        raise status(422, "Invalid", f'{KIND}.{GROUP} "" is invalid: spec.resourceAttributes: Invalid value: '
                                     f'"null": {which}',
                     {"group": GROUP, "kind": KIND, "causes": [
                         {"reason": "FieldValueInvalid", "message": which, "field": "spec.resourceAttributes"}]})
    if resource:
        attrs = kubeauth.Attributes(verb=resource.get("verb") or "", resource=resource.get("resource") or "",
                                    subresource=resource.get("subresource") or "",
                                    group=resource.get("group") or "", namespace=resource.get("namespace") or "",
                                    name=resource.get("name") or "",
                                    field_selector=_field_selector(resource.get("fieldSelector")))
    else:
        attrs = kubeauth.Attributes(verb=non_resource.get("verb") or "", path=non_resource.get("path") or "/")
    allowed, reason = kubeauth.decide(app, cl, user, attrs)
    result = {"allowed": allowed}
    if reason:
        result["reason"] = reason
    return Response.json(201, {"kind": KIND, "apiVersion": f"{GROUP}/v1", "metadata": {},
                               "spec": spec, "status": result})


def _field_selector(selector):
    """FieldSelectorAttributes (1.31+): rawSelector, or requirements with the Equals/In operators."""
    if not isinstance(selector, dict):
        return ""
    if selector.get("rawSelector"):
        return selector["rawSelector"]
    clauses = []
    for req in selector.get("requirements") or []:
        values = req.get("values") or []
        if req.get("operator") in ("In", "Equals") and len(values) == 1:
            clauses.append(f"{req.get('key')}={values[0]}")
    return ",".join(clauses)
