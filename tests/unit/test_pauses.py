"""Create backoffs (`engine.pauses`): which runner coming online ends a pause, in virtual time."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

from corral.engine.backoff import LogOnce
from corral.engine.pauses import PoolPauses
from corral.model import PoolStatus
from corral.store import Store, pools

START = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


class Clocks:
    """A monotonic clock and a wall clock that move together, only when told."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def monotonic(self) -> float:
        return self.elapsed

    def wall(self) -> datetime:
        return START + timedelta(seconds=self.elapsed)


def pauses(tmp_path: Path, clocks: Clocks) -> PoolPauses:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    return PoolPauses(store, LogOnce(logging.getLogger("test")), clocks.monotonic, wall_clock=clocks.wall)


async def status_rows(tmp_path: Path) -> dict[str, PoolStatus]:
    """The pools' status rows, as a replica taking pools over reads them."""
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    try:
        return await store.run(pools.statuses)
    finally:
        store.close()


def test_a_runner_booting_before_the_cloud_failed_the_pool_does_not_end_its_backoff(tmp_path: Path) -> None:
    """Nova put the fourth of four servers in ERROR for quota: the cloud backs off 600 s for the pool. The
    other three, created before, then come online: that says nothing of the quota, so east stays paused (it
    used to end the pause, and the next runner went to east and was refused)."""
    clocks = Clocks()
    paused = pauses(tmp_path, clocks)

    async def scenario() -> tuple[float, float, int]:
        booted_before = clocks.wall()
        clocks.elapsed = 20.0
        assert await paused.cloud_failed("small", "east", at_least_s=600.0) == 600.0
        clocks.elapsed = 25.0
        await paused.cloud_succeeded("small", "east", booted_before)
        still = paused.cloud_remaining_s("small", "east")
        created_after = clocks.wall()
        clocks.elapsed = 30.0
        await paused.cloud_succeeded("small", "east", created_after)
        return still, paused.cloud_remaining_s("small", "east"), paused.cloud_failures("small", "east")

    assert asyncio.run(scenario()) == (595.0, 0.0, 0)


def test_runners_created_beside_a_create_the_cloud_answered_500_end_the_pool_pause(tmp_path: Path) -> None:
    """Four creates at once, the cloud answering 500 to one (1 s pause): the three others come online and end
    it. (Ending it only for a runner created after the failure kept a busy pool with 20% of creates failing at
    the 60 s cap, and a replica served no job of it for a minute: every batch had a failed sibling.)"""
    clocks = Clocks()
    paused = pauses(tmp_path, clocks)

    async def scenario() -> list[tuple[bool, int, float]]:
        batch = clocks.wall()
        clocks.elapsed = 0.2
        assert await paused.failed("small") == 1.0
        clocks.elapsed = 0.4
        first = await paused.succeeded("small", batch)
        seen = [(first, paused.failures("small"), paused.remaining_s("small"))]
        seen.append((await paused.succeeded("small", batch), paused.failures("small"), paused.remaining_s("small")))
        return seen

    assert asyncio.run(scenario()) == [(True, 0, 0.0), (False, 0, 0.0)]


def test_a_pool_quota_wait_ends_only_for_a_runner_created_after_it_began(tmp_path: Path) -> None:
    """A create refused for quota at 1.5 s (at least 30 s): a runner created at 1 s, using the headroom that
    ran out, coming online at 2 s leaves the wait; one created at 3 s, after it, ends it at 40 s."""
    clocks = Clocks()
    paused = pauses(tmp_path, clocks)

    async def scenario() -> list[tuple[bool, int, float]]:
        seen = []
        clocks.elapsed = 1.0
        between = clocks.wall()
        clocks.elapsed = 1.5
        assert await paused.failed("small", at_least_s=30.0) == 30.0
        clocks.elapsed = 2.0
        seen.append((await paused.succeeded("small", between), paused.failures("small"), paused.remaining_s("small")))
        clocks.elapsed = 3.0
        after = clocks.wall()
        clocks.elapsed = 40.0
        seen.append((await paused.succeeded("small", after), paused.failures("small"), paused.remaining_s("small")))
        return seen

    assert asyncio.run(scenario()) == [(False, 1, 29.5), (True, 0, 0.0)]


def test_a_replica_taking_a_paused_pool_over_keeps_it_paused_for_exactly_what_was_left(tmp_path: Path) -> None:
    """The old holder saw three failures (1, 2, then 4 s pauses) and wrote the last pause; 1.5 s into it a new
    holder reads the status row: 2.5 s left, and its next failure doubles from three, to 8 s."""
    clocks = Clocks()
    old = pauses(tmp_path, clocks)

    async def scenario() -> tuple[float, int, float, float]:
        for at in (0.0, 1.0, 3.0):
            clocks.elapsed = at
            await old.failed("small")
        clocks.elapsed = 4.5
        new = pauses(tmp_path, clocks)
        new.restore(await status_rows(tmp_path), taken=lambda pool: pool == "small")
        remaining, failures = new.remaining_s("small"), new.failures("small")
        clocks.elapsed = 7.0
        return remaining, failures, new.remaining_s("small"), await new.failed("small")

    assert asyncio.run(scenario()) == (2.5, 3, 0.0, 8.0)


def test_a_cloud_backoff_survives_a_failover_and_a_runner_booting_before_it_ends_nothing(tmp_path: Path) -> None:
    clocks = Clocks()
    old = pauses(tmp_path, clocks)

    async def scenario() -> tuple[float, int, float, int]:
        booting = clocks.wall()
        assert await old.cloud_failed("small", "east", at_least_s=600.0) == 600.0
        clocks.elapsed = 100.0
        new = pauses(tmp_path, clocks)
        new.restore(await status_rows(tmp_path), taken=lambda pool: True)
        await new.cloud_succeeded("small", "east", booting)  # the old holder's runner: says nothing
        still = new.cloud_remaining_s("small", "east"), new.cloud_failures("small", "east")
        clocks.elapsed = 101.0
        await new.cloud_succeeded("small", "east", clocks.wall())
        return *still, new.cloud_remaining_s("small", "east"), new.cloud_failures("small", "east")

    assert asyncio.run(scenario()) == (500.0, 1, 0.0, 0)


def test_a_pool_not_taken_keeps_no_backoff_here(tmp_path: Path) -> None:
    clocks = Clocks()
    old = pauses(tmp_path, clocks)

    async def scenario() -> tuple[float, int]:
        await old.failed("small")
        new = pauses(tmp_path, clocks)
        new.restore(await status_rows(tmp_path), taken=lambda pool: False)
        return new.remaining_s("small"), new.failures("small")

    assert asyncio.run(scenario()) == (0.0, 0)
