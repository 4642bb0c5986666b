"""The package's import graph, read from the source (every import, at module level or in a
function): no cycle, and the engine a generic runner that knows nothing of what it runs."""

from tests.package_imports import graph

# What engine/ may import of ours besides itself: the leaves every layer uses.
ENGINE_MAY_IMPORT = {"aks_flex_node", "aks_flex_node.errors", "aks_flex_node.paths"}


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


def part_of(module):
    """The package part a module belongs to: aks_flex_node.steps.node -> aks_flex_node.steps;
    a loose module (aks_flex_node.cli) is its own part."""
    return ".".join(module.split(".")[:2])


def test_no_import_back_up_between_the_packages_parts():
    """The parts are layers (docs/design.md): the commands over operations over steps over
    the engine, azure/, kube/, config/ and host/. A part that imports another which imports
    it back is one layer in two folders; none may."""
    edges = {}
    for name, targets in graph().items():
        for target in targets:
            if part_of(name) != part_of(target):
                edges.setdefault(part_of(name), set()).add(part_of(target))
    assert cycles(edges) == []
    assert "aks_flex_node.steps" in edges and "aks_flex_node.engine" in edges["aks_flex_node.steps"]
