"""An import inside a function is there only to keep something heavy off a light path.

The package's import graph has no cycle (test_import_graph.py), so no import needs to hide
in a function for Python's sake. One that does must earn it: moving it to module level
would load, on one of the light paths below, a module that path must not load. That is
computed from the source, not listed by hand. The few that keep a cost off a path by
other means are in EXPLAINED, each with its reason; a new function-level import that is
neither fails, and so does a stale entry in EXPLAINED.
"""

import collections

from tests.package_imports import Import, all_imports

HEAVY_THIRD_PARTY = {"azure", "msal", "yaml", "cryptography", "configobj", "validate", "kubernetes", "debian"}
SDK = {"azure", "msal", "yaml", "cryptography", "kubernetes"}


def ours_beyond(*allowed, stdlib=()):
    """A path that may load only `allowed` of our modules, nothing heavy, and none of
    `stdlib`."""
    def forbids(module):
        if module.startswith("aks_flex_node"):
            return module not in allowed
        return module.split(".")[0] in HEAVY_THIRD_PARTY | set(stdlib)
    return forbids


def third_party(names, and_ours=()):
    """A path that may load none of the third-party packages `names`, nor our modules
    under the prefixes `and_ours`."""
    def forbids(module):
        if module.startswith("aks_flex_node"):
            return module.startswith(and_ours) if and_ours else False
        return module.split(".")[0] in names
    return forbids


VERSION_PATH = ours_beyond("aks_flex_node", "aks_flex_node.__main__", "aks_flex_node.cli", "aks_flex_node.commands",
                           "aks_flex_node.commands.handlers", "aks_flex_node.commands.arguments",
                           "aks_flex_node.errors", "aks_flex_node.output",
                           stdlib=("logging", "json", "pathlib", "ssl", "urllib"))
# A cached `token`: the standard library's json, os and time and these small modules of ours.
TOKEN_CACHED_PATH = ours_beyond("aks_flex_node", "aks_flex_node.cli", "aks_flex_node.cached_token",
                                "aks_flex_node.paths", "aks_flex_node.access_token", "aks_flex_node.host",
                                "aks_flex_node.host.careful_read",
                                stdlib=("argparse", "enum", "errno", "importlib", "pathlib", "logging", "ssl", "urllib",
                                        "http"))

# entry module -> (the path it serves, what that path must not load)
LIGHT_PATHS = {
    "aks_flex_node.__main__": ("`version` and `--help` (test_cli.py checks what they import)", VERSION_PATH),
    "aks_flex_node.commands.handlers": ("`version` and `--help` once cli.main handed them on", VERSION_PATH),
    "aks_flex_node.cli": ("`token` answered from its cache, once per kubelet call: cli.main routes it first "
                          "(make bench: token cached imports; test_cached_token.py)", TOKEN_CACHED_PATH),
    "aks_flex_node.cached_token": ("the cached answer itself: the careful read and the ExecCredential",
                                   TOKEN_CACHED_PATH),
    "aks_flex_node.token": ("`token` when the cache does not answer: no HIMDS client until it mints",
                            ours_beyond("aks_flex_node", "aks_flex_node.token", "aks_flex_node.errors",
                                        "aks_flex_node.paths", "aks_flex_node.cached_token",
                                        "aks_flex_node.access_token", "aks_flex_node.host",
                                        "aks_flex_node.host.careful_read", "aks_flex_node.output",
                                        stdlib=("ssl", "urllib", "http"))),
    "aks_flex_node.agent": ("the agent between passes (make bench: agent memory)",
                            third_party(HEAVY_THIRD_PARTY, ("aks_flex_node.steps", "aks_flex_node.engine",
                                                            "aks_flex_node.config", "aks_flex_node.azure"))),
    "aks_flex_node.steps.workflow": ("the phase names `bootstrap` parses its arguments with, and a run that "
                                     "needs no Azure (agent-pool tokens, unbootstrap of a Kubernetes-only node)",
                                     third_party(SDK)),
    "aks_flex_node.operations": ("a run that asks Azure nothing (the agent's local passes, a converged agent-pool "
                                 "node), and the agent's local pass, which skips preflight (make bench: agent CPU "
                                 "per hour)", third_party(SDK, ("aks_flex_node.steps.preflight.checks",))),
    "aks_flex_node.steps.preflight.checks": ("preflight (its command, a run's first phase): a check loads the SDK "
                                             "only when it runs, and Arc mode's checks never the agent pool's",
                                             third_party(SDK)),
    "aks_flex_node.pool_follow": ("the agent's local pass in agent-pool mode: it reads the Node, the Machine only "
                                  "on a full pass (make bench: agent CPU per hour)", third_party(SDK)),
    "aks_flex_node.lifecycle": ("`status` (it reads status.json and the pending mark: no run, no step)",
                                third_party(SDK, ("aks_flex_node.operations", "aks_flex_node.steps.workflow"))),
}

