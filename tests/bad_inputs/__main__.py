"""`python3 -m tests.bad_inputs [-k TEXT] [--family NAME] [-j N] [-v]` (make bad-inputs):
run the corpus, print the table by family and every failing case with what went wrong.
Exit 0 when every case passed, 1 otherwise."""

import argparse
import sys
import time

from tests.bad_inputs import corpus, report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m tests.bad_inputs", description=__doc__)
    parser.add_argument("-k", dest="pattern", help="only the cases whose id contains TEXT")
    parser.add_argument("--family", action="append", help="only this family (repeatable)")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="cases run at once")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per case as it ends")
    parser.add_argument("--list", action="store_true", help="list the cases, run nothing")
    args = parser.parse_args(argv)

    cases = report.select(corpus.load(), args.pattern, args.family)
    if args.list:
        for case in cases:
            print(f"{case.id}\t{case.run} {' '.join(case.argv)}")
        return 0

    def progress(outcome):
        if args.verbose:
            mark = "ok  " if outcome.passed else "FAIL"
            print(f"{mark} {outcome.case.id} ({outcome.seconds:.1f}s)", flush=True)

    started = time.monotonic()
    outcomes, notes = report.run_all(cases, jobs=args.jobs, progress=progress)
    took = time.monotonic() - started
    print(report.table(outcomes))
    print(f"\n{len(outcomes)} cases in {took:.1f} s ({args.jobs or report.default_jobs()} at once)")
    for note in notes:
        print(f"note: {note}")
    print()
    print(report.failures(outcomes))
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
