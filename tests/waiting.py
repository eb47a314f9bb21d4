"""Waiting on conditions, never on the clock: tests poll a predicate until it holds or time runs out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.02
"""How soon a condition is asked again at first: a wait of a second notices within 20 ms."""
POLL_SHARE = 0.05
"""Then every 5% of the time waited so far: a condition that held after `t` seconds is noticed by `1.05 t`."""
POLL_MAX_S = 0.5
"""And never less often than this.

Each probe is an HTTP request the sandbox answers in the test's own process, on two cores shared by six
workers: polling every 20 ms throughout, the fidelity test's two-minute wait alone asked the sandbox 6,000
times (19 CPU-s, the test's whole CPU). Asked in proportion to the time waited, a wait of `t` seconds costs
about 50 + 20 ln(t) probes, and finishes no more than 5% (at most 0.5 s) after its condition held."""


def poll_delay(waited_s: float) -> float:
    """How long to sleep before asking again, having waited `waited_s` seconds so far."""
    return min(POLL_MAX_S, max(POLL_INTERVAL_S, waited_s * POLL_SHARE))


def wait_until(probe: Callable[[], T | None], *, timeout: float = DEFAULT_TIMEOUT_S, what: str = "condition") -> T:
    """Return the first truthy value `probe()` gives; fail the test naming `what` after `timeout`."""
    started = time.monotonic()
    deadline = started + timeout
    last: T | None = None
    while (now := time.monotonic()) < deadline:
        last = probe()
        if last:
            return last
        time.sleep(min(poll_delay(now - started), max(0.0, deadline - time.monotonic())))
    raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}; last value: {last!r}")


async def wait_until_async(
    probe: Callable[[], Awaitable[T | None]], *, within: float = DEFAULT_TIMEOUT_S, what: str = "condition"
) -> T:
    """`wait_until` inside an event loop: the loop's other tasks run between two probes."""
    started = time.monotonic()
    deadline = started + within
    last: T | None = None
    while (now := time.monotonic()) < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(min(poll_delay(now - started), max(0.0, deadline - time.monotonic())))
    raise AssertionError(f"timed out after {within:.1f}s waiting for {what}; last value: {last!r}")
