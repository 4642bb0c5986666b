"""The emulator's clock: this machine's time plus an offset that tests advance.

Everything the emulator decides by time reads it here: a token's expiry, a long-running
operation's end, RBAC's and Entra ID's replication delays, a bootstrap token's TTL,
ARM's throttling buckets, a client certificate's dates (signed and judged by it; the
apiserver's Date header carries it to the fake kubelet, which renews by it). A test that needs "an hour later" says so
(`POST /_emulator/clock {"advance": 3600}`, Emulator.advance_clock) instead of sleeping, so
a loaded machine makes it slower, never red. Within a world the offset only grows, as
time does for the services modelled; a reset (`POST /_emulator/reset`, a new world) or
`DELETE /_emulator/clock` puts it back to this machine's time, so a session-wide emulator's
next test meets no skew (a client assertion MSAL signs with this machine's time would
otherwise look expired to Entra ID's stand-in).

Durations the emulator measures about itself (a request's duration in its log, the
artifact rate limiter, the state file's save interval) stay on the real clocks: they
describe this process, not the modelled world.

One emulator per process (tests/emulator/__main__.py), so the offset is the process's.
"""

import threading
import time

_lock = threading.Lock()
_offset = 0.0


def now():
    """Seconds since the epoch, as the modelled world sees them."""
    return time.time() + _offset


def offset():
    return _offset


def advance(seconds):
    """Move the modelled world `seconds` ahead; returns the new offset."""
    global _offset
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 10 * 365 * 86400:
        raise ValueError(f"advance = {seconds!r}: expected seconds, 0 to ten years")
    with _lock:
        _offset += float(seconds)
        return _offset


def rewind():
    """Back to this machine's time (a new world)."""
    global _offset
    with _lock:
        _offset = 0.0
