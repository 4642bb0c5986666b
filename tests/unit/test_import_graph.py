"""The package's import graph, read from the source (every import, at module level or in a
function): no cycle, and the engine a generic runner that knows nothing of what it runs."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "aks_flex_node"
# What engine/ may import of ours besides itself: the leaves every layer uses.
ENGINE_MAY_IMPORT = {"aks_flex_node", "aks_flex_node.errors", "aks_flex_node.paths"}


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules():
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name, path, known):
    """The modules of ours `name` imports, anywhere in it (`from a.b import c` counts a.b.c
    when that is a module, else a.b)."""
    out = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name and target.startswith("aks_flex_node"):
                out.add(target)
    return out


def graph():
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    """A function-level import hides a cycle from Python, not from the reader: none at all."""
    assert cycles(graph()) == []


def test_the_cycle_check_is_not_blind():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_engine_knows_nothing_of_what_it_runs():
    """engine/ (step, runner, undo, ledger, lock, status) imports no configuration, Azure,
    Kubernetes client or step: what a join needs lives with the steps (steps/context.py,
    steps/join_data.py)."""
    edges = graph()
    engine = {name: targets for name, targets in edges.items() if name.startswith("aks_flex_node.engine")}
    outside = {name: sorted(t for t in targets if not t.startswith("aks_flex_node.engine") and t not in ENGINE_MAY_IMPORT)
               for name, targets in engine.items()}
    assert {name: found for name, found in outside.items() if found} == {}
    assert "aks_flex_node.engine.context" in edges  # the check saw the engine
