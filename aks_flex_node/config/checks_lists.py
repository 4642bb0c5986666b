"""configobj checks of the list values: Kubernetes labels, Azure tags, kube-reserved
resources, eviction thresholds (check_key_value_list) and taints (check_taint_list), with
the names the kubelet allows. Their one-value neighbours are in checks.py."""

import re

from aks_flex_node.config.checks import _DNS_LABEL, _K8S_NAME_PART, Invalid, shorten

# Learn, "Use tags to organize your Azure resources": at most 50 tag name-value pairs.
MAX_TAGS = 50


_QUANTITY = re.compile(r"^\d+(?:\.\d+)?(?:m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$", re.ASCII)


_PERCENT = re.compile(r"^\d+(?:\.\d+)?%$", re.ASCII)


# kubelet refuses --node-labels in the kubernetes.io / k8s.io namespaces except these
# (kubernetes cmd/kubelet/app/options/options.go ValidateKubeletFlags and
# pkg/kubelet/apis/well_known_labels.go).
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


KUBELET_LABELS = (
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch", "kubernetes.io/hostname", "kubernetes.io/os",
    "node.kubernetes.io/instance-type", "topology.kubernetes.io/region", "topology.kubernetes.io/zone",
)


# kube-reserved resources and eviction signals the kubelet knows (kubelet flag reference).
RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")


EVICTION_SIGNALS = (
    "memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
    "imagefs.inodesFree", "containerfs.available", "containerfs.inodesFree", "pid.available",
)


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


# Azure tag names: at most 512 characters, none of < > % & \ ? / ; values at most 256.
_TAG_FORBIDDEN = set('<>%&\\?/')


def _items(value, separator, what, example):
    """Split "a=b,c=d" into pairs; the whole value is named in errors."""
    pairs = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            raise Invalid(value, f"{what} separated by single commas, such as {example}")
        name, sep, val = item.partition(separator)
        if not sep:
            raise Invalid(value, f"{what} such as {example}: {item!r} has no {separator!r}")
        pairs.append((name.strip(), val.strip()))
    names = [n for n, _ in pairs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise Invalid(value, f"{what} with each name once ({', '.join(duplicates)} repeated)")
    return pairs


def _is_qualified_name(name):
    prefix, slash, base = name.rpartition("/")
    if slash and not (len(prefix) <= 253 and all(_DNS_LABEL.match(p) for p in prefix.split("."))):
        return False
    return len(base) <= 63 and bool(_K8S_NAME_PART.match(base))


def _is_label_value(val):
    return val == "" or (len(val) <= 63 and bool(_K8S_NAME_PART.match(val)))


def _label_namespace_allowed(name):
    namespace = name.rpartition("/")[0]
    is_kubernetes = any(namespace == d or namespace.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))
    if not is_kubernetes or name in KUBELET_LABELS:
        return True
    return any(namespace == ns or namespace.endswith("." + ns) for ns in KUBELET_LABEL_NAMESPACES)


def check_key_value_list(value, kind="label"):
    """label, tag and reserved lists are name=value; eviction lists are signal<threshold.
    The typed value is the list of normalised "name=value" (or "signal<threshold") items."""
    if value == "":
        return []
    separator = "<" if kind == "eviction" else "="
    if kind == "label":
        pairs = _items(value, "=", "name=value labels", "tier=edge,site=lyon")
        for name, val in pairs:
            if not _is_qualified_name(name) or not _is_label_value(val):
                raise Invalid(value, f"Kubernetes labels name=value: {name}={val} is not a valid label "
                                     "(names and values: up to 63 letters, digits, '-', '_', '.', "
                                     "alphanumeric at both ends; a name may have a DNS prefix/)")
            if not _label_namespace_allowed(name):
                raise Invalid(value, f"labels the kubelet may set: {name} is in the kubernetes.io/k8s.io "
                                     f"namespace, where only {', '.join(KUBELET_LABEL_NAMESPACES)} "
                                     "prefixes and the well-known labels are allowed; add it with "
                                     "kubectl label after the node joined")
    elif kind == "tag":
        pairs = _items(value, "=", "name=value tags", "env=edge,site=lyon")
        if len(pairs) > MAX_TAGS:
            raise Invalid(value, f"at most {MAX_TAGS} Azure tags (there are {len(pairs)})",
                          shown=shorten(value))
        for name, val in pairs:
            if not name or len(name) > 512 or _TAG_FORBIDDEN & set(name) or len(val) > 256:
                raise Invalid(value, f"Azure tags name=value: {name}={val} is not valid (names up to "
                                     "512 characters without < > % & \\ ? /, values up to 256)")
    elif kind == "reserved":
        pairs = _items(value, "=", "resource=quantity pairs", "cpu=100m,memory=512Mi")
        for name, val in pairs:
            if name not in RESERVED_RESOURCES or not _QUANTITY.match(val):
                raise Invalid(value, "resource=quantity pairs with resource one of "
                                     f"{', '.join(RESERVED_RESOURCES)} and a quantity such as 100m or 512Mi "
                                     f"({name}={val} is not)")
    elif kind == "eviction":
        pairs = _items(value, "<", "signal<threshold pairs", "memory.available<100Mi,nodefs.available<10%")
        for name, val in pairs:
            if name not in EVICTION_SIGNALS or not (_QUANTITY.match(val) or _PERCENT.match(val)):
                raise Invalid(value, f"signal<threshold pairs with signal one of {', '.join(EVICTION_SIGNALS)} "
                                     f"and a quantity or percentage such as 100Mi or 10% ({name}<{val} is not)")
    else:
        raise ValueError(f"configspec: unknown key_value_list kind {kind!r}")
    return [f"{name}{separator}{val}" for name, val in pairs]


def check_taint_list(value):
    if value == "":
        return []
    taints = []
    expected = ("taints key=value:Effect or key:Effect separated by commas, Effect one of "
                + ", ".join(TAINT_EFFECTS))
    for item in value.split(","):
        item = item.strip()
        head, colon, effect = item.rpartition(":")
        key, _, val = head.partition("=")
        if not colon or effect not in TAINT_EFFECTS or not _is_qualified_name(key) or not _is_label_value(val):
            raise Invalid(value, f"{expected} ({item!r} is not)")
        taints.append(item)
    return taints
