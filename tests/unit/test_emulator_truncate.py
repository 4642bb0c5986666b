"""The `truncate` fault: a transfer cut short (the whole Content-Length announced, part of
the body sent, the connection closed), as a dying mirror or proxy does mid-download."""

import http.client
import ssl
import urllib.parse

import pytest

from tests.emulator_fixtures import EmulatorError

NAME = "runc-v1.1.12.amd64"


def get(emu, name):
    """(announced length, bytes received, whether the body was cut short)."""
    url = urllib.parse.urlsplit(f"{emu.artifacts}/{name}")
    conn = http.client.HTTPSConnection(url.hostname, url.port, timeout=10,
                                       context=ssl.create_default_context(cafile=emu.ca_bundle))
    try:
        conn.request("GET", url.path)
        resp = conn.getresponse()
        announced = int(resp.headers["Content-Length"])
        try:
            return announced, resp.read(), False
        except http.client.IncompleteRead as e:
            return announced, e.partial, True
    finally:
        conn.close()


def test_truncate_sends_part_of_the_body_then_closes_once(fresh_emulator):
    fresh_emulator.faults([{"match": {"server": "artifacts", "path_regex": NAME + "$", "times": 1},
                            "truncate": 100}])
    announced, cut, short = get(fresh_emulator, NAME)
    assert short and len(cut) == 100 and announced > 100
    announced_again, whole, short_again = get(fresh_emulator, NAME)
    assert not short_again and len(whole) == announced_again == announced
    assert whole[:100] == cut, "the bytes sent are the real start of the body"
    faulted = [r["fault"] for r in fresh_emulator.requests(server="artifacts", path_contains=NAME)]
    assert faulted == ["truncate", None]


def test_truncate_zero_sends_headers_only(fresh_emulator):
    fresh_emulator.faults([{"match": {"server": "artifacts", "times": 1}, "truncate": 0}])
    announced, body, short = get(fresh_emulator, NAME)
    assert short and body == b"" and announced > 0


@pytest.mark.parametrize("rule,fragment", [
    ({"truncate": -1}, "faults[0].truncate = -1: expected a number of bytes"),
    ({"truncate": "half"}, "faults[0].truncate = 'half'"),
    ({"truncate": 10, "drop": True}, "faults[0]: drop and truncate exclude each other"),
])
def test_bad_truncate_rules_are_refused_naming_the_field(fresh_emulator, rule, fragment):
    with pytest.raises(EmulatorError) as err:
        fresh_emulator.faults([rule])
    assert fragment in str(err.value)
