"""The keyed work queue: one pass of a pool at a time, wakes folded together, failures retried not lost."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

from corral.engine.workers import KeyedWorkers, KeyStopped
from tests.unit import virtual_time


class Recorder:
    """A work function that notes how many passes of each key ran, and at most how many at once."""

    def __init__(self, requeue_after: float | None = None, failures: int = 0) -> None:
        self.runs: Counter[str] = Counter()
        self.running: Counter[str] = Counter()
        self.most_at_once = 0
        self.release = asyncio.Event()
        self.changed = asyncio.Event()
        self.requeue_after = requeue_after
        self.failures = failures

    async def work(self, key: str) -> float | None:
        self.running[key] += 1
        self.most_at_once = max(self.most_at_once, self.running[key])
        self.changed.set()
        try:
            await self.release.wait()
            self.runs[key] += 1
            if self.failures:
                self.failures -= 1
                raise RuntimeError("a bug in the pass")
            return self.requeue_after
        finally:
            self.running[key] -= 1
            self.changed.set()


async def until(recorder: Recorder, condition: Callable[[], bool], within: float = 5.0) -> None:
    """Wait (at most `within` s, virtual seconds on the virtual loop) until `condition` holds, looking again
    whenever the recorder sees something."""
    async with asyncio.timeout(within):
        while not condition():
            recorder.changed.clear()
            await recorder.changed.wait()


def test_a_burst_of_wakes_is_folded_and_never_runs_a_pool_twice_at_once() -> None:
    async def scenario() -> Recorder:
        recorder = Recorder()
        workers = KeyedWorkers(recorder.work, clock=virtual_time.now)
        workers.ensure(["small", "large"])
        await until(recorder, lambda: recorder.running["small"] == 1)
        for _ in range(1000):
            workers.wake("small")
        recorder.release.set()
        await workers.run_now("small")
        await workers.run_now("large")
        await workers.stop()
        return recorder

    recorder = virtual_time.run(scenario())
    assert recorder.most_at_once == 1, "a pool was reconciled by two coroutines at once"
    # small: its first pass and one more for the 1,000 wakes and run_now; large: its first, and run_now's own
    assert recorder.runs == {"small": 2, "large": 2}, "1,000 wakes during a pass fold into one more"


def test_a_pass_asks_to_run_again_and_does() -> None:
    async def scenario() -> tuple[Counter[str], float]:
        recorder = Recorder(requeue_after=10.0)
        recorder.release.set()
        workers = KeyedWorkers(recorder.work, clock=virtual_time.now)
        workers.ensure(["small"])
        await until(recorder, lambda: recorder.runs["small"] == 3, within=20.5)
        await workers.stop()
        return recorder.runs, virtual_time.now()

    assert virtual_time.run(scenario()) == ({"small": 3}, 20.0)


def test_a_pass_that_raises_is_tried_again_and_the_worker_survives(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> tuple[Counter[str], float]:
        recorder = Recorder(failures=1)
        recorder.release.set()
        workers = KeyedWorkers(recorder.work, clock=virtual_time.now)
        workers.ensure(["small"])
        await until(recorder, lambda: recorder.runs["small"] == 2)
        await workers.stop()
        return recorder.runs, virtual_time.now()

    assert virtual_time.run(scenario()) == ({"small": 2}, 1.0)
    assert [record.getMessage() for record in caplog.records] == ["reconciling pool small failed; trying again in 1s"]


def test_a_removed_key_stops_its_worker() -> None:
    async def scenario() -> tuple[Recorder, set[str]]:
        recorder = Recorder()
        recorder.release.set()
        workers = KeyedWorkers(recorder.work)
        workers.ensure(["small", "gone"])
        await workers.run_now("gone")
        workers.ensure(["small"])
        runs_before = recorder.runs["gone"]
        workers.wake("gone")
        await workers.run_now("small")
        keys = workers.keys
        await workers.stop()
        assert recorder.runs["gone"] == runs_before
        return recorder, keys

    _, keys = asyncio.run(scenario())
    assert keys == {"small"}


def test_run_now_returns_when_its_key_is_stopped_or_retired_mid_pass() -> None:
    """A drain or delete awaiting a pass is answered when the pool's worker ends first (issue 25, item 7)."""

    async def scenario() -> tuple[bool, bool, bool, bool]:
        recorder = Recorder()  # every pass holds until released: it never is
        workers = KeyedWorkers(recorder.work)
        workers.ensure(["retired", "stopped"])
        await until(recorder, lambda: recorder.running["retired"] == 1 and recorder.running["stopped"] == 1)
        retired = asyncio.ensure_future(workers.run_now("retired"))
        stopped = asyncio.ensure_future(workers.run_now("stopped"))
        await asyncio.sleep(0)  # both waiters are waiting on their keys' passes
        workers.ensure(["stopped"])  # "retired" loses its worker mid-pass (as a lease lost or a pool removed)
        await workers.stop()
        async with asyncio.timeout(5.0):
            outcomes = await asyncio.gather(retired, stopped)
        return outcomes[0], outcomes[1], await workers.run_now("retired"), recorder.release.is_set()

    assert asyncio.run(scenario()) == (False, False, False, False)