# (module, target) -> why it stays in a function although no light path above needs it.
EXPLAINED = {
    ("aks_flex_node.cli", "atexit"):
        "a cached `token` loads nothing beyond json, os and time (cached_token.py); atexit is the exit's alone",
    ("aks_flex_node.azure.clients", "azure.mgmt.hybridcompute"):
        "a run loads only the management clients it calls (an agent-pool join never calls Arc)",
    ("aks_flex_node.azure.clients", "azure.mgmt.authorization"):
        "a run loads only the management clients it calls (roles are assigned only in Arc mode)",
    ("aks_flex_node.azure.clients", "azure.mgmt.containerservice"):
        "a run loads only the management clients it calls (containerservice is the largest)",
    ("aks_flex_node.azure.clients", "aks_flex_node.azure.sdk_compat"):
        "the authorization client's API profile, needed with that client only",
    ("aks_flex_node.config.loader", "aks_flex_node.config.upstream"):
        "only the upstream agent's config.json is converted: every other load of the configuration skips the "
        "converter's imports (make bench: converged re-run)",
    ("aks_flex_node.steps.context", "aks_flex_node.host.download"):
        "a converged run downloads nothing, and does not load the downloader (make bench: converged re-run)",
    ("aks_flex_node.azure.aks", "yaml"):
        "the cluster's kubeconfig is parsed only when credentials are listed: a converged run never pays for it",
    ("aks_flex_node.maintainer.debconf_channel", "debconf"):
        "debconf's own Python module (package debconf) exists only on a Debian host, under a maintainer script",
}


def module_level_closure(top, start, hoisted=None):
    """What importing `start` loads, with `hoisted` (module, target) moved to module level."""
    seen, stack = set(), [start]
    while stack:
        module = stack.pop()
        if module in seen:
            continue
        seen.add(module)
        stack.extend(top.get(module, ()))
        if hoisted and module == hoisted[0]:
            stack.append(hoisted[1])
        parts = module.split(".")
        stack.extend(".".join(parts[:i]) for i in range(1, len(parts)))
    return seen


def why_in_a_function(rows):
    """(module, function, target) -> the light paths the import keeps something off."""
    top = collections.defaultdict(set)
    for row in rows:
        if row.function is None:
            top[row.module].add(row.target)
    before = {entry: module_level_closure(top, entry) for entry in LIGHT_PATHS}
    out = {}
    for row in rows:
        if row.function is None:
            continue
        reasons = []
        for entry, (path, forbids) in LIGHT_PATHS.items():
            if row.module not in before[entry]:
                continue  # this path never loads the module the import sits in
            added = module_level_closure(top, entry, (row.module, row.target)) - before[entry]
            heavy = sorted(m for m in added if forbids(m))
            if heavy:
                reasons.append(f"{path}: {', '.join(heavy[:3])}")
        out[(row.module, row.function, row.target)] = reasons
    return out


def test_every_function_level_import_keeps_something_off_a_light_path():
    reasons = why_in_a_function(all_imports())
    unearned = sorted(f"{module}.{function}() imports {target}"
                      for (module, function, target), why in reasons.items()
                      if not why and (module, target) not in EXPLAINED)
    assert unearned == [], "move these to module level (or say why in EXPLAINED):\n" + "\n".join(unearned)


def test_explained_imports_are_still_there_and_still_unearned():
    reasons = why_in_a_function(all_imports())
    present = {(module, target): why for (module, _, target), why in reasons.items()}
    assert sorted(k for k in EXPLAINED if k not in present) == []
    assert sorted(k for k in EXPLAINED if present[k]) == []


def test_the_check_sees_a_needless_function_level_import():
    """A made-up graph: what earns a function-level import and what does not."""
    rows = [Import("aks_flex_node.token", "aks_flex_node.errors", None, 1),
            Import("aks_flex_node.steps.x", "aks_flex_node.errors", "f", 1),  # no light path loads steps.x
            Import("aks_flex_node.token", "aks_flex_node.paths", "load", 2),  # paths is allowed on token's path
            Import("aks_flex_node.token", "aks_flex_node.host.fs", "store", 3),  # host.fs is not
            Import("aks_flex_node.errors", "configobj", "parse", 4),  # token loads errors: configobj earns it
            Import("aks_flex_node.lifecycle", "aks_flex_node.host", "f", 5)]  # status may load host
    reasons = why_in_a_function(rows)
    assert reasons[("aks_flex_node.steps.x", "f", "aks_flex_node.errors")] == []
    assert reasons[("aks_flex_node.token", "load", "aks_flex_node.paths")] == []
    assert reasons[("aks_flex_node.token", "store", "aks_flex_node.host.fs")] != []
    assert reasons[("aks_flex_node.errors", "parse", "configobj")] != []
    assert reasons[("aks_flex_node.lifecycle", "f", "aks_flex_node.host")] == []
