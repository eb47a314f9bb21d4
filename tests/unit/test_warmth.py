"""`min_idle: {auto: ...}`: the forecast of warm runners from a pool's history, exact, in plain numbers."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import insert

from bench.counting import StatementCounter
from corral.engine.warmth import REFRESH_S, WarmForecaster
from corral.executors import inline
from corral.store import IN_MEMORY, Store, runners
from corral.store.schema import JOBS, RUNNERS
from corral.warmth import MIN_BOOTS, AutoWarm, forecast, plan_day

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


def test_a_matrix_that_has_come_is_one_arrival_to_the_last_15_minutes() -> None:
    """Its 20 jobs have taken cold boots already; keeping 20 warm for the next quarter hour would spare no job
    (a matrix comes at a moment nobody knows). A surge of separate jobs still counts, below."""
    matrix = [WEDNESDAY_9 - 60.0] * 20
    found = forecast(matrix, BOOTS_60, WEDNESDAY_9, AUTO)
    assert (found.wanted, found.recent_need, found.usual_need, found.window_s) == (1, 1, 0, 31.0)
    assert found.rate_per_minute == round(20 / 15, 2)


def test_yesterdays_matrix_at_this_time_is_warmed_for_today() -> None:
    """A matrix of 20 at 10:00 yesterday, nothing else: the n-th of its jobs needed n warm runners, and p95 of
    a day of 20 jobs leaves one to a cold boot. The matrix speaks for 9:30 to 10:45 (a fifth in each quarter
    hour), and the plan warms 20 from 9:30 to 10:30, then 15: of the fifth of the matrix that 10:30 holds,
    the jobs that needed 16 to 20 are the one job the day may leave cold."""
    history = [WEDNESDAY_9 - DAY + 3600.0] * 20
    plan = plan_day(history, WEDNESDAY_9 - 9 * 3600.0, 31.0, AUTO)
    assert {slot: plan[slot] for slot in range(36, 44)} == {36: 0, 37: 0, 38: 20, 39: 20, 40: 20, 41: 20, 42: 15, 43: 0}
    assert sum(plan) == 95
    found = forecast(history, BOOTS_60, WEDNESDAY_9 + 1800.0, AUTO)
    assert (found.wanted, found.recent_need, found.usual_need) == (20, 0, 20)
    assert "the plan for this time of day" in found.reason


def test_a_nights_few_jobs_are_left_to_cold_boots_when_the_day_can_afford_them() -> None:
    """Yesterday, a job every 30 s from 10:00 to 10:40 (80 jobs; each but the first needed 2 warm runners, itself
    and the one 30 s before) and 4 jobs at night, an hour apart. At p95 the day may leave 4.2 jobs cold: the
    night's 4 go cold and no runner waits for them all night. At p99 (0.84 cold) 3.2 of the night's jobs
    (each counted a fifth in the five quarter hours around it) must find a runner: the quarter hours two
    jobs speak for first (0.4 spared each), then ten of the others (0.2 each)."""
    day = [WEDNESDAY_9 - DAY + 3600.0 + 30.0 * index for index in range(80)]
    night = [WEDNESDAY_9 - DAY - 7 * 3600.0 + 3600.0 * index for index in range(4)]
    history = sorted(day + night)
    midnight = WEDNESDAY_9 - 9 * 3600.0
    at_p95 = plan_day(history, midnight, 31.0, AUTO)
    assert (at_p95[8], at_p95[41], sum(at_p95[:24])) == (0, 2, 0)
    at_p99 = plan_day(history, midnight, 31.0, AutoWarm(30.0, 99.0, 0, 40))
    assert (at_p99[8], at_p99[10], at_p99[41], sum(at_p99[:24])) == (1, 1, 2, 13)


def test_max_bounds_it_and_the_reason_says_so() -> None:
    surge = [WEDNESDAY_9 - 900.0 + 2.0 * index for index in range(450)]  # a job every 2 s: 16 in 31 s
    found = forecast(surge, BOOTS_60, WEDNESDAY_9, AutoWarm(30.0, 95.0, 0, 8))
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
    assert "the plan for this time of day" in found.reason


def test_a_weekend_says_nothing_of_a_weekday() -> None:
    """Monday 9:00: Sunday's and Saturday's bursts do not count; last Monday's does."""
    monday = datetime(2026, 12, 7, 9, 0, tzinfo=UTC).timestamp()
    weekend = [monday - DAY + 60.0] * 9 + [monday - 2 * DAY + 60.0] * 9
    assert forecast(weekend, BOOTS_60, monday, AUTO).wanted == 0
    last_monday = sorted([*weekend, *[monday - 7 * DAY + 60.0] * 4])
    assert forecast(last_monday, BOOTS_60, monday, AUTO).wanted == 4


