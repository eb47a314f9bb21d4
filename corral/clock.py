"""Time as a parameter: the one `Clock` corral's code reads, so a test can drive the same code in virtual time.

A `Clock` gives the wall time (`now`: timezone-aware UTC, as the store keeps every timestamp), a monotonic
reading for intervals (`monotonic`), and a way to wait (`sleep`). `SYSTEM_CLOCK` is the real one. `LoopClock`
reads the running asyncio loop's own time, and derives the wall time from it: under a loop whose time jumps
to its next timer (tests use `looptime`'s), timers, sleeps, `monotonic` and `now` all agree on one virtual
time, and minutes of the engine's life pass in milliseconds.

Parts that took a bare monotonic function before the Clock existed still accept one (`as_clock` wraps it), so
their callers keep working until they pass a Clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Where a part of corral reads time and waits for it."""

    def now(self) -> datetime:
        """The wall time, timezone-aware UTC: what is stored and compared with other replicas' stamps."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start, never going back: for intervals and deadlines."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""
        ...


class SystemClock:
    """The real clock: the system's UTC time, `time.monotonic` and `asyncio.sleep`."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()


class LoopClock:
    """The running asyncio loop's time: `monotonic` is `loop.time()`, `now` is `start` plus the loop time
    passed since `origin`, and `sleep` is the loop's own. Under a virtual-time loop every reading moves
    together with the timers, so what the code computes from one agrees with what it waits for."""

    def __init__(self, start: datetime, origin: float = 0.0, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """`loop`: the loop to read (by default the one running at the first reading, kept from then on, so
        that worker threads, which have no running loop, read the same time)."""
        if start.tzinfo is None:
            raise ValueError("a LoopClock starts at a timezone-aware time")
        self.start = start.astimezone(UTC)
        self.origin = origin
        self._loop = loop

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.monotonic() - self.origin)

    def monotonic(self) -> float:
        return self._bind().time()

    async def sleep(self, seconds: float) -> None:
        self._bind()
        await asyncio.sleep(seconds)

    def _bind(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop


class _Readings:
    """A Clock made of separate readings, for callers that still pass a bare monotonic (or wall) function."""

    def __init__(self, monotonic: Callable[[], float], wall: Callable[[], datetime], base: Clock) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._base = base

    def now(self) -> datetime:
        return self._wall()

    def monotonic(self) -> float:
        return self._monotonic()

    async def sleep(self, seconds: float) -> None:
        await self._base.sleep(seconds)


ClockLike = Clock | Callable[[], float]
"""A Clock, or (from callers not yet passing one) a bare monotonic function."""


def as_clock(clock: ClockLike, wall: Callable[[], datetime] | None = None) -> Clock:
    """`clock` as a Clock: a bare monotonic function reads the wall and sleeps as the system does; `wall`, when
    given, replaces the wall reading (callers that pinned the wall time separately)."""
    if isinstance(clock, Clock):
        if wall is None:
            return clock
        return _Readings(clock.monotonic, wall, clock)
    return _Readings(clock, wall or SYSTEM_CLOCK.now, SYSTEM_CLOCK)


def utcnow() -> datetime:
    """The system clock's wall time, for code not yet given a Clock."""
    return SYSTEM_CLOCK.now()
