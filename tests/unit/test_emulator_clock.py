"""The emulator's clock (tests/emulator/clock.py): what it moves, what it refuses, and that
a new world starts on this machine's time again."""

import pytest

from tests.emulator import constants as C
from tests.emulator_fixtures import EmulatorError


def test_an_advanced_clock_expires_tokens_and_a_reset_rewinds_it(fresh_emulator):
    token = fresh_emulator.arm_token()
    path = f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}"
    assert fresh_emulator.arm_call("GET", path, "2021-04-01", token=token)[0] == 200
    before = fresh_emulator.admin("GET", "clock")
    moved = fresh_emulator.advance_clock(3600)
    assert moved["offset"] == before["offset"] + 3600 and moved["now"] >= before["now"] + 3600
    status, _, body = fresh_emulator.arm_call("GET", path, "2021-04-01", token=token)
    assert status == 401 and body["error"]["code"] == "ExpiredAuthenticationToken"
    assert fresh_emulator.arm_call("GET", path, "2021-04-01")[0] == 200  # a new token, in the new time
    fresh_emulator.reset()
    assert fresh_emulator.admin("GET", "clock")["offset"] == 0


@pytest.mark.parametrize("advance", [-1, True, "60", None, 10 * 365 * 86400 + 1])
def test_bad_advances_are_refused_and_change_nothing(fresh_emulator, advance):
    with pytest.raises(EmulatorError) as err:
        fresh_emulator.advance_clock(advance)
    assert f"advance = {advance!r}" in str(err.value)
    assert fresh_emulator.admin("GET", "clock")["offset"] == 0


def test_delete_puts_this_machines_time_back(fresh_emulator):
    fresh_emulator.advance_clock(90)
    assert fresh_emulator.admin("DELETE", "clock")["offset"] == 0
