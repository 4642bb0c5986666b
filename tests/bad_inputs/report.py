"""Running the corpus in parallel, and the table of what it found."""

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor

from tests.bad_inputs import corpus
from tests.bad_inputs.node import Outcome, debconf_tools_missing, run_case


def default_jobs():
    # Each case is a short-lived subprocess; a few more threads than CPUs keeps them busy
    # while others wait on their child.
    return max(2, min(16, 2 * (os.cpu_count() or 1)))


def run_one(case, base):
    work = tempfile.mkdtemp(prefix=case.id.replace("/", "-")[:60] + "-", dir=base)
    try:
        return run_case(case, work)
    except Exception as err:  # a setup bug is a failed case with its reason, not a lost run
        outcome = Outcome(case)
        outcome.unclear.append(f"the harness failed: {type(err).__name__}: {err}")
        return outcome
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(cases, jobs=None, progress=None):
    """Every case's Outcome, in corpus order. Cases of the postinst run are left out (with
    a note) when debconf's tools are not installed."""
    missing = debconf_tools_missing() if any(c.run == "postinst" for c in cases) else []
    notes = []
    if missing:
        notes.append(f"postinst cases not run: {', '.join(missing)} missing "
                     "(apt-get install debconf debconf-utils po-debconf ucf)")
        cases = [c for c in cases if c.run != "postinst"]
    base = tempfile.mkdtemp(prefix="bad-inputs-")
    try:
        with ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
            futures = [pool.submit(run_one, case, base) for case in cases]
            outcomes = []
            for future in futures:
                outcomes.append(future.result())
                if progress:
                    progress(outcomes[-1])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return outcomes, notes


def _pct(part, whole):
    return f"{part:4d} ({100.0 * part / whole:5.1f}%)" if whole else f"{part:4d}"


def table(outcomes):
    """By family: cases tried, with a clear error, with nothing changed, passed."""
    header = f"{'family':<20} {'tried':>5}  {'clear error':>14}  {'nothing changed':>15}  {'passed':>14}"
    lines = [header, "-" * len(header)]
    groups = {}
    for outcome in outcomes:
        groups.setdefault(outcome.case.family, []).append(outcome)
    for family, group in list(groups.items()) + [("TOTAL", outcomes)]:
        if family == "TOTAL":
            lines.append("-" * len(header))
        n = len(group)
        lines.append(f"{family:<20} {n:>5}  {_pct(sum(o.clear for o in group), n):>14}  "
                     f"{_pct(sum(o.unchanged for o in group), n):>15}  {_pct(sum(o.passed for o in group), n):>14}")
    return "\n".join(lines)


def failures(outcomes):
    failed = [o for o in outcomes if not o.passed]
    if not failed:
        return "every case passed"
    return f"{len(failed)} failing case(s):\n\n" + "\n\n".join(o.explain() for o in failed)


def select(cases, pattern=None, families=None):
    if families:
        cases = [c for c in cases if c.family in families]
    if pattern:
        cases = [c for c in cases if pattern in c.id]
    return cases


__all__ = ["run_all", "table", "failures", "select", "default_jobs", "corpus"]
