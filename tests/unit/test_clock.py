"""The Clock: what the system clock, the loop clock and the adapter for bare functions read."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from corral.clock import SYSTEM_CLOCK, Clock, LoopClock, as_clock, utcnow
from corral.engine.backoff import Backoff
from corral.outages import DependencyHealth
from tests.unit import virtual_time

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def in_virtual_time(seconds: float, clock: LoopClock) -> tuple[float, datetime]:
    """Sleep `seconds` on `clock` in a loop whose time starts at 0 and jumps; the clock's readings after."""

    async def main() -> tuple[float, datetime]:
        await clock.sleep(seconds)
        return clock.monotonic(), clock.now()

    with asyncio.Runner(loop_factory=virtual_time.new_loop) as runner:
        return runner.run(main())


def test_the_system_clock_reads_aware_utc_between_two_system_readings() -> None:
    before = datetime.now(UTC)
    now = SYSTEM_CLOCK.now()
    after = datetime.now(UTC)
    assert now.tzinfo is UTC
    assert before <= now <= after


def test_the_system_clock_is_monotonic_time() -> None:
    before = time.monotonic()
    reading = SYSTEM_CLOCK.monotonic()
    assert before <= reading <= time.monotonic()


def test_utcnow_still_reads_the_system_clock_for_code_not_given_one() -> None:
    before = datetime.now(UTC)
    now = utcnow()
    assert now.tzinfo is UTC
    assert before <= now <= datetime.now(UTC)


def test_the_clocks_are_clocks_and_a_bare_function_is_not() -> None:
    assert isinstance(SYSTEM_CLOCK, Clock)
    assert isinstance(LoopClock(START), Clock)
    assert not isinstance(time.monotonic, Clock)


def test_a_loop_clock_refuses_a_naive_start() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        LoopClock(datetime(2026, 3, 1, 12, 0))


def test_a_loop_clock_keeps_its_start_in_utc() -> None:
    clock = LoopClock(datetime(2026, 3, 1, 13, 0, tzinfo=timezone(timedelta(hours=1))))
    assert clock.start == START
    assert clock.start.tzinfo is UTC


def test_an_hour_of_loop_clock_sleep_moves_monotonic_and_now_together() -> None:
    assert in_virtual_time(3600, LoopClock(START)) == (3600.0, START + timedelta(hours=1))


def test_a_loop_clock_counts_its_wall_time_from_its_origin() -> None:
    assert in_virtual_time(90, LoopClock(START, origin=30.0)) == (90.0, START + timedelta(seconds=60))


def test_a_worker_thread_reads_the_same_loop_time() -> None:
    clock = LoopClock(START)

    async def main() -> tuple[float, float, datetime]:
        await clock.sleep(42)
        in_thread = await asyncio.to_thread(clock.monotonic)
        return clock.monotonic(), in_thread, await asyncio.to_thread(clock.now)

    with asyncio.Runner(loop_factory=virtual_time.new_loop) as runner:
        assert runner.run(main()) == (42.0, 42.0, START + timedelta(seconds=42))


def test_a_clock_is_its_own_clock() -> None:
    clock = LoopClock(START)
    assert as_clock(clock) is clock
    assert as_clock(SYSTEM_CLOCK) is SYSTEM_CLOCK


def test_a_bare_monotonic_function_becomes_a_clock_on_the_system_wall() -> None:
    clock = as_clock(lambda: 5.0)
    before = datetime.now(UTC)
    assert clock.monotonic() == 5.0
    assert before <= clock.now() <= datetime.now(UTC)


def test_a_pinned_wall_replaces_the_clock_s_now_but_not_its_monotonic() -> None:
    pinned = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    clock = as_clock(lambda: 7.5, wall=lambda: pinned)
    assert (clock.monotonic(), clock.now()) == (7.5, pinned)


def test_a_backoff_given_a_bare_function_waits_as_before() -> None:
    now = [100.0]
    backoff = Backoff(base_s=1.0, cap_s=60.0, clock=lambda: now[0])
    waits = []
    for _ in range(4):
        waits.append(backoff.failed())
        now[0] = backoff.until
    assert waits == [1.0, 2.0, 4.0, 8.0]
    assert backoff.until == 115.0


def test_a_dependency_outage_is_dated_and_timed_by_its_clock(caplog: pytest.LogCaptureFixture) -> None:
    clock = LoopClock(START)
    caplog.set_level(logging.INFO, "corral.outages")

    async def main() -> datetime | None:
        health = DependencyHealth("cloud:test", "waits", clock=clock)
        await clock.sleep(5)
        health.failed(ConnectionError("refused"), began_at=clock.monotonic())
        down_since = health.down_since
        await clock.sleep(60)
        health.succeeded()
        return down_since

    with asyncio.Runner(loop_factory=virtual_time.new_loop) as runner:
        assert runner.run(main()) == START + timedelta(seconds=5)
    assert "cloud:test reachable again after 60.0s (unreachable since 2026-03-01T12:00:05+00:00)" in caplog.text
