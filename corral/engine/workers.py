"""A keyed work queue with one worker per key: each pool is reconciled by exactly one coroutine.

A wake for a key (a webhook, a timer, the API, a config change) marks it due; wakes that arrive while the
key waits or runs fold into one more run, so a burst of a thousand webhooks costs a handful of passes, not a
thousand, and a pool is never reconciled by two coroutines at once. The work function returns when it
wants to run again (`requeue_after`, seconds) or None to wait for the next wake. This is the shape of
controller-runtime's work queue, specialised to a small, known set of keys.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from corral.metrics import WORKER_ERRORS

logger = logging.getLogger("corral.engine")

ERROR_RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)
"""How soon a key whose work raised is tried again: it backs off, and one success resets it."""

Work = Callable[[str], Awaitable[float | None]]


@dataclass
class _Key:
    """One key's schedule: when it is next due, and the events its waiters watch."""

    due: float | None = 0.0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    started: int = 0
    completed: int = 0
    errors: int = 0
    task: asyncio.Task[None] | None = None


class KeyedWorkers:
    """Runs `work(key)` for each key, one run at a time per key, whenever the key is woken or due."""

    def __init__(self, work: Work, clock: Callable[[], float] = time.monotonic) -> None:
        self._work = work
        self._clock = clock
        self._keys: dict[str, _Key] = {}
        self._stopping = False

    @property
    def keys(self) -> set[str]:
        return set(self._keys)

    def ensure(self, keys: Iterable[str]) -> None:
        """Start a worker for every key in `keys` that has none, and retire workers of keys not in it."""
        wanted = set(keys)
        for key in wanted - set(self._keys):
            state = _Key()
            state.wake.set()
            self._keys[key] = state
            state.task = asyncio.get_running_loop().create_task(self._loop(key, state), name=f"corral-pool-{key}")
        for key in set(self._keys) - wanted:
            state = self._keys.pop(key)
            # A worker retiring its own key ends after this run; any other is stopped now.
            if state.task is not None and state.task is not asyncio.current_task():
                state.task.cancel()

    def wake(self, key: str, after: float = 0.0) -> None:
        """Make `key` due in `after` seconds (or sooner, if it already is)."""
        state = self._keys.get(key)
        if state is None:
            return
        due = self._clock() + after
        if state.due is None or due < state.due:
            state.due = due
        state.wake.set()

    def wake_all(self) -> None:
        for key in self._keys:
            self.wake(key)

    async def run_now(self, key: str) -> None:
        """Wake `key` and wait until a run that started after this call has finished.

        Runs are numbered as they start; whether one is under way now (it started before this call) or
        not, the first run to start after this call is number `started + 1`.
        """
        state = self._keys.get(key)
        if state is None:
            return
        wanted = state.started + 1
        self.wake(key)
        while state.completed < wanted:
            state.finished.clear()
            await state.finished.wait()

    async def _loop(self, key: str, state: _Key) -> None:
        while not self._stopping and self._keys.get(key) is state:
            await self._wait_until_due(state)
            if self._keys.get(key) is not state:
                return
            state.due = None
            state.wake.clear()
            state.started += 1
            try:
                requeue_after = await self._work(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The work's own actions are supervised; this is a bug in the pass itself. Say so, count
                # it, and try again with backoff rather than losing the pool's worker.
                WORKER_ERRORS.labels(key).inc()
                retry = ERROR_RETRY_S[min(state.errors, len(ERROR_RETRY_S) - 1)]
                state.errors += 1
                logger.exception("reconciling pool %s failed; trying again in %.0fs", key, retry)
                requeue_after = retry
            else:
                state.errors = 0
            state.completed += 1
            state.finished.set()
            if requeue_after is not None and self._keys.get(key) is state:
                self.wake(key, requeue_after)

    async def _wait_until_due(self, state: _Key) -> None:
        while True:
            if state.due is not None:
                remaining = state.due - self._clock()
                if remaining <= 0:
                    return
                state.wake.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await state.wake.wait()
                except TimeoutError:
                    return
            else:
                state.wake.clear()
                await state.wake.wait()

    async def stop(self) -> None:
        self._stopping = True
        tasks = [state.task for state in self._keys.values() if state.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._keys.clear()
