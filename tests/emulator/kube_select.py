"""Label and field selectors, as the kube-apiserver parses them for LIST.

Label selectors: the string syntax of k8s.io/apimachinery/pkg/labels/selector.go (`a=b`, `a==b`,
`a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`) and the LabelSelector object of a
PodDisruptionBudget (matchLabels, matchExpressions: In, NotIn, Exists, DoesNotExist;
metav1.LabelSelectorAsSelector). Field selectors: `field=value`, `field==value`,
`field!=value`, comma-separated, over the fields each resource supports (an unsupported field
is 400 "field label not supported", as pkg/registry/core/pod/strategy.go ToSelectableFields
and the generic registry answer).
"""

import re

from tests.emulator.kubeauth import status

_SET = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s=!(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


def _clauses(text):
    """Split on commas outside parentheses."""
    out, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        out.append(current)
    return out


def parse_labels(text):
    """A label selector string as a list of (key, operator, values); 400 when malformed."""
    requirements = []
    for clause in _clauses(text or ""):
        m = _SET.match(clause)
        if m:
            values = [v.strip() for v in m.group(3).split(",") if v.strip()]
            requirements.append((m.group(1), m.group(2), values))
            continue
        m = _EQ.match(clause)
        if m:
            requirements.append((m.group(1), "!=" if m.group(2) == "!=" else "=", [m.group(3)]))
            continue
        m = _EXISTS.match(clause)
        if m:
            requirements.append((m.group(2), "!" if m.group(1) else "exists", []))
            continue
        raise status(400, "BadRequest", f"unable to parse requirement: {clause.strip()!r}")
    return requirements


def matches(requirements, labels):
    labels = labels or {}
    for key, op, values in requirements:
        present, value = key in labels, labels.get(key)
        if op == "=" and value != values[0]:
            return False
        if op == "!=" and present and value == values[0]:
            return False
        if op == "in" and (not present or value not in values):
            return False
        if op == "notin" and present and value in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!" and present:
            return False
    return True


def selector_object(selector):
    """A metav1.LabelSelector as requirements; None (a null selector) selects nothing."""
    if selector is None:
        return None
    requirements = [(k, "=", [v]) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        requirements.append((expr.get("key"), ops.get(expr.get("operator"), "in"), list(expr.get("values") or [])))
    return requirements


def parse_fields(text, supported):
    """A field selector as (field, operator, value) triples; 400 for a field not in `supported`."""
    out = []
    for clause in filter(None, (text or "").split(",")):
        m = re.match(r"^([^=!]+)(==|=|!=)(.*)$", clause)
        if not m:
            raise status(400, "BadRequest", f"invalid field selector: {clause!r}")
        field, op, value = m.group(1).strip(), m.group(2), m.group(3)
        if field not in supported:
            raise status(400, "BadRequest", f"field label not supported: {field}")
        out.append((field, "!=" if op == "!=" else "=", value))
    return out


def field_value(obj, field):
    """The value of a dotted field path ("spec.nodeName") as a string ("" when absent)."""
    node = obj
    for part in field.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


def fields_match(requirements, obj):
    for field, op, value in requirements:
        actual = field_value(obj, field)
        if (op == "=") != (actual == value):
            return False
    return True
