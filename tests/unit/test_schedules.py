"""Warm runners that follow the clock (`schedules`): which `min_idle` is in force at a moment, and exactly when
it changes next, across weekends and daylight saving."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corral.schedules import InForce, Window, in_force, valid_cron, value_at

OFFICE = Window("0 8 * * 1-5", timedelta(hours=10), 3)
"""Three warm runners from 8 to 18 o'clock on weekdays."""
LUNCH_RUSH = Window("0 12 * * 1-5", timedelta(hours=1), 6)
NIGHT = Window("0 22 * * *", timedelta(hours=8), 0)


def utc(day: int, hour: int, minute: int = 0, month: int = 12) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        # Friday 4 December 2026; Berlin is UTC+1 in winter
        (utc(4, 6, 59), InForce(0, utc(4, 7), 3)),
        (utc(4, 7), InForce(3, utc(4, 17), 0)),  # an opening at the moment itself counts
        (utc(4, 9), InForce(3, utc(4, 17), 0)),
        (utc(4, 16, 59), InForce(3, utc(4, 17), 0)),
        (utc(4, 17), InForce(0, utc(7, 7), 3)),  # closed for the weekend: Monday 8 o'clock next
        (utc(5, 12), InForce(0, utc(7, 7), 3)),
        (utc(6, 23, 59), InForce(0, utc(7, 7), 3)),
    ],
)
def test_office_hours_in_berlin(now: datetime, expected: InForce) -> None:
    assert in_force(0, [OFFICE], "Europe/Berlin", now) == expected


def test_eight_oclock_stays_eight_oclock_in_summer_time() -> None:
    """Wednesday 1 July 2026: Berlin is UTC+2, so the window opens at 06:00 UTC, not 07:00."""
    assert in_force(0, [OFFICE], "Europe/Berlin", utc(1, 5, 30, month=7)) == InForce(0, utc(1, 6, month=7), 3)
    assert in_force(0, [OFFICE], "Europe/Berlin", utc(1, 6, month=7)) == InForce(3, utc(1, 16, month=7), 0)


def test_the_day_daylight_saving_ends_the_window_still_closes_at_18_local() -> None:
    """Monday 26 October 2026 is the first weekday after the clocks went back (25 October, 03:00 CEST): the
    window opening at 08:00 CET (07:00 UTC) closes ten hours later at 17:00 UTC."""
    assert in_force(0, [OFFICE], "Europe/Berlin", utc(23, 17, month=10)) == InForce(0, utc(26, 7, month=10), 3)
    assert in_force(0, [OFFICE], "Europe/Berlin", utc(26, 7, month=10)) == InForce(3, utc(26, 17, month=10), 0)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (utc(4, 10), InForce(3, utc(4, 12), 6)),
        (utc(4, 12), InForce(6, utc(4, 13), 3)),
        (utc(4, 12, 30), InForce(6, utc(4, 13), 3)),
        (utc(4, 13), InForce(3, utc(4, 18), 0)),
    ],
)
def test_while_windows_overlap_the_largest_min_idle_is_in_force(now: datetime, expected: InForce) -> None:
    assert in_force(0, [OFFICE, LUNCH_RUSH], "UTC", now) == expected


@pytest.mark.parametrize(("now", "value"), [(utc(4, 21, 59), 2), (utc(4, 22), 0), (utc(5, 5, 59), 0), (utc(5, 6), 2)])
def test_an_open_window_replaces_the_default_even_when_it_keeps_fewer_warm(now: datetime, value: int) -> None:
    assert value_at(2, [NIGHT], now) == value


def test_a_schedule_that_never_changes_the_value_names_no_next_change() -> None:
    assert in_force(1, [Window("0 8 * * *", timedelta(hours=1), 1)], "UTC", utc(4, 9)) == InForce(1)


def test_the_next_change_is_given_in_the_time_zone_it_was_asked_in() -> None:
    result = in_force(0, [OFFICE], "Europe/Berlin", utc(4, 9))
    assert result.next_change is not None and result.next_change.tzinfo is UTC


@pytest.mark.parametrize(
    ("expression", "valid"),
    [
        ("0 8 * * 1-5", True),
        ("*/5 * * * *", True),
        ("30 6 1 1 *", True),
        ("0 8 * *", False),
        ("0 8 * * 1-5 2027", False),
        ("0 0 8 * * 1-5", False),
        ("61 8 * * *", False),
        ("@daily", False),
        ("", False),
    ],
)
def test_cron_expressions_have_exactly_five_valid_fields(expression: str, valid: bool) -> None:
    assert valid_cron(expression) is valid
