"""Waiting for something Azure or the cluster does on its own time, bounded.

One loop for every wait (the Arc identity, RBAC propagation, the Node Ready): try, and
between tries sleep, doubling the delay up to `max_delay` (a fixed interval when they are
equal), never past the deadline. Standard library only (kube/ and azure/ both use it).
"""

import time


def poll(probe, *, timeout, delay, max_delay=None, give_up, clock=time.monotonic, sleep=time.sleep):
    """Call `probe()` until it returns (True, value), and return that value. A probe that
    returns (False, last_seen) is tried again; after `timeout` seconds `give_up(last_seen)`
    is raised (an exception the caller builds, saying what was last seen)."""
    max_delay = delay if max_delay is None else max_delay
    deadline = clock() + timeout
    while True:
        done, value = probe()
        if done:
            return value
        remaining = deadline - clock()
        if remaining <= 0:
            raise give_up(value)
        sleep(min(delay, remaining))
        delay = min(delay * 2, max_delay)
