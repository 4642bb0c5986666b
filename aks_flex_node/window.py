"""The upgrade window: when the agent may upgrade the kubelet on its own.

`upgrade_window` is empty (any time) or a daily window of the node's local time,
`HH:MM-HH:MM`, optionally after the days it opens on: `Sat,Sun 02:00-05:00`,
`Mon-Fri 22:00-04:00`. A window that ends before it starts crosses midnight and belongs to
the day it opens on (Sat 22:00-02:00 is open until Sunday 02:00), as AKS's planned
maintenance windows are read from their start (Learn, "Use Planned Maintenance to
schedule and control upgrades for your AKS cluster"). Stdlib only: the config checks use it.
"""

import datetime
import re
from dataclasses import dataclass

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
EXPECTED = ("empty (any time), or HH:MM-HH:MM of the node's local time, optionally after days: "
            "'02:00-05:00', 'Sat,Sun 02:00-05:00', 'Mon-Fri 22:00-04:00'")
_TIME = r"([01][0-9]|2[0-3]):([0-5][0-9])"
_WINDOW = re.compile(rf"^(?:(?P<days>[A-Za-z,-]+)\s+)?{_TIME}-{_TIME}$", re.ASCII)


class WindowError(ValueError):
    """`upgrade_window` is not a window; the message says what was expected."""


@dataclass(frozen=True)
class Window:
    days: frozenset  # 0 = Monday, as datetime.weekday()
    start: int  # minutes after midnight
    end: int

    def is_open(self, when):
        """Whether local time `when` (a datetime) is inside the window."""
        minute = when.hour * 60 + when.minute
        today, yesterday = when.weekday(), (when.weekday() - 1) % 7
        if self.start < self.end:
            return today in self.days and self.start <= minute < self.end
        # Across midnight: the evening part on an opening day, the morning part the day after.
        return ((today in self.days and minute >= self.start)
                or (yesterday in self.days and minute < self.end))

    def __str__(self):
        days = "" if len(self.days) == 7 else ",".join(DAYS[d].capitalize() for d in sorted(self.days)) + " "
        return f"{days}{self.start // 60:02d}:{self.start % 60:02d}-{self.end // 60:02d}:{self.end % 60:02d}"


def _days(text):
    chosen = set()
    for part in text.lower().split(","):
        first, sep, last = part.partition("-")
        if first not in DAYS or (sep and last not in DAYS):
            raise WindowError(f"{part!r} is not a day or a range of days (Mon, Tue, ... Sun; Mon-Fri)")
        a, b = DAYS.index(first), DAYS.index(last if sep else first)
        chosen.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
    return frozenset(chosen)


def parse(text):
    """A Window, or None for "" (any time); WindowError saying what is wrong otherwise."""
    text = text.strip()
    if not text:
        return None
    match = _WINDOW.match(text)
    if not match:
        raise WindowError(EXPECTED)
    days = _days(match.group("days")) if match.group("days") else frozenset(range(7))
    start = int(match.group(2)) * 60 + int(match.group(3))
    end = int(match.group(4)) * 60 + int(match.group(5))
    if start == end:
        raise WindowError("the window opens and closes at the same minute: " + EXPECTED)
    return Window(days, start, end)


def is_open(text, when=None):
    """Whether the window `text` (a valid upgrade_window) is open at `when` (now, local time)."""
    window = parse(text)
    return window is None or window.is_open(when or datetime.datetime.now())
