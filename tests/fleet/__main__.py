"""python3 -m tests.fleet [N] [--parallel K] [--scale F] [--json]: see tests/fleet/simulation.py."""

import argparse
import json
import sys

from tests.emulator import throttling
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
    p.add_argument("--scale", type=float, default=1.0,
                   help="divide ARM's documented bucket sizes and refill rates by F (default 1): a small "
                        "machine sends a fleet's requests more slowly than the fleet would, so its buckets "
                        "never run dry; F > 1 puts them under the same pressure")
    p.add_argument("--join-mode", choices=("arc", "agent-pool"), default="arc",
                   help="arc (default): each node its own Arc machine and roles; agent-pool: every node joins "
                        "the emulator's FlexNodes pool with the pool's one service principal")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory (always kept on failure)")
    args = p.parse_args(argv)
    if args.nodes < 1:
        p.error(f"N = {args.nodes}: expected at least 1 node")
    if args.parallel is not None and args.parallel < 1:
        p.error(f"--parallel = {args.parallel}: expected at least 1")
    if not 1 <= args.scale <= 100:
        p.error(f"--scale = {args.scale:g}: expected a number from 1 to 100")
    return args


def scaled_figures(scale):
    """Emulator settings with ARM's documented figures divided by `scale`."""
    settings = {}
    for kind, (bucket, refill) in throttling.DOCUMENTED.items():
        settings[f"arm_{kind}_bucket"] = max(1, round(bucket / scale))
        settings[f"arm_{kind}_refill"] = refill / scale
    return settings


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    progress = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    settings = scaled_figures(args.scale) if args.scale != 1 else None
    result = simulation.run(args.nodes, parallel=args.parallel, settings=settings, keep=args.keep,
                            progress=progress, node_niceness=NODE_NICENESS, join_mode=args.join_mode)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
    else:
        print(simulation.render(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