def test_run_now_returns_when_its_key_is_cancelled_before_its_worker_ever_ran() -> None:
    async def scenario() -> bool:
        workers = KeyedWorkers(Recorder().work)
        workers.ensure(["new"])
        waiter = asyncio.ensure_future(workers.run_now("new"))
        await asyncio.sleep(0)
        workers.ensure([])  # cancelled before its task first ran: its `finally` never runs
        async with asyncio.timeout(5.0):
            return await waiter

    assert asyncio.run(scenario()) is False


def test_an_action_on_a_key_waits_for_the_pass_under_way_and_holds_the_next_one() -> None:
    """An operator's action (a delete) runs in its pool's worker, never beside a pass (issue 25, item 8)."""

    async def scenario() -> list[str]:
        order: list[str] = []
        recorder = Recorder()
        workers = KeyedWorkers(recorder.work)
        workers.ensure(["small"])
        await until(recorder, lambda: recorder.running["small"] == 1)
        action_may_end = asyncio.Event()

        async def action() -> str:
            order.append(f"action while {recorder.running['small']} pass runs")
            workers.wake("small")  # due now, yet the pass waits for the action
            await action_may_end.wait()
            order.append(f"action ends while {recorder.running['small']} pass runs")
            return "done"

        called = asyncio.ensure_future(workers.call("small", action))
        await asyncio.sleep(0)
        assert workers.queued("small") == 1, "queued behind the pass under way"
        order.append("pass released")
        recorder.release.set()
        await until(recorder, lambda: recorder.runs["small"] == 1)
        await asyncio.sleep(0)
        action_may_end.set()
        async with asyncio.timeout(5.0):
            order.append(await called)
        await until(recorder, lambda: recorder.runs["small"] == 2)
        await workers.stop()
        return order

    assert asyncio.run(scenario()) == [
        "pass released",
        "action while 0 pass runs",
        "action ends while 0 pass runs",
        "done",
    ]


def test_an_action_raises_what_it_raised_and_one_on_a_stopped_key_says_why() -> None:
    async def scenario() -> tuple[str, str, str]:
        recorder = Recorder()
        recorder.release.set()
        workers = KeyedWorkers(recorder.work)
        workers.ensure(["small"])

        async def broken() -> None:
            raise ValueError("the action's own error")

        with pytest.raises(ValueError) as raised:
            await workers.call("small", broken)
        held = Recorder()
        blocked = KeyedWorkers(held.work)
        blocked.ensure(["busy"])
        await until(held, lambda: held.running["busy"] == 1)
        queued = asyncio.ensure_future(blocked.call("busy", broken))
        await asyncio.sleep(0)
        await blocked.stop()
        with pytest.raises(KeyStopped) as stopped:
            await queued
        with pytest.raises(KeyStopped) as missing:
            await workers.call("unknown", broken)
        await workers.stop()
        return str(raised.value), str(stopped.value), str(missing.value)

    assert asyncio.run(scenario()) == (
        "the action's own error",
        "pool busy is no longer reconciled by this corral (removed, moved or stopping)",
        "pool unknown is no longer reconciled by this corral (removed, moved or stopping)",
    )
