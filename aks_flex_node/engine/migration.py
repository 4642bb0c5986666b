"""Migrations: what an earlier release left in a layout this one no longer reads (a ledger
recorded in less detail, files where they no longer go), brought to today's layout once,
at the start of a run, before any step's check.

ubuntu-pro-client keeps its version migrations in one script run once; here they are one
list, handed to the runner by whoever builds the run (steps/migrations.py for a join), so a
step's check only ever reads today's layout and writes nothing. The engine knows nothing
of what a migration moves.

A migration is a value: `name`, `pending(ctx)` (read-only: what it would change, or None
when there is nothing of its kind to migrate) and `apply(ctx)`. Idempotent by
construction: once applied, `pending` finds nothing, so a second run (or a run after a
crash half-way) migrates only what is left. A dry run writes nothing: a migration that
changes only the ledger (`ledger_only`) is applied to a copy of the ledger held in memory
(Ledger.detached), so the dry run's checks read the layout the run would; one that
changes the host is only reported as pending.
"""

import dataclasses
import logging
from typing import Optional

from aks_flex_node.errors import FlexNodeError

log = logging.getLogger(__name__)

# Outcomes.
MIGRATED = "migrated"
PENDING = "pending"  # dry run: it would migrate
FAILED = "failed"


class Migration:
    name = ""  # shown to operators and in status.json
    ledger_only = False  # it changes the ledger and nothing else

    def pending(self, ctx) -> Optional[str]:
        """What this migration would change on this node, or None: reads only."""
        raise NotImplementedError

    def apply(self, ctx):
        """Migrate what `pending` found (called only when it found something)."""
        raise NotImplementedError


@dataclasses.dataclass
class MigrationResult:
    name: str
    status: str
    what: str
    error: Optional[BaseException] = dataclasses.field(default=None, repr=False)

    def to_dict(self):
        out = {"name": self.name, "status": self.status, "what": self.what}
        if self.error is not None:
            out["error"] = getattr(self.error, "message", None) or f"{type(self.error).__name__}: {self.error}"
        return out


def failed(results):
    """The first MigrationResult of `results` that failed, or None."""
    return next((m for m in results if m.status == FAILED), None)


def run_migrations(migrations, ctx, *, dry_run=False):
    """Run each of `migrations` that has something pending, in order; stop at the first
    that fails (what follows may build on it). Returns [MigrationResult]."""
    results = []
    for migration in migrations:
        what = ""
        try:
            what = migration.pending(ctx)
            if what is None:
                continue
            if dry_run:
                if migration.ledger_only:
                    if not ctx.ledger.is_detached:
                        ctx.ledger = ctx.ledger.detached()
                    migration.apply(ctx)
                results.append(MigrationResult(migration.name, PENDING, what))
                continue
            log.info("migration %s: %s", migration.name, what)
            migration.apply(ctx)
            results.append(MigrationResult(migration.name, MIGRATED, what))
        except Exception as exc:
            if isinstance(exc, FlexNodeError):
                log.debug("migration %s failed", migration.name, exc_info=True)
            else:  # a bug: keep the trace in the log
                log.exception("migration %s failed unexpectedly", migration.name)
            results.append(MigrationResult(migration.name, FAILED, what or "", exc))
            break
    return results
