"""Warm runners that follow the clock: `min_idle` as a default plus windows opened by cron expressions.

A window opens at each time its cron expression names (in the schedule's time zone, so "8 o'clock on
weekdays" stays 8 o'clock across daylight saving) and stays open for its `duration`. While windows are open,
the largest of their `min_idle` is in force; otherwise the default. Pure: the engine asks with its clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

MAX_LOOKAHEAD = timedelta(days=366)
"""How far ahead the next change is looked for; a schedule whose windows never change within a year has none."""
MAX_STEPS = 2_000
"""Openings and closings stepped through looking for it (a window opening every minute makes many)."""


@dataclass(frozen=True)
class Window:
    cron: str
    duration: timedelta
    min_idle: int


@dataclass(frozen=True)
class InForce:
    """The `min_idle` in force at a moment, and when and to what it changes next (None: not within a year)."""

    min_idle: int
    next_change: datetime | None = None
    next_min_idle: int | None = None


def valid_cron(expression: str) -> bool:
    """Five fields (minute hour day-of-month month day-of-week); croniter's seconds and years are refused."""
    return len(expression.split()) == 5 and croniter.is_valid(expression)


def _opened(window: Window, now: datetime) -> datetime | None:
    """When the window last opened if it is open at `now` (an opening at `now` itself counts)."""
    start = croniter(window.cron, now + timedelta(seconds=1)).get_prev(datetime)
    return start if start <= now < start + window.duration else None


def value_at(default: int, windows: Sequence[Window], now: datetime) -> int:
    open_now = [window.min_idle for window in windows if _opened(window, now) is not None]
    return max(open_now, default=default)


def in_force(default: int, windows: Sequence[Window], timezone: str, now: datetime) -> InForce:
    """The value at `now`, and the next moment it changes: stepping from one opening or closing to the next
    until one moves the value (at most MAX_STEPS of them, within MAX_LOOKAHEAD)."""
    local = now.astimezone(ZoneInfo(timezone))
    current = value_at(default, windows, local)
    moment = local
    for _ in range(MAX_STEPS):
        moment = min(_next_edge(window, moment) for window in windows)
        if moment - local > MAX_LOOKAHEAD:
            break
        value = value_at(default, windows, moment)
        if value != current:
            return InForce(current, moment.astimezone(now.tzinfo), value)
    return InForce(current)


def _next_edge(window: Window, after: datetime) -> datetime:
    """The window's first opening or closing after `after`."""
    opening = croniter(window.cron, after).get_next(datetime)
    opened = _opened(window, after)
    closing = opened + window.duration if opened is not None else opening + window.duration
    return min(edge for edge in (opening, closing) if edge > after)
