"""Issue 12 (speed): the wait for the Node to be Ready polls at 0.2 s while the kubelet is
usually about to report it, then at 1 s; it used to poll at 1 s from the start."""

import pytest

from aks_flex_node.kube import poll_fast_then_slow as poll_ready


class Clock:
    """Time that moves only when the code under test sleeps; records each sleep."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def test_polls_at_a_fifth_of_a_second_for_five_seconds_then_every_second():
    clock, probes = Clock(), []

    def probe():
        probes.append(clock.now)
        return (clock.now >= 8.0, "NotReady")

    poll_ready(probe, 300, give_up=AssertionError, clock=clock, sleep=clock.sleep)
    assert clock.sleeps[:25] == [0.2] * 25  # the first 5 s
    assert set(clock.sleeps[25:]) == {1.0}
    assert probes[-1] == pytest.approx(8.0)


def test_ready_after_a_second_and_a_half_is_seen_within_a_fifth_of_a_second():
    clock = Clock()
    poll_ready(lambda: (clock.now >= 1.5, None), 300, give_up=AssertionError,
               clock=clock, sleep=clock.sleep)
    assert 1.5 <= clock.now <= 1.5 + 0.2 + 1e-9


def test_gives_up_at_the_timeout_with_what_was_last_seen():
    clock = Clock()
    with pytest.raises(TimeoutError, match="last: NotReady"):
        poll_ready(lambda: (False, "NotReady"), 12,
                   give_up=lambda last: TimeoutError(f"last: {last}"), clock=clock, sleep=clock.sleep)
    assert clock.now == pytest.approx(12.0)


def test_a_timeout_shorter_than_the_fast_window_is_kept():
    clock = Clock()
    with pytest.raises(TimeoutError):
        poll_ready(lambda: (False, None), 1, give_up=lambda _: TimeoutError(),
                   clock=clock, sleep=clock.sleep)
    assert clock.now == pytest.approx(1.0)
    assert set(clock.sleeps) == {0.2}


def test_the_propagation_schedule_is_fast_then_doubling_to_its_cap():
    """rbac-propagation's schedule (steps/node.py): 0.25 s for 5 s, then 1, 2, 4, 8, 10, 10 s..."""
    clock = Clock()
    poll_ready(lambda: (clock.now >= 60.0, None), 600, give_up=AssertionError, clock=clock, sleep=clock.sleep,
               fast_delay=0.25, fast_for=5.0, slow_delay=1.0, slow_max=10.0)
    assert clock.sleeps[:20] == [0.25] * 20
    assert clock.sleeps[20:26] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert max(clock.sleeps) == 10.0 and clock.now < 60.0 + 10.0
