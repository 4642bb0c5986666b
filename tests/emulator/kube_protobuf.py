"""Request bodies in the Kubernetes protobuf encoding (application/vnd.kubernetes.protobuf), which
kubectl 1.32's typed clients send for built-in kinds (a SelfSubjectAccessReview from
`kubectl auth can-i`, an Eviction from `kubectl drain`). Answers stay JSON: those clients
accept it.

The envelope (k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go): the 4 bytes
"k8s\\0", then a runtime.Unknown message {typeMeta 1 {apiVersion 1, kind 2}, raw 2,
contentEncoding 3, contentType 4}; `raw` is the object's own message. Field numbers of the
objects decoded here, from the generated.proto files of k8s.io/api and k8s.io/apimachinery:
ObjectMeta {name 1, generateName 2, namespace 3}; SelfSubjectAccessReview {metadata 1, spec 2};
SelfSubjectAccessReviewSpec {resourceAttributes 1, nonResourceAttributes 2}; ResourceAttributes
{namespace 1, verb 2, group 3, version 4, resource 5, subresource 6, name 7, fieldSelector 8
{rawSelector 1}}; NonResourceAttributes {path 1, verb 2}; policy/v1 Eviction {metadata 1,
deleteOptions 2}. Other kinds or fields are not decoded (the caller answers 415).
"""

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


def _varint(data, i):
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(data):
    """{field number: [values]}: bytes for length-delimited fields, ints for varints."""
    out, i = {}, 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            length, i = _varint(data, i)
            value, i = data[i:i + length], i + length
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _strings(message, names):
    f = fields(message)
    return {name: f[n][0].decode() for n, name in names.items() if n in f}


def _meta(raw):
    return _strings(raw, {1: "name", 2: "generateName", 3: "namespace"})


def _ssar(raw):
    f = fields(raw)
    spec = fields(f.get(2, [b""])[0])
    out = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}
    if 1 in spec:
        attrs = _strings(spec[1][0], {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource",
                                      6: "subresource", 7: "name"})
        selector = fields(spec[1][0]).get(8)
        if selector:
            attrs["fieldSelector"] = _strings(selector[0], {1: "rawSelector"})
        out["spec"]["resourceAttributes"] = attrs
    if 2 in spec:
        out["spec"]["nonResourceAttributes"] = _strings(spec[2][0], {1: "path", 2: "verb"})
    return out


def _eviction(raw):
    f = fields(raw)
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": _meta(f.get(1, [b""])[0])}


_DECODERS = {("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _ssar, ("policy/v1", "Eviction"): _eviction,
             ("policy/v1beta1", "Eviction"): _eviction}


def decode(body):
    """The JSON-shaped object of a protobuf request body; ValueError if it is not one we read."""
    if not body.startswith(MAGIC):
        raise ValueError("the body does not start with the Kubernetes protobuf magic number")
    unknown = fields(body[len(MAGIC):])
    type_meta = _strings(unknown.get(1, [b""])[0], {1: "apiVersion", 2: "kind"})
    decoder = _DECODERS.get((type_meta.get("apiVersion"), type_meta.get("kind")))
    if decoder is None:
        raise ValueError(f"{type_meta.get('apiVersion')}/{type_meta.get('kind')} in protobuf is not decoded here")
    return decoder(unknown.get(2, [b""])[0])
