"""python3 -m tests.fleet [N] [--parallel K] [--json]: see tests/fleet/simulation.py."""

import argparse
import json
import sys

from tests.fleet import simulation

NODE_NICENESS = 10  # the nodes yield the CPU to the emulator (simulation.run)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m tests.fleet",
                                description="Join N scratch nodes at once to one emulated subscription under "
                                            "ARM's documented throttling, report, then unjoin them all.")
    p.add_argument("nodes", nargs="?", type=int, default=200, help="how many nodes (default 200)")
    p.add_argument("--parallel", type=int, default=None,
                   help="at most K bootstrap processes at a time (default: 10 per CPU, see "
                        "simulation.default_parallel)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory (always kept on failure)")
    args = p.parse_args(argv)
    if args.nodes < 1:
        p.error(f"N = {args.nodes}: expected at least 1 node")
    if args.parallel is not None and args.parallel < 1:
        p.error(f"--parallel = {args.parallel}: expected at least 1")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    progress = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    result = simulation.run(args.nodes, parallel=args.parallel, keep=args.keep, progress=progress,
                            node_niceness=NODE_NICENESS)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
    else:
        print(simulation.render(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
