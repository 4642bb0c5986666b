"""Run cells in parallel, judge them against the clean run, and write the matrix.

Shared by `python3 -m tests.faults` (every cell, docs/reliability.md) and
tests/integration/test_faults.py (the cells marked fast).
"""

import concurrent.futures
import datetime
import os
import re
import subprocess
import time
import traceback

from tests import harness
from tests.faults import cells as cells_mod
from tests.faults.node import (NOT_THE_NODES, TEMP_FILE, VOLATILE, VOLATILE_DIRS, new_cell_node)

DOC = os.path.join(harness.REPO, "docs", "reliability.md")
# The operator's inputs (the harness writes them; a cell may rewrite the config), not ours.
INPUTS = ("/etc/aks-flex-node/",)


def run_one(cell, parent=None, keep=False):
    result = cells_mod.CellResult(cell.group, cell.name, cell.fault)
    started = time.monotonic()
    node = None
    try:
        result.mode = cell.mode
        node = new_cell_node(f"{cell.group}-{cell.name}", parent, cell.mode)
        cell.run(node, result)
    except Exception as exc:  # a cell that breaks is a cell that did not converge, with why
        result.converged = False
        result.notes.append(f"cell error: {type(exc).__name__}: {exc}")
        result.notes.append(cells_mod.short(traceback.format_exc().splitlines()[-3:], 300))
    finally:
        if node is not None:
            node.close(keep=keep or not result.ok)
            if not result.ok:
                result.notes.append(f"kept {node.base}")
    result.wall = time.monotonic() - started
    return result


def run_cells(cells, workers=10, parent=None, progress=None):
    """Every cell's result, in the order given; longest cells start first."""
    order = sorted(cells, key=lambda c: -c.seconds_hint)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_one, cell, parent): cell for cell in order}
        for fut in concurrent.futures.as_completed(futures):
            result = fut.result()
            results[(result.group, result.name)] = result
            if progress:
                progress(result)
    ordered = [results[(c.group, c.name)] for c in cells]
    references = {r.mode: r for r in ordered if r.name == cells_mod.REFERENCE}
    for result in ordered:
        if result.mode in references:
            evaluate(result, references[result.mode])
    return ordered


def _compared(path):
    return not (path in VOLATILE or path.startswith(VOLATILE_DIRS + INPUTS + NOT_THE_NODES))


def evaluate(result, reference):
    """Corrupted: after convergence a file differs from the clean run's (content or mode) or
    is missing; while failing, a file is neither as before nor as the clean run made it
    (a temp file of a write in progress is not a corrupted file, it is listed as stray)."""
    ref = reference.final
    if not ref or not result.final:
        return
    for path, entry in sorted(ref.items()):
        if not _compared(path):
            continue
        got = result.final.get(path)
        if got is None:
            result.corrupted.append(f"{path} (missing after convergence)")
        elif got != entry:
            result.corrupted.append(f"{path} (differs from the clean run)")
    stray = set()
    for path in result.final:
        if _compared(path) and path not in ref and path not in result.pre:
            stray.add(path)
    for snap in result.failing:
        for path, entry in sorted(snap.items()):
            if not _compared(path) or entry[0] != "file":
                continue
            if TEMP_FILE.match(os.path.basename(path)):
                stray.add(path + " (while failing)")
                continue
            before, after = result.pre.get(path), ref.get(path)
            if entry[1] in result.served:
                continue
            if entry[:2] not in (before[:2] if before else None, after[:2] if after else None):
                result.corrupted.append(f"{path} (half-written while failing: {entry[3]} bytes)")
    if stray:
        result.notes.append(f"stray {len(stray)}: {', '.join(sorted(stray)[:3])}")
    result.corrupted = sorted(set(result.corrupted))


# -- the report -----------------------------------------------------------------------------

COLUMNS = ("cell", "fault", "converged", "time to converge (s)", "retries", "exit while failing",
           "files corrupted", "notes")

