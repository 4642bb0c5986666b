"""The upgrade window (aks_flex_node/window.py): when the agent may upgrade the kubelet."""

import datetime

import pytest

from aks_flex_node import window

# 2026-11-21 is a Saturday.
SAT = datetime.date(2026, 11, 21)


def at(day_offset, hhmm):
    hour, minute = map(int, hhmm.split(":"))
    return datetime.datetime.combine(SAT + datetime.timedelta(days=day_offset), datetime.time(hour, minute))


@pytest.mark.parametrize("text,when,open_", [
    ("02:00-05:00", at(0, "02:00"), True),
    ("02:00-05:00", at(3, "04:59"), True),
    ("02:00-05:00", at(0, "05:00"), False),  # the end is not inside
    ("02:00-05:00", at(0, "01:59"), False),
    ("Sat,Sun 02:00-05:00", at(1, "03:00"), True),
    ("Sat,Sun 02:00-05:00", at(2, "03:00"), False),  # Monday
    ("Mon-Fri 22:00-04:00", at(2, "23:30"), True),  # Monday evening
    ("Mon-Fri 22:00-04:00", at(3, "03:00"), True),  # Tuesday morning: Monday's window
    ("Mon-Fri 22:00-04:00", at(2, "03:00"), False),  # Monday morning: Sunday opened none
    ("Mon-Fri 22:00-04:00", at(0, "03:00"), True),  # Saturday morning: Friday's window
    ("Mon-Fri 22:00-04:00", at(0, "23:00"), False),
    ("Fri-Mon 10:00-11:00", at(1, "10:30"), True),  # a range across the week's end
    ("Fri-Mon 10:00-11:00", at(3, "10:30"), False),  # Tuesday
])
def test_is_open(text, when, open_):
    assert window.is_open(text, when) is open_


def test_empty_is_any_time():
    assert window.parse("") is None and window.is_open("", at(0, "12:00"))


@pytest.mark.parametrize("text,shown", [
    ("sat,sun 2:00-05:00", None),  # one-digit hour: refused
    ("sat,SUN 02:00-05:00", "Sat,Sun 02:00-05:00"),
    ("Mon-Sun 00:00-23:59", "00:00-23:59"),
])
def test_normal_form(text, shown):
    if shown is None:
        with pytest.raises(window.WindowError):
            window.parse(text)
    else:
        assert str(window.parse(text)) == shown