def test_recent_days_weigh_more_than_older_ones() -> None:
    """Yesterday 1 job (weight 0.906), 13 days ago a matrix of 3 (weight 0.276 each, 0.827 in all). At p50 the
    plan may leave half the weighted jobs cold: the old matrix's second and third go cold, yesterday's job
    finds its runner. At p95 the matrix is warmed for too."""
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
    """Counted, not timed: the first forecast reads the jobs, the boots seen online and the boots timed by a
    job that waited (3 statements); the next ones within `REFRESH_S` read nothing; after it, 3 statements bring
    only the rows added since, none twice (a job heard at the same instant as the last one read included)."""
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
        assert (forecast_at(0), forecast_at(5)) == ((3, 3), (3, 0))
        add_jobs(store, now - timedelta(minutes=5), range(3, 4))  # heard at the instant the last read stopped
        add_jobs(store, now + timedelta(seconds=8), range(4, 6))
        add_boots(store, now + timedelta(seconds=8), 1, first=5)
        assert forecast_at(REFRESH_S) == (6, 3)
    finally:
        store.close()


def test_boots_are_timed_by_the_jobs_that_waited_for_them_once_there_are_enough() -> None:
    """Five runners booted in 60 s, but the pass that saw them online came 28 s later: timed to that pass, the
    boot is 88 s. Each ran a job that had waited for it, and started the moment it came online: timed by
    those jobs, 60 s. Four such jobs are too few (`MIN_BOOTS`), and the pass's timing is used meanwhile. Once
    there are five, the pass-timed boots are no longer read: a refresh costs 2 statements, not 3."""
    now = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    store = Store(IN_MEMORY, executors=inline)
    store.migrate()
    created = now - timedelta(minutes=10)
    rows = [{"id": f"r{index}", "pool": "small", "scope": "org:octo-org", "state": "done", "name": f"corral-{index}",
             "labels": ["small"], "created_at": created, "state_changed_at": created + timedelta(seconds=88),
             "registered_at": created + timedelta(seconds=88)} for index in range(5)]  # fmt: skip
    store.run_blocking(lambda connection: connection.execute(insert(RUNNERS), rows))

    def waited(ids: range) -> None:
        jobs = [{"id": index, "repository": "octo-org/app", "labels": ["small"], "status": "in_progress",
                 "pool": "small", "received_at": created, "queued_at": created, "runner_name": f"corral-{index}",
                 "started_at": created + timedelta(seconds=60)} for index in ids]  # fmt: skip
        store.run_blocking(lambda connection: connection.execute(insert(JOBS), jobs))

    try:
        waited(range(4))
        assert asyncio.run(WarmForecaster(store).forecast("small", AUTO, now)).boot_s == 88.0
        waited(range(4, 5))
        forecaster = WarmForecaster(store)
        assert asyncio.run(forecaster.forecast("small", AUTO, now)).boot_s == 60.0
        counter = StatementCounter(store.engine)
        with counter.counting():
            later = asyncio.run(forecaster.forecast("small", AUTO, now + timedelta(seconds=REFRESH_S)))
        assert (later.boot_s, counter.total) == (60.0, 2)
    finally:
        store.close()


def test_every_started_job_is_read_once_whether_or_not_it_timed_a_boot() -> None:
    """A job that waited for its runner times a boot; one that found its runner online, or ran on a runner of
    another pool (its labels fit both), times none, yet is read with the rest (None) so that the next read
    starts after it: a pool whose jobs mostly find warm runners was otherwise read again from its last job
    that waited, a little more each pass."""
    at = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    store = Store(IN_MEMORY, executors=inline)
    store.migrate()
    pools = {"r0": "small", "r1": "small", "r2": "large"}
    rows = [{"id": runner, "pool": pool, "scope": "org:octo-org", "state": "busy", "name": f"corral-{runner}",
             "labels": ["small"], "created_at": at, "state_changed_at": at}
            for runner, pool in pools.items()]  # fmt: skip
    # Job 0 waited 60 s for r0; job 1 found r1 online; job 2 waited for r2, which is of the pool large.
    queued = {0: at, 1: at + timedelta(seconds=90), 2: at}
    jobs = [{"id": job, "repository": "octo-org/app", "labels": ["small"], "status": "in_progress", "pool": "small",
             "received_at": queued[job], "queued_at": queued[job], "runner_name": f"corral-r{job}",
             "started_at": at + timedelta(seconds=60 + 30 * job)} for job in range(3)]  # fmt: skip
    store.run_blocking(
        lambda connection: (connection.execute(insert(RUNNERS), rows), connection.execute(insert(JOBS), jobs))
    )
    try:
        read = store.run_blocking(runners.waited_boots_since, "small", at)
        assert [(job, seconds) for job, _, seconds in read] == [(0, 60.0), (1, None), (2, None)]
    finally:
        store.close()
