"""Actions beside the passes (creates, deletes, job upkeep), tracked so that nothing they raise is lost.

A pass decides; actions carry decisions out against slow far ends, and must not hold the pass up. Each
action runs as a task the supervisor owns, keyed (by runner id, say) so that one runner never has two
actions at once and a pass can tell a runner with an action under way from one that needs a new one. An
exception an action did not handle is logged with its traceback, counted in `corral_action_errors_total`
by kind, and handed to the action's `on_error`, which records it where an operator looks (on the runner).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from enum import StrEnum
from typing import Any

from corral.metrics import ACTION_ERRORS
from corral.outages import log_unexpected
from corral.store.leases import LeaseLost

logger = logging.getLogger("corral.engine")


class ActionKind(StrEnum):
    CREATE = "create"
    DELETE = "delete"
    RETIRE = "retire"
    ORPHAN = "orphan"
    JOB_UPKEEP = "job_upkeep"
    POOL_CHECK = "pool_check"
    OBSERVE = "observe"
    PRUNE = "prune"
    JOB_TRACES = "job_traces"
    CACHE_VOLUMES = "cache_volumes"
    LEASES = "leases"
    SCALE_SET = "scale_set"
    RELOAD = "reload"
    LOOP = "loop"


ErrorHandler = Callable[[BaseException], Awaitable[None]]


class Supervisor:
    """Owns every action task; `drain` waits for them all."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._groups: dict[str, str] = {}

    def busy(self, key: str) -> bool:
        """Whether an action keyed `key` is under way."""
        return key in self._tasks

    def group_busy(self, group: str) -> bool:
        """Whether any action started in `group` (a pool) is under way."""
        return group in self._groups.values()

    def start(
        self,
        kind: ActionKind,
        key: str,
        action: Coroutine[Any, Any, object],
        on_error: ErrorHandler | None = None,
        *,
        group: str | None = None,
    ) -> bool:
        """Run `action` unless one keyed `key` is under way; True if it was started. `group` (the pool) lets
        a replica tell whether a pool it would hand over still has actions under way."""
        if key in self._tasks:
            action.close()
            return False
        task = asyncio.get_running_loop().create_task(self._supervise(kind, key, action, on_error), name=key)
        self._tasks[key] = task
        if group is not None:
            self._groups[key] = group

        def done(_: asyncio.Task[None]) -> None:
            self._tasks.pop(key, None)
            self._groups.pop(key, None)
            # A task cancelled before it first ran never awaited its action: closed here, it raises no
            # "coroutine was never awaited" warning (closing one that ran is a no-op).
            action.close()

        task.add_done_callback(done)
        return True

    async def _supervise(
        self, kind: ActionKind, key: str, action: Coroutine[Any, Any, object], on_error: ErrorHandler | None
    ) -> None:
        try:
            await action
        except asyncio.CancelledError:
            raise
        except LeaseLost as exc:
            # Not an error: the pool moved to another replica mid-action, and the database refused this one's
            # write. The new owner judges the runner from what is recorded.
            logger.info("%s action %s stopped: %s", kind.value, key, exc)
        except Exception as exc:
            log_unexpected(
                logger, "%s action %s failed unexpectedly", kind.value, key, counted=ACTION_ERRORS.labels(kind.value)
            )
            if on_error is not None:
                try:
                    await on_error(exc)
                except Exception:
                    log_unexpected(
                        logger,
                        "recording the failure of %s action %s failed too",
                        kind.value,
                        key,
                        counted=ACTION_ERRORS.labels(kind.value),
                    )

    @property
    def count(self) -> int:
        return len(self._tasks)

    async def drain(self) -> None:
        """Wait for every action under way, including ones they start.

        Only waits: a drain given up (a caller's timeout) leaves the actions running. `gather` would cancel
        them with it, and a create cancelled after its request left would leave a server no one recorded
        until the next look. Stopping them is `cancel`'s job.
        """
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    async def cancel(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
