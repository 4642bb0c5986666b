"""Server-side printing of Nodes as a meta.k8s.io/v1 Table: what `kubectl get nodes [-o wide]` asks
for (Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...) and prints as it comes.

Columns and cells as pkg/printers/internalversion/printers.go (nodeColumnDefinitions, printNode,
findNodeRoles) and ages as k8s.io/apimachinery/pkg/util/duration HumanDuration. Rows carry
the object as PartialObjectMetadata (includeObject=Metadata, the default). Other resources
are answered as plain lists (no Table): this stand-in prints only what kubectl asks of it.
"""

import datetime

from tests.emulator.httpbase import Response
from tests.emulator import clock

_COLUMNS = [
    ("Name", "name", 0, "Name must be unique within a namespace."),
    ("Status", "", 0, "The status of the node"),
    ("Roles", "", 0, "The roles of the node"),
    ("Age", "", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
    ("Version", "", 0, "Kubelet Version reported by the node."),
    ("Internal-IP", "", 1, "List of addresses reachable to the node."),
    ("External-IP", "", 1, "List of addresses reachable to the node."),
    ("OS-Image", "", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    ("Kernel-Version", "", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    ("Container-Runtime", "", 1, "ContainerRuntime Version reported by the node through runtime remote API "
                                 "(e.g. containerd://1.4.2)."),
]


def wants_table(req):
    accept = req.header("Accept") or ""
    return any("as=Table" in part and "g=meta.k8s.io" in part and "v=v1" in part.replace("v=v1beta1", "")
               for part in accept.split(","))


def human_duration(seconds):
    """duration.HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        return f"{hours // 24 // 365}y{(hours // 24) % 365}d" if (hours // 24) % 365 else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _age(meta):
    created = meta.get("creationTimestamp")
    if not created:
        return "<unknown>"
    then = datetime.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return human_duration(clock.now() - then.timestamp())


def _roles(labels):
    roles = set()
    for key, value in (labels or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            roles.add(key[len("node-role.kubernetes.io/"):])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _cells(node):
    meta, spec, st = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    ready = [c for c in st.get("conditions") or [] if c.get("type") == "Ready"]
    states = ["Ready" if ready[0].get("status") == "True" else "NotReady"] if ready else ["Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    info = st.get("nodeInfo") or {}

    def address(kind):
        return next((a["address"] for a in st.get("addresses") or [] if a.get("type") == kind), "<none>")

    return [meta["name"], ",".join(states), _roles(meta.get("labels")), _age(meta), info.get("kubeletVersion", ""),
            address("InternalIP"), address("ExternalIP"), info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


def nodes(items, resource_version):
    return Response.json(200, {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [{"name": n, "type": "string", "format": f, "description": d, "priority": p}
                              for n, f, p, d in _COLUMNS],
        "rows": [{"cells": _cells(n), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                 "metadata": n["metadata"]}} for n in items]})
