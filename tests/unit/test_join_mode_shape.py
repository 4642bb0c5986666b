"""The join mode: one definition (config/joinmode.py), resolved once per run, and mode-specific
work in its own step class or mechanism, never a comparison of the mode's spelling."""

import ast
import json
import pathlib

import pytest

from aks_flex_node.config import joinmode
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.steps import kubelet_auth, workflow
from aks_flex_node.steps.context import JoinContext
from aks_flex_node.steps.join_data import JoinData
from aks_flex_node.steps.agentpool import ORIGIN_POOL
from tests.config_fixtures import load, make_root, secret_file, with_values

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----\n"
PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "aks_flex_node"


def test_a_mode_is_the_word_the_operator_wrote_everywhere_it_is_shown():
    mode = JoinMode("agent-pool")
    assert mode is JoinMode.AGENT_POOL
    # f-strings, str(), format() and JSON show the configuration's word on every Python
    # we run on (format() of a str mix-in enum changed in 3.12).
    assert (f"{mode}", str(mode), format(mode, ">12"), json.dumps(mode)) == (
        "agent-pool", "agent-pool", "  agent-pool", '"agent-pool"')
    assert joinmode.NAMES == ("arc", "agent-pool", "bootstrap-token")
    assert joinmode.spelled(joinmode.TLS_BOOTSTRAP) == "agent-pool or bootstrap-token"
    with pytest.raises(ValueError):
        JoinMode("Arc")


def test_what_each_mode_implies():
    assert [m.tls_bootstrap for m in JoinMode] == [False, True, True]
    assert [m.asks_azure for m in JoinMode] == [True, True, False]
    assert kubelet_auth.for_mode(JoinMode.ARC) is kubelet_auth.EXEC_PLUGIN
    assert {kubelet_auth.for_mode(m) for m in joinmode.TLS_BOOTSTRAP} == {kubelet_auth.TLS_BOOTSTRAP}


def test_the_configspec_offers_exactly_the_modes_defined():
    """configspec.ini is the operator's list (validate's option()); it must name the same
    modes in the same order, and its default is Arc mode."""
    text = (PACKAGE / "configspec.ini").read_text()
    [line] = [ln for ln in text.splitlines() if ln.startswith("join_mode = ")]
    assert line == 'join_mode = option(' + ", ".join(f'"{n}"' for n in joinmode.NAMES) + ', default="arc")'


@pytest.mark.parametrize("mode", list(JoinMode))
def test_every_phase_has_one_step_for_each_mode_under_one_name(mode):
    steps = workflow.bootstrap_steps(mode)
    assert tuple(s.name for s in steps) == workflow.PHASE_NAMES
    undo = workflow.unbootstrap_steps(mode)
    assert tuple(s.name for s in undo[:-1]) == tuple(reversed(workflow.PHASE_NAMES))
    for phase in workflow.PHASES:
        if isinstance(phase, tuple):
            # Variants of a phase share its place in the graph; exactly one is the mode's.
            assert len({(c.name, c.needs, c.branch) for c in phase}) == 1, phase
            assert sum(mode in c.modes for c in phase) == 1, (phase, mode)


def _ctx(tmp_path, mode, **values):
    root = make_root(tmp_path)
    cfg = load(root, with_values(**_mode_values(root, mode), **values))
    return JoinContext(cfg, host=None, ledger=None, data=JoinData())


@pytest.mark.parametrize("mode", list(JoinMode))
def test_steps_of_another_mode_say_why_they_do_not_apply(tmp_path, mode):
    ctx = _ctx(tmp_path, mode)
    assert ctx.mode is mode
    reasons = {s.name: s.run_if(ctx) for s in workflow.bootstrap_steps(mode)}
    arc_only = {"arc", "roles", "rbac-propagation"}
    for name in arc_only:
        assert (reasons[name] is None) == (mode is JoinMode.ARC), reasons
        if mode is not JoinMode.ARC:
            assert reasons[name] == f"not used in {mode} mode (the kubelet joins by TLS bootstrap)"
    assert (reasons["machine"] is None) == (mode is JoinMode.AGENT_POOL)
    assert all(reasons[n] is None for n in reasons if n not in arc_only | {"machine"}), reasons


def _mode_values(root, mode):
    if mode is JoinMode.ARC:
        return {}
    if mode is JoinMode.AGENT_POOL:
        return {"join_mode": "agent-pool", "agent_pool": "flexpool", "auth_method": "managed-identity",
                "machine_name": "node-1"}
    ca = secret_file(root, CA_PEM, mode=0o644, name="ca.pem")
    return {"join_mode": "bootstrap-token", "auth_method": "", "api_server": "https://10.0.0.1:443",
            "bootstrap_token_file": secret_file(root, "abcdef.0123456789abcdef\n", name="token"),
            "cluster_ca_file": ca}


def test_the_configuration_is_never_replaced_what_the_pool_gives_is_join_data(tmp_path):
    ctx = _ctx(tmp_path, JoinMode.AGENT_POOL, max_pods=42)
    operator = ctx.operator_config
    assert ctx.config is operator  # before the cluster phase: the operator's
    with pytest.raises(AttributeError):
        ctx.config = operator  # nobody swaps it

    ctx.data.config_overlay = ({"cluster_dns": "10.1.0.10", "node_labels": ["pool=flex"]}, ORIGIN_POOL)
    effective = ctx.config
    assert (effective.cluster_dns, effective.node_labels, effective.max_pods) == ("10.1.0.10", ["pool=flex"], 42)
    assert effective.origins["cluster_dns"] == ORIGIN_POOL
    assert ctx.config is effective  # derived once per overlay
    # The operator's configuration itself is untouched.
    assert operator.cluster_dns != "10.1.0.10" and ctx.operator_config is operator
    assert ctx.mode is JoinMode.AGENT_POOL


def _compared_spellings(tree):
    """(line, text) of every comparison with a mode's spelling or with `join_mode`."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if any(_spells_a_mode(operand) for operand in [node.left, *node.comparators]):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _spells_a_mode(operand):
    if isinstance(operand, ast.Constant):
        return operand.value in joinmode.NAMES
    if isinstance(operand, (ast.Tuple, ast.List, ast.Set)):
        return any(_spells_a_mode(e) for e in operand.elts)
    if isinstance(operand, ast.Attribute):
        return operand.attr == "join_mode"
    if isinstance(operand, ast.Subscript):
        return isinstance(operand.slice, ast.Constant) and operand.slice.value == "join_mode"
    return False


def test_no_module_compares_a_mode_by_its_spelling():
    """A mode is asked what it implies (JoinMode, a step's `modes`, kubelet_auth), never
    compared as a word: the package holds no `== "arc"`, no `join_mode != ...`."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "joinmode.py":
            continue
        found = _compared_spellings(ast.parse(path.read_text(), str(path)))
        if found:
            offenders[str(path.relative_to(PACKAGE))] = found
    assert offenders == {}


def test_the_guard_sees_a_comparison_by_spelling():
    """The check above is not blind."""
    tree = ast.parse('if cfg.join_mode == "arc": pass\nif m in ("agent-pool", "x"): pass\n'
                     'if values["join_mode"] != mode: pass\n')
    assert [line for line, _ in _compared_spellings(tree)] == [1, 2, 3]
