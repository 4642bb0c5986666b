"""`python3 -m tests.faults` (`make faults`): run the fault matrix, print it, write
docs/reliability.md; exit 1 when a cell did not converge or corrupted a file."""

import argparse
import fnmatch
import os
import sys
import time

from tests.faults import cells as cells_mod
from tests.faults import matrix


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m tests.faults", description=__doc__)
    p.add_argument("--workers", type=int, default=10, help="cells run at once (default 10)")
    p.add_argument("--only", metavar="GLOB", action="append", default=[],
                   help="run only cells whose 'group: name' matches (repeatable); the clean run always runs")
    p.add_argument("--no-write", action="store_true", help="print only, leave docs/reliability.md alone")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("the fault matrix mounts tmpfs (ENOSPC cells): run it as root")
    cells = cells_mod.all_cells()
    if args.only:
        cells = [c for c in cells if c.name == cells_mod.REFERENCE
                 or any(fnmatch.fnmatch(f"{c.group}: {c.name}", g) for g in args.only)]
    started = time.monotonic()

    def progress(r):
        print(f"{'ok  ' if r.converged else 'FAIL'} {r.group}: {r.name} ({r.wall:.0f}s)", flush=True)

    results = matrix.run_cells(cells, workers=args.workers, progress=progress)
    wall = time.monotonic() - started
    print()
    print(matrix.table(results))
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results)} cells in {wall:.0f} s; {len(failed)} failed")
    if not args.no_write and not args.only:
        print(f"wrote {matrix.write_document(results, wall)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
