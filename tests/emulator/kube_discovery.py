"""Discovery on the kube-apiserver stand-in: /api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>.

What is listed is what this stand-in serves, verbs included (no watch, no deletecollection):
a client that discovers a verb here finds it answered. Shapes: metav1.APIVersions,
APIGroupList, APIGroup and APIResourceList (k8s.io/apimachinery/pkg/apis/meta/v1/types.go).

Aggregated discovery (apidiscovery.k8s.io/v2, KEP-3352) is not served. client-go's discovery
client (kubectl 1.32) sends `Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,
application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json;q=0.9`
and reads the legacy documents when the answer's Content-Type is plain application/json
(k8s.io/client-go/discovery/discovery_client.go), which is what a server without aggregated
discovery answers: so do we, and no 406 is needed.
"""

from tests.emulator.httpbase import Response
from tests.emulator.kubeauth import status

GROUPS = {}  # (group, version) -> [resource dicts], filled by `resource`


def resource(api_group, api_version, name, kind, verbs, namespaced, singular="", short=(), categories=(), **extra):
    entry = {"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": list(verbs)}
    if short:
        entry["shortNames"] = list(short)
    if categories:
        entry["categories"] = list(categories)
    entry.update(extra)
    GROUPS.setdefault((api_group, api_version), []).append(entry)


# core/v1
resource("", "v1", "nodes", "Node", ["create", "delete", "get", "list", "patch", "update"], False,
         "node", short=["no"])
resource("", "v1", "nodes/status", "Node", ["get", "patch", "update"], False)
resource("", "v1", "pods", "Pod", ["delete", "get", "list"], True, "pod", short=["po"], categories=["all"])
# kubectl drain looks for this entry (group and version set) to evict rather than delete
# (k8s.io/kubectl/pkg/drain/drain.go CheckEvictionSupport).
resource("", "v1", "pods/eviction", "Eviction", ["create"], True, group="policy", version="v1")
resource("", "v1", "events", "Event", ["create", "get", "list"], True, "event", short=["ev"])
# Groups. The order is the server's choice (kube-aggregator's group priorities put apps first);
# certificates.k8s.io comes first here, as it did when it was the only group (tests rely on it).
resource("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest",
         ["create", "delete", "get", "list"], False, "certificatesigningrequest", short=["csr"])
resource("certificates.k8s.io", "v1", "certificatesigningrequests/approval", "CertificateSigningRequest",
         ["update"], False)
resource("apps", "v1", "daemonsets", "DaemonSet", ["get", "list"], True, "daemonset", short=["ds"],
         categories=["all"])
resource("events.k8s.io", "v1", "events", "Event", ["create", "get", "list"], True, "event", short=["ev"])
resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", ["create"], False,
         "selfsubjectaccessreview")
resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", ["get", "list"], True,
         "poddisruptionbudget", short=["pdb"])


def served(group, version, name):
    """The discovery entry of resource `name` ("plural" or "plural/sub"), or None."""
    return next((r for r in GROUPS.get((group, version), ()) if r["name"] == name), None)


def _group(name):
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for g, v in GROUPS if g == name]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def _groups():
    names = []
    for g, _ in GROUPS:
        if g and g not in names:
            names.append(g)
    return [_group(n) for n in names]


def answer(segments, server_address):
    """The discovery document at `segments`, or None if the path is not a discovery path."""
    if segments == ["api"]:
        return Response.json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
    if segments == ["api", "v1"]:
        return _resource_list("", "v1", "v1")
    if segments == ["apis"]:
        return Response.json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": _groups()})
    if len(segments) == 2 and segments[0] == "apis":
        if not any(g == segments[1] for g, _ in GROUPS):
            raise status(404, "NotFound", "the server could not find the requested resource")
        return Response.json(200, {"kind": "APIGroup", "apiVersion": "v1", **_group(segments[1])})
    if len(segments) == 3 and segments[0] == "apis":
        if (segments[1], segments[2]) not in GROUPS:
            raise status(404, "NotFound", "the server could not find the requested resource")
        return _resource_list(segments[1], segments[2], f"{segments[1]}/{segments[2]}")
    return None


def _resource_list(group, version, group_version):
    return Response.json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                               "resources": GROUPS[(group, version)]})
