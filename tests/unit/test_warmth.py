"""`min_idle: {auto: ...}`: the forecast of warm runners from a pool's history, exact, in plain numbers."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import insert

from bench.counting import StatementCounter
from corral.engine.warmth import REFRESH_S, WarmForecaster
from corral.executors import inline
from corral.store import IN_MEMORY, Store
from corral.store.schema import JOBS, RUNNERS
from corral.warmth import MIN_BOOTS, AutoWarm, forecast

WEDNESDAY_9 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC).timestamp()
DAY = 86_400.0
AUTO = AutoWarm(target_wait_s=30.0, percentile=95.0, minimum=0, maximum=40)
BOOTS_60 = [60.0] * 10
"""Ten boots of a minute: with a second for the replacement's create, the window a job must find a runner in is
60 + 1 - 30 = 31 s."""


def test_with_too_few_boots_measured_it_keeps_min_and_says_it_is_learning() -> None:
    found = forecast([WEDNESDAY_9 - 5.0] * 20, [60.0] * (MIN_BOOTS - 1), WEDNESDAY_9, AutoWarm(30.0, 95.0, 2, 40))
    assert (found.wanted, found.boot_s) == (2, None)
    assert found.reason == "learning: 4 boot(s) measured of the 5 needed; keeping min"


def test_boots_within_the_target_wait_need_no_warm_runner() -> None:
    found = forecast([WEDNESDAY_9 - 5.0] * 20, [20.0] * 10, WEDNESDAY_9, AUTO)
    assert (found.wanted, found.boot_s, found.window_s) == (0, 20.0, 0.0)
    assert "within the target wait" in found.reason


def test_a_matrix_of_20_jobs_in_one_second_needs_20_warm_runners() -> None:
    matrix = [WEDNESDAY_9 - 60.0] * 20
    found = forecast(matrix, BOOTS_60, WEDNESDAY_9, AUTO)
    assert (found.wanted, found.recent_need, found.usual_need, found.window_s) == (20, 20, 0, 31.0)
    assert found.rate_per_minute == round(20 / 15, 2)


def test_max_bounds_it_and_the_reason_says_so() -> None:
    found = forecast([WEDNESDAY_9 - 60.0] * 20, BOOTS_60, WEDNESDAY_9, AutoWarm(30.0, 95.0, 0, 8))
    assert found.wanted == 8 and found.reason.endswith("bounded to 8 by min 0 / max 8")


def test_a_job_every_10_s_needs_the_4_that_come_within_31_s() -> None:
    """Each job's 31 s holds itself and the three before it: the replacement for the job 30 s earlier is online
    61 s after that job, 31 s after this one, a second past the target."""
    steady = [WEDNESDAY_9 - 900.0 + 10.0 * index for index in range(90)]
    assert forecast(steady, BOOTS_60, WEDNESDAY_9, AUTO).wanted == 4


def test_a_job_every_15_s_needs_the_3_that_come_within_31_s() -> None:
    steady = [WEDNESDAY_9 - 900.0 + 15.0 * index for index in range(60)]
    assert forecast(steady, BOOTS_60, WEDNESDAY_9, AUTO).wanted == 3


def test_the_boot_time_is_taken_at_the_percentile() -> None:
    """Boots of 40 s but one in twenty of 100 s: the p95 boot is 40 s (19 of 20), the p99 100 s."""
    boots = [40.0] * 19 + [100.0]
    matrix = [WEDNESDAY_9 - 60.0] * 5
    assert forecast(matrix, boots, WEDNESDAY_9, AUTO).window_s == 11.0
    assert forecast(matrix, boots, WEDNESDAY_9, AutoWarm(30.0, 99.0, 0, 40)).window_s == 71.0


def test_yesterdays_ramp_at_this_time_is_warmed_for_before_it_comes() -> None:
    """Nothing queued in the last 15 minutes; yesterday, 10 minutes from now, 6 jobs came in one second."""
    yesterday = [WEDNESDAY_9 - DAY + 600.0] * 6
    found = forecast(yesterday, BOOTS_60, WEDNESDAY_9, AUTO)
    assert (found.wanted, found.recent_need, found.usual_need) == (6, 0, 6)
    assert "this time of day on recent days" in found.reason


def test_a_weekend_says_nothing_of_a_weekday() -> None:
    """Monday 9:00: Sunday's and Saturday's bursts do not count; last Monday's does."""
    monday = datetime(2026, 12, 7, 9, 0, tzinfo=UTC).timestamp()
    weekend = [monday - DAY + 60.0] * 9 + [monday - 2 * DAY + 60.0] * 9
    assert forecast(weekend, BOOTS_60, monday, AUTO).wanted == 0
    last_monday = sorted([*weekend, *[monday - 7 * DAY + 60.0] * 4])
    assert forecast(last_monday, BOOTS_60, monday, AUTO).wanted == 4


