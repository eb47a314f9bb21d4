"""Waiting on conditions, never on the clock: tests poll a predicate until it holds or time runs out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.02


def wait_until(probe: Callable[[], T | None], *, timeout: float = DEFAULT_TIMEOUT_S, what: str = "condition") -> T:
    """Return the first truthy value `probe()` gives; fail the test naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}; last value: {last!r}")


async def wait_until_async(
    probe: Callable[[], Awaitable[T | None]], *, within: float = DEFAULT_TIMEOUT_S, what: str = "condition"
) -> T:
    """`wait_until` inside an event loop: the loop's other tasks run between two probes."""
    deadline = time.monotonic() + within
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"timed out after {within:.1f}s waiting for {what}; last value: {last!r}")
