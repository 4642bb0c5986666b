"""The one way a test waits: for a condition, never for a duration.

`wait_for(predicate, timeout)` asks the predicate until it answers something true and
returns that answer, or returns its last (false) answer once `timeout` seconds have passed,
so the caller's assert shows what was seen. The timeout is a ceiling for a broken run,
never what a test measures: a loaded machine makes the wait longer, never the test red
(choose it generously). For "nothing happens", count the passes of the thing watched
instead of sleeping (docs/testing.md).

`returns(call)` is the same ceiling for "it returns at once instead of hanging": what the
call returns (or raises), or an AssertionError once it has hung for `timeout` seconds.
`pauses(monkeypatch)` records the time.sleep calls of one thread, for "no pause happened"
(the list stays empty) or to hold a pause open while the test looks at what happens
meanwhile: a claim about pauses is checked by counting them, never by timing them."""

import threading
import time

_sleep = time.sleep  # wait_for's own pauses, whatever a test's pauses() spies on


def wait_for(predicate, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        _sleep(interval)


def returns(call, timeout=300.0, what=None):
    """What `call()` returns, called on a thread of its own; what it raises is raised here.
    AssertionError when it has not returned after `timeout` seconds: a ceiling for a hang
    (choose it generously), never a measure. A hung call's thread is left behind (a daemon):
    free what it waits on in the test's cleanup."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as err:  # raised again on the test's thread
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"{what or 'the call'} has not returned after {timeout:.0f} s: it hangs")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def pauses(monkeypatch, thread=None, instead=None):
    """A list that gets the seconds of every time.sleep call `thread` (the calling thread
    unless given) makes from now on, for the rest of the test. Each pause is then taken, or,
    with `instead`, replaced by `instead(seconds)` (e.g. wait for an Event). Other threads
    sleep as usual. For code that calls `time.sleep` through the module (not a `from time
    import sleep` taken before the spy)."""
    real_sleep = time.sleep
    seen = []

    def sleep(seconds):
        mine = threading.current_thread() is (thread or owner)
        if mine:
            seen.append(seconds)
            if instead is not None:
                return instead(seconds)
        return real_sleep(seconds)

    owner = threading.current_thread()
    monkeypatch.setattr(time, "sleep", sleep)
    return seen


def connects_to(monkeypatch, port):
    """The connection attempts this process makes to loopback `port` (socket.connect, the
    network boundary), counted into the list returned: where nothing listens, no listener can."""
    import socket

    attempts = []
    connect = socket.socket.connect

    def counted_connect(self, address):
        if address[1:2] == (port,):
            attempts.append(address)
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", counted_connect)
    return attempts
