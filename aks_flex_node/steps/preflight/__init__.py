"""The preflight phase of a bootstrap: the checks (checks.py) run before anything changes.

The checks live with the steps because they check what the steps will need (the
architectures artifacts.py installs for, the modules system.py loads, the API server
kubelet_auth.py finds); `aks-flex-node preflight` runs the same checks on their own.
"""

from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.engine.step import INSTALL, Plan, Step
from aks_flex_node.steps import cloud_reads


class PreflightStep(Step):
    name = "preflight"
    help = "check the machine and the network before changing anything"
    branch = INSTALL
    gathers_facts = False

    def prefetch(self, ctx):
        if ctx.mode is JoinMode.ARC:  # the arc-identity check's machine, shared with the arc phase
            cloud_reads.start_machine(ctx)

    def check(self, ctx):
        # The checks (and the probes, platform and tar readers they bring) only when they run:
        # the agent's local pass, a forked child every minute, skips this phase
        # (operations.py) and must not import them to skip it (make bench: agent CPU per hour).
        from aks_flex_node.steps.preflight import checks

        results = checks.run_checks(ctx, ctx.options.ignore_preflight_errors)
        ctx.data.preflight = results
        checks.raise_for(results)
        warnings = [r for r in results if r.status in ("warning", "ignored")]
        summary = f"{len(results) - len(warnings)} check(s) passed"
        if warnings:
            summary += "; " + "; ".join(f"{r.name}: {r.message}" for r in warnings)
        return Plan(noop_reason=summary)
