"""The depth of a run, read from the emulator's request log (issue 30).

A run's requests form chains: request B follows request A when B arrived only after A's
answer had gone out (the log's "time" and "ended", tests/emulator/server.py). The chain
depth is the length of the longest such chain: how many round trips the run waited on one
after the other, whatever it did at once beside them. On a real network each link of the
chain costs at least a round trip, so depth x round trip is a floor of the run's time.

`ended` is when the emulator wrote the answer's last byte, `time` when the next request
arrived: a request sent only after the answer before it was read is after it here too.
Two requests sent at once overlap and never chain, whichever arrived first.
"""

import bisect


def chain_depth(requests):
    """(depth, [the requests of one longest chain, first to last]) of `requests` (dicts with
    "time" and "ended", seconds). An empty log has depth 0."""
    if not requests:
        return 0, []
    by_end = sorted(requests, key=lambda r: (r["ended"], r["time"]))
    ends = [r["ended"] for r in by_end]
    # An entry is (depth, the entry before it or None, request): the longest chain ending with
    # that request. best_upto[i] is the deepest entry among by_end[0..i].
    best_upto = []
    for i, r in enumerate(by_end):
        # The requests whose answers had gone out when this one arrived. Those are among the
        # ones before it in end order (ended <= time <= this one's end), ties included.
        k = min(bisect.bisect_right(ends, r["time"]), i) - 1
        before = best_upto[k] if k >= 0 else None
        entry = (before[0] + 1 if before else 1, before, r)
        best_upto.append(entry if not best_upto or entry[0] > best_upto[-1][0] else best_upto[-1])
    deepest = best_upto[-1]
    path, entry = [], deepest
    while entry is not None:
        path.append(entry[2])
        entry = entry[1]
    return deepest[0], path[::-1]


def window(requests, since, until=None):
    """The requests that arrived at or after `since` (and before `until`): one run's."""
    return [r for r in requests if r["time"] >= since and (until is None or r["time"] < until)]


def describe(path):
    """One line per request of a chain: `server METHOD path`."""
    return [f"{r['server']} {r['method']} {r['path']}" for r in path]
