"""The chain depth of a request log (tests/request_chains.py): the longest chain of requests
each of which arrived only after the one before it had been answered."""

from tests.request_chains import chain_depth, window


def req(name, start, end):
    return {"name": name, "time": start, "ended": end, "server": "arm", "method": "GET", "path": "/" + name}


def names(path):
    return [r["name"] for r in path]


def test_an_empty_log_has_depth_zero():
    assert chain_depth([]) == (0, [])


def test_requests_one_after_the_other_chain():
    log = [req("c", 4, 5), req("a", 0, 1), req("b", 2, 3)]
    depth, path = chain_depth(log)
    assert depth == 3 and names(path) == ["a", "b", "c"]


def test_requests_sent_at_once_do_not_chain():
    depth, _ = chain_depth([req("a", 0, 2), req("b", 1, 3), req("c", 1.5, 2.5)])
    assert depth == 1


def test_a_request_sent_as_the_answer_before_it_went_out_follows_it():
    depth, path = chain_depth([req("a", 0, 1), req("b", 1, 2)])
    assert depth == 2 and names(path) == ["a", "b"]


def test_overlapping_by_a_little_breaks_the_chain():
    depth, _ = chain_depth([req("a", 0, 1.0), req("b", 0.999, 2)])
    assert depth == 1


def test_the_longest_of_several_branches_counts():
    # Two branches after "start": one of three requests, one of one; then "end" after both.
    log = [req("start", 0, 1),
           req("x1", 1.1, 2), req("x2", 2.1, 3), req("x3", 3.1, 4),
           req("y", 1.1, 3.5),
           req("end", 4.1, 5)]
    depth, path = chain_depth(log)
    assert depth == 5 and names(path) == ["start", "x1", "x2", "x3", "end"]


def test_a_long_request_does_not_hide_a_chain_beside_it():
    # A download from 0 to 10 overlaps everything; three short reads one after the other beside it.
    log = [req("download", 0, 10), req("r1", 0.1, 0.2), req("r2", 0.3, 0.4), req("r3", 0.5, 0.6)]
    depth, path = chain_depth(log)
    assert depth == 3 and names(path) == ["r1", "r2", "r3"]


def test_window_keeps_the_requests_that_arrived_in_it():
    log = [req("a", 0, 1), req("b", 2, 3), req("c", 4, 5)]
    assert names(window(log, 2)) == ["b", "c"]
    assert names(window(log, 1, 4)) == ["b"]
