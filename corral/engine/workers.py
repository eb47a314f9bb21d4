"""A keyed work queue with one worker per key: each pool is reconciled by exactly one coroutine.

A wake for a key (a webhook, a timer, the API, a config change) marks it due; wakes that arrive while the
key waits or runs fold into one more run, so a burst of a thousand webhooks costs a handful of passes, not a
thousand, and a pool is never reconciled by two coroutines at once. The work function returns when it
wants to run again (`requeue_after`, seconds) or None to wait for the next wake. This is the shape of
controller-runtime's work queue, specialised to a small, known set of keys.

Operators' actions on a pool (`call`: a runner's delete) run in the same worker, between two passes, so
they never race a pass of their pool. Whoever waits on a key (`run_now`, `call`) is answered when its worker
ends too (the key retired, its lease lost, corral stopping): nobody waits for a run that will never come.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from corral.clock import SYSTEM_CLOCK, ClockLike, as_clock
from corral.metrics import WORKER_ERRORS
from corral.outages import log_unexpected

logger = logging.getLogger("corral.engine")

ERROR_RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)
"""How soon a key whose work raised is tried again: it backs off, and one success resets it."""

Work = Callable[[str], Awaitable[float | None]]
T = TypeVar("T")


class KeyStopped(Exception):
    """The key's worker ended (its pool retired, its lease lost, corral stopping) before an action queued
    on it ran: the action did not run, and will not."""

    def __init__(self, key: str) -> None:
        super().__init__(f"pool {key} is no longer reconciled by this corral (removed, moved or stopping)")
        self.key = key


def _answer(future: asyncio.Future[Any], *, result: object = None, error: BaseException | None = None) -> None:
    """Give a queued action's caller its outcome, unless the caller stopped waiting (cancelled)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@dataclass
class _Call:
    """An action queued on a key, and the future its caller awaits."""

    action: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any]


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
    calls: deque[_Call] = field(default_factory=deque)
    stopped: bool = False


class KeyedWorkers:
    """Runs `work(key)` for each key, one run at a time per key, whenever the key is woken or due."""

    def __init__(self, work: Work, clock: ClockLike = SYSTEM_CLOCK) -> None:
        self._work = work
        self._clock = as_clock(clock)
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
            # A worker retiring its own key ends after this run; any other is stopped now (a task cancelled
            # before it first ran never reaches its `finally`: its waiters are answered here).
            if state.task is not None and state.task is not asyncio.current_task():
                state.task.cancel()
                self._abandon(key, state)

    def wake(self, key: str, after: float = 0.0) -> None:
        """Make `key` due in `after` seconds (or sooner, if it already is)."""
        state = self._keys.get(key)
        if state is None:
            return
        due = self._clock.monotonic() + after
        if state.due is None or due < state.due:
            state.due = due
        state.wake.set()

    def wake_all(self) -> None:
        for key in self._keys:
            self.wake(key)

    def queued(self, key: str) -> int:
        """How many actions wait for `key`'s worker (`call`)."""
        state = self._keys.get(key)
        return len(state.calls) if state is not None else 0

    async def run_now(self, key: str) -> bool:
        """Wake `key` and wait until a run that started after this call has finished: True then, False
        when `key` has no worker or its worker ended first (retired, cancelled, stopped), never waiting on.

        Runs are numbered as they start; whether one is under way now (it started before this call) or
        not, the first run to start after this call is number `started + 1`.
        """
        state = self._keys.get(key)
        if state is None or state.stopped:
            return False
        wanted = state.started + 1
        self.wake(key)
        while state.completed < wanted:
            if state.stopped:
                return False
            state.finished.clear()
            await state.finished.wait()
        return True

    async def call(self, key: str, action: Callable[[], Awaitable[T]]) -> T:
        """Run `action` in `key`'s worker, between two passes (never beside one), and return what it returns
        or raise what it raises. Raises `KeyStopped` when `key` has no worker, or its worker ends before the
        action ran (or while it ran: it stopped part-way). An action must not wait for its own key
        (`run_now`, `call`): it would wait for itself."""
        state = self._keys.get(key)
        if state is None or state.stopped:
            raise KeyStopped(key)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        state.calls.append(_Call(action, future))
        state.wake.set()
        return await future

    async def _loop(self, key: str, state: _Key) -> None:
        try:
            while not self._stopping and self._keys.get(key) is state:
                due = await self._wait_until_due(state)
                if self._keys.get(key) is not state:
                    return
                await self._run_calls(key, state)
                if due:
                    await self._pass(key, state)
        finally:
            self._abandon(key, state)

    async def _pass(self, key: str, state: _Key) -> None:
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
            retry = ERROR_RETRY_S[min(state.errors, len(ERROR_RETRY_S) - 1)]
            state.errors += 1
            log_unexpected(
                logger,
                "reconciling pool %s failed; trying again in %.0fs",
                key,
                retry,
                counted=WORKER_ERRORS.labels(key),
            )
            requeue_after = retry
        else:
            state.errors = 0
        state.completed += 1
        state.finished.set()
        if requeue_after is not None and self._keys.get(key) is state:
            self.wake(key, requeue_after)

    @staticmethod
    async def _run_calls(key: str, state: _Key) -> None:
        """Run the actions queued on the key, oldest first; each one's outcome goes to its caller alone."""
        while state.calls:
            queued = state.calls.popleft()
            if queued.future.done():
                continue  # its caller gave up (cancelled)
            try:
                result = await queued.action()
            except asyncio.CancelledError:
                _answer(queued.future, error=KeyStopped(key))
                raise
            except Exception as exc:
                _answer(queued.future, error=exc)
            else:
                _answer(queued.future, result=result)

    @staticmethod
    def _abandon(key: str, state: _Key) -> None:
        """The key's worker ended: wake `run_now`'s waiters and fail the actions that will never run."""
        state.stopped = True
        state.finished.set()
        while state.calls:
            queued = state.calls.popleft()
            _answer(queued.future, error=KeyStopped(key))

    async def _wait_until_due(self, state: _Key) -> bool:
        """Wait until the key's pass is due (True) or an action is queued on it (False unless due too)."""
        while not state.calls:
            if state.due is not None:
                remaining = state.due - self._clock.monotonic()
                if remaining <= 0:
                    return True
                state.wake.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await state.wake.wait()
                except TimeoutError:
                    return True
            else:
                state.wake.clear()
                await state.wake.wait()
        return state.due is not None and state.due <= self._clock.monotonic()

    async def stop(self) -> None:
        self._stopping = True
        states = list(self._keys.items())
        tasks = [state.task for _, state in states if state.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for key, state in states:
            self._abandon(key, state)
        self._keys.clear()
