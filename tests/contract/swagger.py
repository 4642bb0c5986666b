"""A small validator of JSON values against Swagger 2.0 (OpenAPI v2) schemas from the Azure specs.

jsonschema is in Debian's stack but not in the PyPI one, and Swagger 2.0 is not quite JSON
Schema anyway (x-nullable, x-ms-enum, readOnly...), so this handles what the Azure specs use:
$ref across files (JSON pointers; definition names matched case-insensitively as a last
resort, because the HybridCompute 2026-07-15 spec refers to v6 `locationData` while the file
defines `LocationData`, per MANIFEST.json), allOf, object/array/scalar types, required,
enums (only when x-ms-enum does not say modelAsString), formats date-time, uuid and byte,
additionalProperties, and x-nullable. `strict` also reports properties the schema does not
declare: an emulator must not invent fields (or misspell them).
"""

import base64
import json
import os
import re

# A copy of files from the public Azure/azure-rest-api-specs repository (MIT), with that
# repository's paths, at the commits its MANIFEST.json lists; AZURE_REST_SPECS points at it.
SPECS = os.environ.get("AZURE_REST_SPECS", "/work/shared/azure-rest-specs")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
_cache = {}


def spec_path(relative):
    return os.path.join(SPECS, "specification", relative)


def load(path):
    path = os.path.abspath(path)
    if path not in _cache:
        with open(path) as f:
            _cache[path] = json.load(f)
    return _cache[path]


class Ref:
    """A schema together with the file it came from (to resolve relative $refs)."""

    def __init__(self, schema, path):
        self.schema, self.path = schema, path


def resolve(ref, base):
    file_part, _, pointer = ref.partition("#")
    path = os.path.normpath(os.path.join(os.path.dirname(base), file_part)) if file_part else base
    node = load(path)
    for token in filter(None, pointer.split("/")):
        token = token.replace("~1", "/").replace("~0", "~")
        if token not in node and isinstance(node, dict):
            matches = [k for k in node if k.lower() == token.lower()]
            if len(matches) == 1:
                token = matches[0]
        node = node[token]
    return Ref(node, path)


def _deref(ref):
    while "$ref" in ref.schema:
        ref = resolve(ref.schema["$ref"], ref.path)
    return ref


def declared(ref):
    """All property schemas of an object schema, through allOf: {name: Ref}."""
    ref = _deref(ref)
    props = {}
    for part in ref.schema.get("allOf", []):
        props.update(declared(Ref(part, ref.path)))
    for name, schema in ref.schema.get("properties", {}).items():
        props[name] = Ref(schema, ref.path)
    return props


def _required(ref):
    ref = _deref(ref)
    out = set(ref.schema.get("required", []))
    for part in ref.schema.get("allOf", []):
        out |= _required(Ref(part, ref.path))
    return out


def _additional(ref):
    ref = _deref(ref)
    extra = ref.schema.get("additionalProperties")
    for part in ref.schema.get("allOf", []):
        extra = extra or _additional(Ref(part, ref.path))
    return extra


def _type_of(ref):
    ref = _deref(ref)
    if "type" in ref.schema:
        return ref.schema["type"]
    if ref.schema.get("properties") or ref.schema.get("allOf"):
        return "object"
    return None


def validate(ref, value, where="$", strict=True):
    """Problems found in `value` against schema `ref`, as a list of 'path: message' strings."""
    ref = _deref(ref)
    schema = ref.schema
    errors = []
    if value is None:
        if not schema.get("x-nullable"):
            errors.append(f"{where}: null is not allowed (no x-nullable)")
        return errors
    kind = _type_of(ref)
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        props = declared(ref)
        for name in sorted(_required(ref)):
            if name not in value:
                errors.append(f"{where}: required property {name!r} is missing")
        extra = _additional(ref)
        for name, item in value.items():
            if name in props:
                errors += validate(props[name], item, f"{where}.{name}", strict)
            elif isinstance(extra, dict):
                errors += validate(Ref(extra, ref.path), item, f"{where}.{name}", strict)
            elif strict and not extra:
                errors.append(f"{where}: property {name!r} is not declared in the spec")
    elif kind == "array":
        if not isinstance(value, list):
            return [f"{where}: expected an array, got {type(value).__name__}"]
        for i, item in enumerate(value):
            errors += validate(Ref(schema.get("items", {}), ref.path), item, f"{where}[{i}]", strict)
    elif kind == "string":
        if not isinstance(value, str):
            return [f"{where}: expected a string, got {value!r}"]
        enum = schema.get("enum")
        extensible = (schema.get("x-ms-enum") or {}).get("modelAsString", False)
        if enum and not extensible and value not in enum:
            errors.append(f"{where}: {value!r} is not one of {enum}")
        fmt = schema.get("format")
        if fmt == "date-time":
            if not _RFC3339.match(value):
                errors.append(f"{where}: {value!r} is not an RFC 3339 date-time")
        elif fmt == "uuid" and not _UUID.match(value):
            errors.append(f"{where}: {value!r} is not a UUID")
        elif fmt == "byte":
            try:
                base64.b64decode(value, validate=True)
            except ValueError:
                errors.append(f"{where}: {value[:20]!r}... is not base64")
    elif kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{where}: expected an integer, got {value!r}")
    elif kind == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            errors.append(f"{where}: expected a number, got {value!r}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            errors.append(f"{where}: expected a boolean, got {value!r}")
    return errors


class Operation:
    """One operation of a spec file, found by operationId."""

    def __init__(self, spec_file, operation_id):
        self.path = spec_path(spec_file)
        spec = load(self.path)
        for url, ops in spec["paths"].items():
            for method, op in ops.items():
                if isinstance(op, dict) and op.get("operationId") == operation_id:
                    self.url, self.method, self.op = url, method.upper(), op
                    return
        raise LookupError(f"{operation_id} not in {spec_file}")

    @property
    def statuses(self):
        return sorted(k for k in self.op["responses"] if k != "default")

    def schema(self, status):
        response = self.op["responses"].get(str(status)) or self.op["responses"]["default"]
        return Ref(response["schema"], self.path) if "schema" in response else None

    def check(self, status, body, strict=True):
        """Problems with an answer: an undeclared success status, or a body off the schema."""
        problems = []
        if status < 400 and str(status) not in self.op["responses"]:
            problems.append(f"status {status} is not among the spec's responses {self.statuses}")
        schema = self.schema(status)
        if schema is not None:
            problems += validate(schema, body, strict=strict)
        elif body not in (None, b"", ""):
            problems.append(f"status {status} has no body in the spec, got {body!r}")
        return problems


def example(relative):
    return load(spec_path(relative))
