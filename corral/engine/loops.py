"""The engine's periodic loops: each a task whose steps may fail without ending it, and whose own end on an
exception (a bug) is heard at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from corral.engine.supervisor import ActionKind
from corral.metrics import ACTION_ERRORS
from corral.outages import log_unexpected

logger = logging.getLogger("corral.engine")


def _loop_ended(task: asyncio.Task[None]) -> None:
    if task.cancelled() or task.exception() is None:
        return
    ACTION_ERRORS.labels(ActionKind.LOOP.value).inc()
    logger.error("%s ended unexpectedly; restart corral", task.get_name(), exc_info=task.exception())


def start_loop(loop: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """One of the engine's loops as a task. Each catches what its steps raise; should the loop itself end
    on an exception (a bug), that is logged and counted now, not found (or lost) when corral stops."""
    task = asyncio.create_task(loop, name=name)
    task.add_done_callback(_loop_ended)
    return task


async def every(
    stop: asyncio.Event,
    kind: ActionKind,
    action: Callable[[], Awaitable[object]],
    interval: Callable[[], float],
    sooner: asyncio.Event | None = None,
) -> None:
    """Run `action` every `interval()` seconds, or as soon as `sooner` is set; an exception is logged and
    counted, and the loop carries on. `stop` ends it between steps; a wait in progress ends when the task is
    cancelled, as `Engine.run` cancels its loops right after setting `stop`.

    The wait is one timer on one event: a loop that ticks every second (the pool checks) costs little even
    over the simulated days of `corral simulate` (with two waiter tasks a tick, four idle days took 41 s of
    CPU to simulate; with this, 34 s)."""
    wake = sooner or asyncio.Event()
    while not stop.is_set():
        wake.clear()
        try:
            await action()
        except asyncio.CancelledError:
            raise
        except Exception:
            log_unexpected(
                logger,
                "%s failed unexpectedly; trying again next time",
                kind.value,
                counted=ACTION_ERRORS.labels(kind.value),
            )
        if stop.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval()):
                await wake.wait()
