"""An asyncio event loop on virtual time: when every task waits on a timer, the clock jumps to the next one.

`asyncio.sleep(30)`, `asyncio.timeout(5)` and `loop.call_later` then cost no wall-clock time, and a test can
assert exactly when something ran (`loop.time()` is the virtual second). The loop is a plain SelectorEventLoop
whose selector never blocks while a timer is pending: it polls the real selector (the loop's wake-up pipe, for
`call_soon_threadsafe`) and, when nothing is ready, advances the clock by the timeout the loop asked for,
instead of sleeping through it. With no timer pending at all, it blocks on the real selector, so a result
from a worker thread still arrives; but a unit that hands work to a thread while a timer is pending would see
time jump before the thread answers: such units are not for this loop.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.BaseSelector):
    """The real selector, polled; a wait for a timer advances the loop's clock instead of blocking."""

    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self.now = 0.0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            return self._real.select(None)
        self.now += timeout
        return []

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`loop.time()` starts at 0 and moves only when every task waits on a timer."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a fresh virtual-time loop."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)


def now() -> float:
    """The running loop's virtual time: the clock to give units that also wait on the loop's timers."""
    return asyncio.get_running_loop().time()
