"""Running a unit on virtual time: the `looptime` library's event loop, whose clock jumps to the next timer
whenever every task waits on one.

`asyncio.sleep(30)`, `asyncio.timeout(5)` and `loop.call_later` then cost no wall-clock time, and a test can
assert exactly when something ran (`loop.time()` is the virtual second, starting at 0). A unit that also reads
wall time takes `corral.clock.LoopClock`, which moves with the loop. The guard in conftest.py lets a test sleep
on this loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import looptime

T = TypeVar("T")


def new_loop() -> asyncio.AbstractEventLoop:
    """A fresh event loop on virtual time, at 0."""
    return looptime.new_event_loop(start=0.0)


def is_virtual(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether `loop` runs on virtual time (a sleep on it costs nothing)."""
    return isinstance(loop, looptime.LoopTimeEventLoop)


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a fresh virtual-time loop."""
    with asyncio.Runner(loop_factory=new_loop) as runner:
        return runner.run(main)


def now() -> float:
    """The running loop's virtual time: the clock to give units that also wait on the loop's timers."""
    return asyncio.get_running_loop().time()
