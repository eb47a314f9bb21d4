"""The keyed work queue: one pass of a pool at a time, wakes folded together, failures retried not lost."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

from corral.engine.workers import KeyedWorkers


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


async def until(recorder: Recorder, condition: Callable[[], bool]) -> None:
    """Wait (at most 5 s) until `condition` holds, looking again whenever the recorder sees something."""
    async with asyncio.timeout(5.0):
        while not condition():
            recorder.changed.clear()
            await recorder.changed.wait()


def test_a_burst_of_wakes_is_folded_and_never_runs_a_pool_twice_at_once() -> None:
    async def scenario() -> Recorder:
        recorder = Recorder()
        workers = KeyedWorkers(recorder.work)
        workers.ensure(["small", "large"])
        await until(recorder, lambda: recorder.running["small"] == 1)
        for _ in range(1000):
            workers.wake("small")
        recorder.release.set()
        await workers.run_now("small")
        await workers.run_now("large")
        await workers.stop()
        return recorder

    recorder = asyncio.run(scenario())
    assert recorder.most_at_once == 1, "a pool was reconciled by two coroutines at once"
    assert 2 <= recorder.runs["small"] <= 3, f"1,000 wakes during a pass fold into one more: {recorder.runs}"
    assert recorder.runs["large"] >= 1


def test_a_pass_asks_to_run_again_and_does() -> None:
    async def scenario() -> Recorder:
        recorder = Recorder(requeue_after=0.01)
        recorder.release.set()
        workers = KeyedWorkers(recorder.work)
        workers.ensure(["small"])
        await until(recorder, lambda: recorder.runs["small"] >= 3)
        await workers.stop()
        return recorder

    assert asyncio.run(scenario()).runs["small"] >= 3


def test_a_pass_that_raises_is_tried_again_and_the_worker_survives(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> Recorder:
        recorder = Recorder(failures=1)
        recorder.release.set()
        workers = KeyedWorkers(recorder.work)
        workers.ensure(["small"])
        await until(recorder, lambda: recorder.runs["small"] >= 2)
        await workers.stop()
        return recorder

    recorder = asyncio.run(scenario())
    assert recorder.runs["small"] >= 2
    assert any("reconciling pool small failed" in record.getMessage() for record in caplog.records)


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
