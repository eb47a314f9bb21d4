"""The engine's parts over virtual minutes: a looptime loop jumps to each next timer, and a LoopClock makes every
reading of time agree with it, so schedules are checked to the exact second without waiting for them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from corral.clock import LoopClock
from corral.config import CorralConfig, PoolConfig, parse_config
from corral.engine.backoff import Backoff, LogOnce
from corral.engine.loops import every, start_loop
from corral.engine.pauses import PoolPauses
from corral.engine.running import Running
from corral.engine.scalesets import ScaleSetListener, SessionState
from corral.engine.status import PoolSnapshot, StatusPublisher
from corral.engine.supervisor import ActionKind, Supervisor
from corral.github.client import GitHubClient
from corral.github.scaleset import ActionsService
from corral.store import Store, pools
from tests.unit import virtual_time

T = TypeVar("T")

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
"""The wall time at loop time 0."""

logger = logging.getLogger("test.virtual_time")


def virtual(main: Callable[[LoopClock], Coroutine[Any, Any, T]]) -> T:
    """Run `main` in a loop whose time starts at 0 and jumps to its next timer, with a clock reading it."""
    with asyncio.Runner(loop_factory=virtual_time.new_loop) as runner:
        return runner.run(main(LoopClock(START)))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    database = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    database.migrate()
    yield database
    database.close()


def config() -> CorralConfig:
    pool = {"scope": {"org": "octo-org"}, "labels": ["linux"], "image": "ubuntu", "flavor": "m1.small"}
    return parse_config({"github": {"token": "ghp_" + "Zq7" * 12}, "pools": {"small": pool}})


# -- Supervisor -----------------------------------------------------------------------------------------------


def test_an_action_failing_after_10s_is_busy_until_then_and_its_error_is_handed_on() -> None:
    async def main(clock: LoopClock) -> tuple[list[bool], list[tuple[str, float]]]:
        supervisor = Supervisor()
        errors: list[tuple[str, float]] = []

        async def create() -> None:
            await clock.sleep(10)
            raise ValueError("the cloud refused the flavor")

        async def on_error(exc: BaseException) -> None:
            errors.append((str(exc), clock.monotonic()))

        supervisor.start(ActionKind.CREATE, "runner-1", create(), on_error, group="small")
        busy = []
        for _ in range(3):
            busy.append(supervisor.busy("runner-1") and supervisor.group_busy("small"))
            await clock.sleep(6)
        return busy, errors

    assert virtual(main) == ([True, True, False], [("the cloud refused the flavor", 10.0)])


def test_a_second_action_on_a_busy_key_is_refused_until_the_first_is_done() -> None:
    async def main(clock: LoopClock) -> list[bool]:
        supervisor = Supervisor()

        async def action() -> None:
            await clock.sleep(30)

        started = [supervisor.start(ActionKind.DELETE, "runner-1", action())]
        await clock.sleep(29)
        started.append(supervisor.start(ActionKind.DELETE, "runner-1", action()))
        await clock.sleep(2)
        started.append(supervisor.start(ActionKind.DELETE, "runner-1", action()))
        await supervisor.drain()
        return started

    assert virtual(main) == [True, False, True]


# -- Backoff ----------------------------------------------------------------------------------------------------


def test_a_backoff_on_the_loop_clock_waits_1_2_4_and_ignores_failures_while_waiting() -> None:
    async def main(clock: LoopClock) -> list[tuple[float, float]]:
        backoff = Backoff(base_s=1.0, cap_s=60.0, clock=clock)
        seen = [(clock.monotonic(), backoff.failed())]
        await clock.sleep(0.5)
        seen.append((clock.monotonic(), backoff.failed()))  # an attempt started before the wait: no longer
        await clock.sleep(0.5)
        seen.append((clock.monotonic(), backoff.failed()))
        await clock.sleep(2)
        seen.append((clock.monotonic(), backoff.failed()))
        await clock.sleep(1)
        seen.append((clock.monotonic(), backoff.remaining_s))
        return seen

    assert virtual(main) == [(0.0, 1.0), (0.5, 0.5), (1.0, 2.0), (3.0, 4.0), (4.0, 3.0)]


# -- the scale-set listener -----------------------------------------------------------------------------------


def test_a_listener_whose_pool_is_gone_tries_again_after_1_2_4_and_8s(store: Store) -> None:
    async def main(clock: LoopClock) -> tuple[list[float], SessionState, datetime | None, str | None]:
        asked: list[float] = []

        class AskedPools(dict[str, PoolConfig]):
            """Notes when the listener looks its pool up: once per attempt."""

            def __getitem__(self, name: str) -> PoolConfig:
                asked.append(clock.monotonic())
                return super().__getitem__(name)

        loaded = config()  # has no pool "gone": every attempt fails before any call to GitHub
        settings = loaded.model_copy(update={"pools": AskedPools(loaded.pools)})
        github = GitHubClient(settings.github)
        service = ActionsService(github, loaded.pools["small"].scope)
        listener = ScaleSetListener(
            "gone",
            Running(settings),
            service,
            store,
            "replica-a",
            lambda pool: None,
            LogOnce(logger, clock=clock),
            clock,
        )
        task = asyncio.get_running_loop().create_task(listener.run())
        await clock.sleep(20)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await service.aclose()
        await github.aclose()
        return asked, listener.status.state, listener.status.error_since, listener.status.error

    asked, state, since, error = virtual(main)
    assert asked == [0.0, 1.0, 3.0, 7.0, 15.0]
    assert (state, since, error) == (SessionState.FAILING, START, "'gone'")


# -- PoolPauses -----------------------------------------------------------------------------------------------


def test_a_pool_failing_three_times_pauses_1_2_4s_and_records_each_end_by_the_clock(store: Store) -> None:
    async def main(clock: LoopClock) -> list[tuple[float, int, datetime | None]]:
        pauses = PoolPauses(store, LogOnce(logger), clock)
        seen = []
        for _ in range(3):
            wait = await pauses.failed("small")
            status = (await store.run(pools.statuses))["small"]
            seen.append((wait, status.create_failures, status.create_paused_until))
            await clock.sleep(wait)
        return seen

    assert virtual(main) == [
        (1.0, 1, START + timedelta(seconds=1)),
        (2.0, 2, START + timedelta(seconds=3)),
        (4.0, 3, START + timedelta(seconds=7)),
    ]


def test_a_pause_restored_by_a_new_holder_ends_when_the_row_said(store: Store) -> None:
    async def main(clock: LoopClock) -> tuple[float, float, float]:
        first = PoolPauses(store, LogOnce(logger), clock)
        for _ in range(4):  # 1, 2, 4, 8: the last pause ends at 15 s
            await clock.sleep(await first.failed("small"))
        await first.failed("small")  # at 15 s: paused until 31 s
        await clock.sleep(6)
        taker = PoolPauses(store, LogOnce(logger), clock)
        taker.restore(await store.run(pools.statuses), lambda pool: True)
        return clock.monotonic(), taker.remaining_s("small"), taker.failures("small")

    assert virtual(main) == (21.0, 10.0, 5)


# -- StatusPublisher ------------------------------------------------------------------------------------------


def test_a_pool_waiting_for_quota_says_so_again_every_100s_stamped_by_the_clock(store: Store) -> None:
    async def main(clock: LoopClock) -> list[datetime | None]:
        publisher = StatusPublisher(store, clock)
        stamps: list[datetime | None] = []
        while clock.monotonic() <= 300:  # a pass every 30 s for five minutes, the pool waiting throughout
            await publisher.publish(PoolSnapshot("small", quota_waiting=3), generation=1)
            stamp = (await store.run(pools.statuses))["small"].quota_waiting_at
            if stamp not in stamps:
                stamps.append(stamp)
            await clock.sleep(30)
        return stamps

    # Renewed at the first pass more than QUOTA_RENEWAL_S (100 s) after the last: 120 s, then 240 s.
    assert virtual(main) == [START, START + timedelta(seconds=120), START + timedelta(seconds=240)]


# -- the engine's periodic loops ------------------------------------------------------------------------------


def test_a_loop_runs_every_interval_at_once_when_woken_and_carries_on_past_an_error() -> None:
    """Every 10 s from 0; woken at 25 s it runs then and counts its next 10 s from there; its failing step at
    45 s is logged and counted, and the next comes at 55 s; stopped at 60 s, it runs no more."""

    async def main(clock: LoopClock) -> list[float]:
        stop, sooner, ran = asyncio.Event(), asyncio.Event(), []

        async def step() -> None:
            ran.append(clock.monotonic())
            if clock.monotonic() == 45:
                raise RuntimeError("a bug in one step")

        loop = start_loop(every(stop, ActionKind.PRUNE, step, lambda: 10.0, sooner), "test-loop")
        await asyncio.sleep(25)
        sooner.set()
        await asyncio.sleep(35)
        stop.set()
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        return ran

    assert virtual(main) == [0.0, 10.0, 20.0, 25.0, 35.0, 45.0, 55.0]
