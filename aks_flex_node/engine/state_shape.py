"""The JSON shape of the run's state files (the ledger: engine/ledger.py; status.json:
engine/status.py), checked when they are read: a file of another shape (a hand edit, a
newer release, a disk fault) is an error naming the field, never a traceback later on.
"""

import json


class ListOf:
    """A JSON list whose every item has the shape `item`."""

    expected = "a list"

    def __init__(self, item):
        self.item = item


class Obj:
    """A JSON object (or null when `nullable`): `required` and `optional` map keys to
    shapes; keys of neither are left alone (a later version may add some)."""

    def __init__(self, required=None, optional=None, nullable=False):
        self.required = required or {}
        self.optional = optional or {}
        self.nullable = nullable
        self.expected = "an object or null" if nullable else "an object"


TEXT = (str,)
INTEGER = (int,)
NUMBER = (int, float)
FLAG = (bool,)
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               type(None): "null"}


def shape_problem(value, shape, where=""):
    """How `value` (parsed JSON) differs from `shape`, naming the field ("phases[0].name is
    5, expected a string"), or None when it has that shape. A shape is a tuple of Python
    types, an Obj or a ListOf."""
    if isinstance(shape, tuple):
        # JSON true is a Python bool, and bool an int: never take it for a number.
        if isinstance(value, shape) and (bool in shape or not isinstance(value, bool)):
            return None
        if float in shape:
            expected = "a number"
        else:
            expected = " or ".join(_TYPE_NAMES[t] for t in shape)
        return _differs(where, value, expected)
    if isinstance(shape, ListOf):
        if not isinstance(value, list):
            return _differs(where, value, shape.expected)
        for index, item in enumerate(value):
            problem = shape_problem(item, shape.item, f"{where}[{index}]")
            if problem:
                return problem
        return None
    if value is None and shape.nullable:
        return None
    if not isinstance(value, dict):
        return _differs(where, value, shape.expected)
    for key, field in list(shape.required.items()) + list(shape.optional.items()):
        at = f"{where}.{key}" if where else key
        if key not in value:
            if key in shape.required:
                return f"{at} is missing"
            continue
        problem = shape_problem(value[key], field, at)
        if problem:
            return problem
    return None


def _differs(where, value, expected):
    shown = json.dumps(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{where or 'the whole file'} is {shown}, expected {expected}"
