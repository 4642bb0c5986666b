"""HIMDS retries: 429, 5xx and no answer are tried again with backoff, honouring Retry-After
(bounded), within a time budget; then exit 75. Against the loopback HIMDS stand-in."""

import time

import pytest

from aks_flex_node.azure import himds
from aks_flex_node.errors import ExitCode, TemporaryError
from tests.himds_fixtures import HimdsStandIn


@pytest.fixture
def key_dir(tmp_path):
    path = tmp_path / "var/opt/azcmagent/tokens"
    path.mkdir(parents=True)
    return path


class Clock:
    """time.monotonic and time.sleep for one call: sleeping advances it (and is recorded),
    so waits of seconds cost none."""

    def __init__(self):
        self.now = 1000.0
        self.waits = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.waits.append(seconds)
        self.now += seconds


def authorized(requests):
    return ["Authorization" in r["headers"] for r in requests]


def test_429_on_the_challenge_is_retried_after_retry_after(key_dir):
    # The fault matrix's "himds 429": three 429s with Retry-After: 1, then HIMDS recovers.
    clock = Clock()
    with HimdsStandIn(str(key_dir)) as standin:
        standin.faults = [(429, {"Retry-After": "1"})] * 3
        token = himds.get_token(standin.endpoint, "r", str(key_dir), sleep=clock.sleep, clock=clock)
    assert token.access_token == "tok-r"
    assert clock.waits == [1.0, 1.0, 1.0]  # as HIMDS asked, not the backoff's 1, 2, 4
    assert authorized(standin.requests) == [False, False, False, False, True]


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_is_retried_with_exponential_backoff(key_dir, status):
    clock = Clock()
    with HimdsStandIn(str(key_dir)) as standin:
        standin.faults = [(status, {})] * 3
        token = himds.get_token(standin.endpoint, "r", str(key_dir), sleep=clock.sleep, clock=clock)
    assert token.access_token == "tok-r"
    assert clock.waits == [1.0, 2.0, 4.0]


def test_a_failed_token_request_is_retried_from_a_new_challenge(key_dir):
    # The key a challenge hands out may be single-use: a retry starts with a new challenge.
    clock = Clock()
    with HimdsStandIn(str(key_dir)) as standin:
        standin.faults = [None, (503, {}), None, (500, {})]
        token = himds.get_token(standin.endpoint, "r", str(key_dir), sleep=clock.sleep, clock=clock)
    assert token.access_token == "tok-r"
    assert authorized(standin.requests) == [False, True, False, True, False, True]
    assert clock.waits == [1.0, 2.0]


def test_retry_after_is_capped(key_dir):
    clock = Clock()
    with HimdsStandIn(str(key_dir)) as standin:
        standin.faults = [(429, {"Retry-After": "3600"})]
        himds.get_token(standin.endpoint, "r", str(key_dir), sleep=clock.sleep, clock=clock)
    assert clock.waits == [himds.MAX_WAIT]


def test_retry_after_as_an_http_date_and_garbage():
    soon = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 5))
    assert 3.0 <= himds.retry_after({"Retry-After": soon}, 1.0) <= 5.0
    assert himds.retry_after({"Retry-After": "soon"}, 2.0) == 2.0
    assert himds.retry_after({}, 4.0) == 4.0
    assert himds.retry_after({"Retry-After": "0"}, 4.0) == 0.0


def test_a_dropped_connection_is_retried(key_dir):
    # The fault matrix's "himds drop": the connection closes without an answer, 3 times.
    clock = Clock()
    with HimdsStandIn(str(key_dir)) as standin:
        standin.faults = ["drop", "drop", "drop"]
        token = himds.get_token(standin.endpoint, "r", str(key_dir), sleep=clock.sleep, clock=clock)
    assert token.access_token == "tok-r"
    assert len(standin.requests) == 5


def test_still_throttled_after_every_attempt_is_temporary(key_dir):
    clock = Clock()
    with HimdsStandIn(str(key_dir)) as standin:
        standin.faults = [(429, {"Retry-After": "0"})] * 10
        with pytest.raises(himds.HimdsBusy) as caught:
            himds.get_token(standin.endpoint, "r", str(key_dir), sleep=clock.sleep, clock=clock)
    assert len(standin.requests) == himds.ATTEMPTS
    assert isinstance(caught.value, TemporaryError) and caught.value.exit_code == ExitCode.TEMPFAIL
    # the status, which request got it (the module's own name for it), and the attempts made
    assert caught.value.code == "himds_busy"
    assert "429" in caught.value.message and himds.CHALLENGE in caught.value.message
    assert himds.TOKEN_REQUEST not in caught.value.message
    assert f" {himds.ATTEMPTS} " in caught.value.message
    assert "himdsd" in caught.value.remedy


def test_the_budget_bounds_the_waits(key_dir):
    # Retry-After 10 s each time, 15 s of budget: one wait fits, the next does not.
    clock = Clock()
    with HimdsStandIn(str(key_dir)) as standin:
        standin.faults = [(503, {"Retry-After": "10"})] * 10
        with pytest.raises(himds.HimdsBusy, match=f"503.*{himds.CHALLENGE}"):  # the status, the request
            himds.get_token(standin.endpoint, "r", str(key_dir), budget=15, sleep=clock.sleep, clock=clock)
    assert clock.waits == [10.0]
    assert len(standin.requests) == 2


@pytest.mark.parametrize("status", [400, 403, 404])
def test_other_errors_are_not_retried(key_dir, status):
    clock = Clock()
    with HimdsStandIn(str(key_dir), first_status=status) as standin:
        with pytest.raises(himds.HimdsError, match=rf"\b{status}\b") as caught:  # the status it got
            himds.get_token(standin.endpoint, "r", str(key_dir), sleep=clock.sleep, clock=clock)
    assert not isinstance(caught.value, TemporaryError) and caught.value.code == "no-challenge"
    assert len(standin.requests) == 1 and clock.waits == []


def test_a_refused_key_is_not_retried(key_dir):
    clock = Clock()
    (key_dir / "other.key").write_text("wrong-key")
    # The realm names a file that does not hold the key HIMDS expects: it answers 401.
    with HimdsStandIn(str(key_dir), realm=str(key_dir / "other.key")) as standin:
        with pytest.raises(himds.HimdsError, match=r"\b401\b") as caught:  # the status it got
            himds.get_token(standin.endpoint, "r", str(key_dir), sleep=clock.sleep, clock=clock)
    assert caught.value.code == "token-refused"
    assert len(standin.requests) == 2 and clock.waits == []
