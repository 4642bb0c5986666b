"""The one way a test waits: for a condition, never for a duration.

`wait_for(predicate, timeout)` asks the predicate until it answers something true and
returns that answer, or returns its last (false) answer once `timeout` seconds have passed,
so the caller's assert shows what was seen. The timeout is a ceiling for a broken run,
never what a test measures: a loaded machine makes the wait longer, never the test red
(choose it generously). For "nothing happens", count the passes of the thing watched
instead of sleeping (docs/testing.md)."""

import time


def wait_for(predicate, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
