"""The package's imports, read from the source with ast: who imports what, and where (at
module level, or inside which function). Shared by tests/unit/test_import_graph.py and
tests/unit/test_function_imports.py."""

import ast
import collections
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "aks_flex_node"

Import = collections.namedtuple("Import", "module target function line")


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules():
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _functions_of(tree):
    """id(import node) -> the name of the outermost function it sits in."""
    where = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    where.setdefault(id(inner), node.name)
    return where


def imports_of(name, path, known):
    """Every import in module `name`, as Import rows. A target of ours is the module it
    names (`from a.b import c` is a.b.c when that is a module, else a.b); a third-party
    target is kept as written. `function` is None at module level."""
    tree = ast.parse(path.read_text(), str(path))
    in_function = _functions_of(tree)
    is_package = path.name == "__init__.py"
    rows = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[:len(here) - node.level + 1]
                base = ".".join(here + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            ours = target
            while ours not in known and "." in ours:
                ours = ours.rsplit(".", 1)[0]
            if ours in known:
                if ours == name:
                    continue
                target = ours
            rows.append(Import(name, target, in_function.get(id(node)), node.lineno))
    return rows


def all_imports():
    known = modules()
    return [row for name, path in sorted(known.items()) for row in imports_of(name, path, known)]


def graph(rows=None):
    """module -> the modules of ours it imports anywhere (module level or in a function)."""
    known = modules()
    edges = {name: set() for name in known}
    for row in rows if rows is not None else all_imports():
        if row.target in known:
            edges[row.module].add(row.target)
    return edges
