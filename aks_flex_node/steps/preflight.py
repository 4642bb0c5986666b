"""The preflight phase of a bootstrap."""

from aks_flex_node import preflight
from aks_flex_node.engine.step import INSTALL, Plan, Step


class PreflightStep(Step):
    name = "preflight"
    help = "check the machine and the network before changing anything"
    branch = INSTALL
    gathers_facts = False

    def check(self, ctx):
        results = preflight.run_checks(ctx, ctx.options.ignore_preflight_errors)
        ctx.data.preflight = results
        preflight.raise_for(results)
        warnings = [r for r in results if r.status in ("warning", "ignored")]
        summary = f"{len(results) - len(warnings)} check(s) passed"
        if warnings:
            summary += "; " + "; ".join(f"{r.name}: {r.message}" for r in warnings)
        return Plan(noop_reason=summary)
