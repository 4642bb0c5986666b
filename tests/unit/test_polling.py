"""The one bounded wait: backoff doubling to its cap, never past the deadline."""

import pytest

from aks_flex_node.polling import poll


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_backs_off_to_its_cap_and_returns_the_value():
    clock, answers = Clock(), iter([(False, "a"), (False, "b"), (False, "c"), (False, "d"), (True, 42)])
    assert poll(lambda: next(answers), timeout=100, delay=1, max_delay=3, give_up=AssertionError,
                clock=clock, sleep=clock.sleep) == 42
    assert clock.sleeps == [1, 2, 3, 3]


def test_gives_up_at_the_deadline_with_what_was_last_seen():
    clock = Clock()
    with pytest.raises(TimeoutError) as err:
        poll(lambda: (False, f"seen at {clock.now:g}"), timeout=5, delay=2, give_up=TimeoutError,
             clock=clock, sleep=clock.sleep)
    assert str(err.value) == "seen at 5"
    assert clock.sleeps == [2, 2, 1], "the last sleep ends at the deadline, not after it"