def test_recent_days_weigh_more_than_older_ones() -> None:
    """Yesterday 1 job (weight 0.906), 13 days ago a matrix of 3 (weight 0.276 each, 0.827 in all): at p50 the
    weighted need is yesterday's 1, at p95 the matrix's 3."""
    history = sorted([WEDNESDAY_9 - 13 * DAY + 60.0] * 3 + [WEDNESDAY_9 - DAY + 60.0])
    assert forecast(history, BOOTS_60, WEDNESDAY_9, AutoWarm(30.0, 50.0, 0, 40)).wanted == 1
    assert forecast(history, BOOTS_60, WEDNESDAY_9, AUTO).wanted == 3


def test_min_keeps_runners_warm_when_the_history_wants_none() -> None:
    assert forecast([], BOOTS_60, WEDNESDAY_9, AutoWarm(30.0, 95.0, 2, 40)).wanted == 2


# -- the engine's history of a pool: read once, then only what is new ------------------------------------


def add_jobs(store: Store, at: datetime, ids: range) -> None:
    rows = [{"id": job_id, "repository": "octo-org/app", "labels": ["small"], "status": "queued", "pool": "small",
             "received_at": at, "queued_at": at} for job_id in ids]  # fmt: skip
    store.run_blocking(lambda connection: connection.execute(insert(JOBS), rows))


def add_boots(store: Store, at: datetime, count: int, first: int = 0) -> None:
    rows = [{"id": f"r{first + index}", "pool": "small", "scope": "org:octo-org", "state": "idle",
             "name": f"corral-{first + index}", "labels": ["small"], "created_at": at - timedelta(seconds=60),
             "state_changed_at": at, "registered_at": at} for index in range(count)]  # fmt: skip
    store.run_blocking(lambda connection: connection.execute(insert(RUNNERS), rows))


def test_a_pools_history_is_read_once_then_only_what_the_store_gained_every_10_s() -> None:
    """Counted, not timed: the first forecast reads the jobs and the boots (2 statements); the next ones within
    `REFRESH_S` read nothing; after it, 2 statements bring only the rows added since, none twice (a job heard
    at the same instant as the last one read included)."""
    now = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    store = Store(IN_MEMORY, executors=inline)
    store.migrate()
    add_jobs(store, now - timedelta(minutes=5), range(3))
    add_boots(store, now - timedelta(minutes=5), 5)
    forecaster = WarmForecaster(store)
    counter = StatementCounter(store.engine)

    def forecast_at(seconds: float) -> tuple[int, int]:
        """Jobs of the last 15 minutes the forecast at `now + seconds` counted, and the statements it sent."""
        with counter.counting():
            found = asyncio.run(forecaster.forecast("small", AUTO, now + timedelta(seconds=seconds)))
        return found.recent_jobs, counter.total

    try:
        assert (forecast_at(0), forecast_at(5)) == ((3, 2), (3, 0))
        add_jobs(store, now - timedelta(minutes=5), range(3, 4))  # heard at the instant the last read stopped
        add_jobs(store, now + timedelta(seconds=8), range(4, 6))
        add_boots(store, now + timedelta(seconds=8), 1, first=5)
        assert forecast_at(REFRESH_S) == (6, 2)
    finally:
        store.close()
