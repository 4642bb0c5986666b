"""The fleet simulation's reading of ARM's throttling ledger (tests/fleet/simulation.py
_analyse): the writes each principal's bucket let through (what the bench's write floor is
computed from), and a 429 counted honoured only when its client waited Retry-After."""

from tests.fleet import simulation


def call(t, node, kind="writes", status=200, principal="p1", retry_after=None, path="/x"):
    return {"time": t, "method": "PUT", "path": path, "kind": kind, "principal": principal, "status": status,
            "retry_after": retry_after, "user_agent": f"python {simulation.USER_AGENT_TAG}{node}"}


def analyse(join_calls):
    result = simulation.FleetResult(2, 2, "today", {}, 4000)
    simulation._analyse(result, join_calls, [], {"fleet-000", "fleet-001"})
    return result


def test_writes_are_counted_per_principal_and_429s_take_none():
    result = analyse([call(0, "fleet-000"), call(1, "fleet-001", principal="p2"),
                      call(2, "fleet-000", status=429, retry_after=1), call(3.5, "fleet-000"),
                      call(4, "fleet-001", kind="reads")])
    assert dict(result.writes_by_principal["join"]) == {"p1": 2, "p2": 1}


def test_a_retry_sooner_than_retry_after_is_not_honoured():
    result = analyse([call(0, "fleet-000", status=429, retry_after=2), call(1.5, "fleet-000"),
                      call(5, "fleet-001", status=429, retry_after=1), call(6.2, "fleet-001")])
    assert result.throttled["join"] == {"seen": 2, "honoured": 1}
    assert [(e["node"], e["waited"]) for e in result.not_honoured] == [("fleet-000", 1.5)]


def test_another_request_of_the_same_client_meanwhile_is_not_a_retry():
    """A node's concurrent runner reads two things at once; each 429 is judged by the retry of
    its own request, not by the other request sent meanwhile."""
    result = analyse([call(0, "fleet-000", status=429, retry_after=1, path="/a"),
                      call(0.2, "fleet-000", path="/b"),
                      call(1.1, "fleet-000", path="/a")])
    assert result.throttled["join"] == {"seen": 1, "honoured": 1} and result.not_honoured == []
