"""When the keyed work queue runs a pool's passes (`engine.workers`), to the virtual second: requeues, the
backoff after a failing pass, wakes that bring a pass forward, and `run_now`'s answer."""

from __future__ import annotations

import asyncio

from corral.engine.workers import ERROR_RETRY_S, KeyedWorkers
from tests.unit import virtual_time


class Timed:
    """A work function noting the virtual second each pass of each key starts at; it stops after `passes`."""

    def __init__(self, *outcomes: float | Exception | None, passes: int, seconds: float = 0.0) -> None:
        self.outcomes = list(outcomes)
        self.passes = passes
        self.seconds = seconds
        self.started: list[float] = []
        self.enough = asyncio.Event()

    async def work(self, key: str) -> float | None:
        self.started.append(virtual_time.now())
        if len(self.started) >= self.passes:
            self.enough.set()
        if self.seconds:
            await asyncio.sleep(self.seconds)
        outcome = self.outcomes[min(len(self.started), len(self.outcomes)) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


async def run_until_enough(timed: Timed) -> list[float]:
    workers = KeyedWorkers(timed.work, clock=virtual_time.now)
    workers.ensure(["small"])
    await timed.enough.wait()
    await workers.stop()
    return timed.started


def test_a_pass_asking_to_run_again_in_30_s_runs_every_30_s_exactly() -> None:
    assert virtual_time.run(run_until_enough(Timed(30.0, passes=4))) == [0.0, 30.0, 60.0, 90.0]


def test_a_failing_pass_is_retried_after_1_2_5_10_30_then_30_s_and_one_success_resets_the_backoff() -> None:
    assert ERROR_RETRY_S == (1.0, 2.0, 5.0, 10.0, 30.0)
    bug = RuntimeError("a bug in the pass")
    timed = Timed(bug, bug, bug, bug, bug, bug, 5.0, bug, passes=9)
    assert virtual_time.run(run_until_enough(timed)) == [0.0, 1.0, 3.0, 8.0, 18.0, 48.0, 78.0, 83.0, 84.0]


def test_the_next_pass_is_due_when_the_pass_ends_plus_its_requeue() -> None:
    """A pass of 7 s asking for another in 30 s: they start at 0, 37 and 74 s."""
    assert virtual_time.run(run_until_enough(Timed(30.0, passes=3, seconds=7.0))) == [0.0, 37.0, 74.0]


def test_a_wake_sooner_than_the_requeue_brings_the_pass_forward_and_a_later_one_delays_nothing() -> None:
    async def scenario() -> list[float]:
        timed = Timed(60.0, passes=3)
        workers = KeyedWorkers(timed.work, clock=virtual_time.now)
        workers.ensure(["small"])
        await asyncio.sleep(10)
        workers.wake("small", after=5)  # due at 15 instead of 60
        await asyncio.sleep(10)
        workers.wake("small", after=100)  # at 20: later than 75, the pass stays at 75
        await timed.enough.wait()
        await workers.stop()
        return timed.started

    assert virtual_time.run(scenario()) == [0.0, 15.0, 75.0]


def test_a_pass_that_asks_for_no_requeue_waits_for_its_next_wake_however_long() -> None:
    async def scenario() -> tuple[list[float], list[float]]:
        timed = Timed(None, passes=2)
        workers = KeyedWorkers(timed.work, clock=virtual_time.now)
        workers.ensure(["small"])
        await asyncio.sleep(86_400)
        before = list(timed.started)
        workers.wake("small")
        await timed.enough.wait()
        await workers.stop()
        return before, timed.started

    assert virtual_time.run(scenario()) == ([0.0], [0.0, 86_400.0])


def test_run_now_during_a_pass_returns_when_the_next_pass_has_ended() -> None:
    """Passes of 7 s: `run_now` at 3 s waits for the pass that starts after it (7 s to 14 s), not the one under
    way, so an operator's change is seen by the pass it waited for."""

    async def scenario() -> tuple[bool, float, list[float]]:
        timed = Timed(None, passes=99, seconds=7.0)
        workers = KeyedWorkers(timed.work, clock=virtual_time.now)
        workers.ensure(["small"])
        await asyncio.sleep(3)
        ran = await workers.run_now("small")
        answered = virtual_time.now()
        await workers.stop()
        return ran, answered, timed.started

    assert virtual_time.run(scenario()) == (True, 14.0, [0.0, 7.0])


def test_wake_all_brings_every_key_forward_to_now() -> None:
    async def scenario() -> dict[str, list[float]]:
        started: dict[str, list[float]] = {"small": [], "big": []}

        async def work(key: str) -> float:
            started[key].append(virtual_time.now())
            return 600.0

        workers = KeyedWorkers(work, clock=virtual_time.now)
        workers.ensure(["small", "big"])
        await asyncio.sleep(42)
        workers.wake_all()
        await asyncio.sleep(1)
        await workers.stop()
        return started

    assert virtual_time.run(scenario()) == {"small": [0.0, 42.0], "big": [0.0, 42.0]}