EXPLAIN = """\
- **cell**: the group (kill -9, ENOSPC, endpoint, artifact, concurrency, agent-pool,
  upgrade, pool follow) and what is broken. The agent-pool cells join in agent-pool mode (docs/design.md, "Join
  modes") with an operator's credential that may delete the pool's Machine, and are judged
  against their own clean run; their bootstrap token and the kubelet's certificates are new
  each run, so those files are checked whole, not compared.
  The upgrade cells join, then the config names the next patch release
  (`kubernetes_version`), with a ReplicaSet's pod on the node; they are judged against
  an upgrade that succeeds: after convergence the Node reports the new kubelet, is
  schedulable, the pod was evicted, and the ledger holds no upgrade and owes nothing
  (docs/upgrade.md).
  The pool follow cells join an agent pool, then the pool's upgrade (the emulator playing the
  RP: tests/emulator/pool_operations.py) writes the Machine's next minor and deletes the Node;
  `agent --once` passes apply it, one killed -9 half-way; they are judged against the same
  upgrade followed cleanly: the Node back at the new version, the Machine goal recorded as
  applied, no upgrade record, nothing owed (docs/upgrade.md, "Agent-pool nodes follow their
  pool").
  Every cell has its own emulator (tests/emulator) and its own scratch root with the
  stand-in host commands (tests/fakes/bin); the bootstrap is the real CLI in a subprocess.
- **fault**: how it is broken. kill -9 cells kill the bootstrap's process group at a phase's
  start (when the phase printer announces it on a pty) or in its middle: held in a stand-in
  command (`hang-<cmd>[-<verb>]`), in an emulator request (a `hold` rule, e.g. the 2nd role
  assignment PUT, the artifact download), or, for phases that only write files, after their
  Nth action began. ENOSPC cells mount a size-limited tmpfs in the root and fill it.
  Endpoint cells answer a burst of requests of one server (`times`) with the fault, then
  the server recovers; the stall holds one request 30 s.
- **converged**: after the fault cleared, `bootstrap` exited 0 with state `succeeded` (at
  most 4 tries), Azure holds our machine and Node; for kill -9 cells also `unbootstrap`
  exited 0 and left the root as it was before the first bootstrap, byte for byte (only
  status.json, provision.complete and the lock remain, on purpose) with nothing of ours in
  Azure.
- **time to converge**: seconds from the fault clearing (the kill, the freed space, the
  injected burst) to the end of the first successful bootstrap.
- **retries**: requests the faulted server answered with the fault (emulator request log):
  each one is a request the CLI had to make again.
- **exit while failing**: exit codes of the runs that failed before convergence (75 =
  EX_TEMPFAIL, try again; 1 = failed; `kill -9` = the cell killed it); `-` = none failed.
- **files corrupted**: files of ours that, after convergence, differ from the clean run's
  (content with this cell's ports, paths and CA normalized, and mode) or are missing, plus
  files that while failing were neither their old content nor the clean run's (half-written),
  plus run state that was not whole JSON. Must be 0.
- **notes**: the error the failing run printed, what the kill point was, stray temp files.
"""


def _converged(r):
    if not r.converged:
        return "**no**"
    return "yes, but **unbootstrap left files**" if r.unbootstrap_clean is False else "yes"


def _readable(note):
    """A note without the cell's scratch directory: node paths as the node sees them."""
    return re.sub(r"/[^ ]*/faults-[^/ ]+/host/root(?=/)", "", note)


def cell_row(r):
    notes = [_readable(n) for n in r.notes if not n.startswith("kept ")]
    return [f"{r.group}: {r.name}", r.fault, _converged(r),
            f"{r.seconds:.1f}" if r.seconds is not None else "-", r.retries,
            ", ".join(str(c) for c in r.exit_failing) or "-",
            str(len(r.corrupted)) if not r.corrupted else f"**{len(r.corrupted)}**: {'; '.join(r.corrupted[:3])}",
            "; ".join(notes)]


def table(results):
    def cell(text):
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(c) for c in cell_row(r)) + " |" for r in results]
    return "\n".join(lines)


def revision():
    try:
        proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=harness.REPO,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


# Where the hand-written part of docs/reliability.md begins: what each class of hostile input
# gets is prose, not a table this run makes, so a run keeps it as it found it.
KEPT_FROM = "\n## Hostile inputs"


def kept_part(path=DOC):
    """The hand-written tail of the document at `path` ("" when it has none)."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    at = text.find(KEPT_FROM)
    return text[at:] if at >= 0 else ""


def document(results, wall, kept=""):
    failed = [r for r in results if not r.ok]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "# Reliability: the fault matrix\n\n"
        "What a bootstrap does when it is killed, runs out of disk, meets a failing Azure\n"
        "endpoint or a bad artifact, or runs next to another run; and whether it converges\n"
        "once the fault is gone. Made by `make faults` (`python3 -m tests.faults`); a fast\n"
        "subset runs in `make test` on Debian's stack (tests/integration/test_faults.py).\n\n"
        f"Run: {date}, revision `{revision()}`, {len(results)} cells in {wall:.0f} s, "
        f"{len(failed)} failed.\n\n"
        + table(results) + "\n\n## Columns\n\n" + EXPLAIN + kept)


def write_document(results, wall, path=DOC):
    kept = kept_part(path)
    with open(path, "w") as f:
        f.write(document(results, wall, kept))
    return path
