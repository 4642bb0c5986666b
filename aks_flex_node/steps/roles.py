"""Role assignments that let the node's Arc identity act as a node of the cluster."""

import collections

from aks_flex_node.azure import roles
from aks_flex_node.engine.step import IDENTITY, Plan, Step
from aks_flex_node.steps import cloud_reads
from aks_flex_node.steps.arc import ArcModeOnly
from aks_flex_node.steps.kinds import Kind

Wanted = collections.namedtuple("Wanted", "role_name role_guid scope")


def wanted_roles(cfg):
    """The preset's roles with their scopes resolved (every preset role is at the cluster)."""
    return [Wanted(r.name, r.guid, cfg.cluster.resource_id) for r in roles.preset(cfg.role_preset)]


class RolesStep(ArcModeOnly, Step):
    name = "roles"
    help = "assign the role preset's roles to the Arc identity (idempotent names)"
    branch = IDENTITY
    needs = ("arc",)
    cloud = True
    full_pass_only = True

    def prefetch(self, ctx):
        cloud_reads.start_assignments(ctx, [r.scope for r in wanted_roles(ctx.config)])

    def check(self, ctx):
        cfg, plan = ctx.config, Plan()
        wanted = wanted_roles(cfg)
        principal = ctx.data.principal_id
        if not principal:
            plan.add(f"assign {len(wanted)} role(s) ({cfg.role_preset} preset) to the Arc identity",
                     "the machine has no identity yet", lambda: self._assign(ctx, wanted))
            return plan
        have = set()
        for scope in {r.scope for r in wanted}:
            # Read with the machine by the run's shared read (steps/cloud_reads.py) when it
            # was for this principal; else read now.
            for assignment in cloud_reads.assignments(ctx, principal, scope):
                have.add((assignment.scope.lower(), assignment.role_guid.lower()))
                self._adopt(ctx, assignment, principal)
        missing = [r for r in wanted if (r.scope.lower(), r.role_guid.lower()) not in have]
        if not missing:
            plan.noop_reason = f"{len(wanted)} role assignment(s) in place"
            return plan
        plan.add(f"assign {', '.join(r.role_name for r in missing)} to {principal}",
                 "not assigned yet", lambda: self._assign(ctx, missing))
        return plan

    def _adopt(self, ctx, assignment, principal):
        """An assignment with our deterministic name is ours even if the ledger lost it."""
        from aks_flex_node.azure import rbac

        if assignment.name == rbac.assignment_name(assignment.scope, assignment.role_guid, principal):
            ctx.adopt(self.name, Kind.ROLE_ASSIGNMENT, assignment.id)

    def _assign(self, ctx, wanted):
        from aks_flex_node.azure import rbac

        principal = ctx.data.principal_id
        for role in wanted:
            assignment = rbac.ensure_assignment(ctx.azure.clients, role.scope, role.role_guid,
                                                principal)
            if assignment.created or assignment.name == rbac.assignment_name(
                    role.scope, role.role_guid, principal):
                ctx.ledger.record(self.name, Kind.ROLE_ASSIGNMENT, assignment.id)

    def plan_undo(self, ctx, entries):
        plan = Plan()
        for entry in entries:
            if entry["kind"] == Kind.ROLE_ASSIGNMENT:
                plan.add(f"delete role assignment {entry['id']}", f"made by the {self.name} phase",
                         lambda e=entry: self._delete(ctx, e["id"]))
        return plan

    @staticmethod
    def _delete(ctx, assignment_id):
        from aks_flex_node.azure import rbac

        rbac.delete_assignment(ctx.azure.clients, assignment_id)
        ctx.ledger.forget(Kind.ROLE_ASSIGNMENT, assignment_id)
