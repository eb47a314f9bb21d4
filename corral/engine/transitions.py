"""Moving runners: every transition goes through the store (guarded, with its event) and is logged and counted.

A move that someone else beat us to (the runner is no longer in the state it was read in) is not an error:
their move stands, and the caller gets None.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from corral.clock import SYSTEM_CLOCK, Clock
from corral.metrics import RUNNER_FAILURES, RUNNER_SECONDS, RUNNER_TRANSITIONS
from corral.model import FAILURE_REASONS, CacheStart, Reason, Runner, RunnerState, Transition
from corral.store import Store, runners
from corral.store.leases import Fence
from corral.usage import PHASES

logger = logging.getLogger("corral.engine")

CAN_FAIL = frozenset(state for state in RunnerState if state.can_become(RunnerState.FAILED))


class Mover:
    """Applies transitions, logs each one with its fields, and counts it by pool, state and reason."""

    def __init__(
        self, store: Store, fence: Callable[[str], Fence | None] = lambda _: None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        """`clock`: what each transition and event is stamped by (the engine's)."""
        self._store = store
        self._fence = fence
        self._clock = clock

    async def apply(self, transitions: Sequence[Transition]) -> list[Runner | None]:
        """Apply a group of transitions in one transaction; None for each one someone else beat us to.

        Each carries its pool's fence: a replica that lost the pool's lease writes nothing (LeaseLost)."""
        if not transitions:
            return []
        fences = [self._fence(pool) for pool in sorted({move.runner.pool for move in transitions})]
        held = [fence for fence in fences if fence is not None]
        moved = await self._store.run(runners.apply, transitions, held, now=self._clock.now())
        for transition, result in zip(transitions, moved, strict=True):
            if result is None:
                logger.debug(
                    "runner %s: not moved to %s: it moved first", transition.runner.name, transition.target.value
                )
                continue
            self._record(transition, result)
        return moved

    async def move(
        self,
        runner: Runner,
        target: RunnerState,
        reason: Reason,
        message: str | None = None,
        *,
        server_id: str | None = None,
        image_id: str | None = None,
        github_runner_id: int | None = None,
        registered_at: datetime | None = None,
        cache: CacheStart | None = None,
        diverted_job: int | None = None,
    ) -> Runner | None:
        transition = Transition(
            runner,
            target,
            reason,
            message,
            server_id=server_id,
            image_id=image_id,
            github_runner_id=github_runner_id,
            registered_at=registered_at,
            cache=cache,
            diverted_job=diverted_job,
        )
        return (await self.apply([transition]))[0]

    async def fail(self, runner: Runner, reason: Reason, message: str) -> Runner | None:
        """Move a runner to `failed` from whatever state it has reached since it was read, if it still can."""
        if runner.state in CAN_FAIL:
            failed = await self.move(runner, RunnerState.FAILED, reason, message)
            if failed is not None:
                return failed
        current = await self._store.run(runners.get, runner.id)
        if current is None or current.state not in CAN_FAIL:
            return None
        return await self.move(current, RunnerState.FAILED, reason, message)

    async def mark_active(self, runner_ids: Sequence[str]) -> None:
        """Booting runners whose servers were seen ACTIVE: a step in their history, not a move."""
        await self._store.run(runners.mark_active, runner_ids, now=self._clock.now())

    async def note(self, runner: Runner, reason: Reason, message: str) -> None:
        """Record on the runner something that went wrong without moving it (its state stays as it was)."""
        await self._store.run(runners.note, runner, reason, message, now=self._clock.now())
        logger.warning(
            "runner %s (pool %s): %s: %s",
            runner.name,
            runner.pool,
            reason.value,
            message,
            extra={"runner": runner.name, "pool": runner.pool, "reason": reason.value, "detail": message},
        )

    @staticmethod
    def _record(transition: Transition, result: Runner) -> None:
        runner = transition.runner
        RUNNER_TRANSITIONS.labels(runner.pool, transition.target.value, transition.reason.value).inc()
        phase = PHASES.get(runner.state)
        if phase is not None:
            spent = (result.state_changed_at - runner.state_changed_at).total_seconds()
            RUNNER_SECONDS.labels(runner.pool, phase).inc(max(spent, 0.0))
        if transition.target is RunnerState.FAILED and transition.reason in FAILURE_REASONS:
            RUNNER_FAILURES.labels(runner.pool, transition.reason.value).inc()
        # Every move at INFO: a failure's warning comes once per pool and reason from the creator (with the
        # backoff it caused), so an outage does not log one warning per runner it fails.
        logger.info(
            "runner %s (pool %s): %s -> %s: %s%s",
            runner.name,
            runner.pool,
            runner.state.value,
            transition.target.value,
            transition.reason.value,
            f": {transition.message}" if transition.message else "",
            extra={
                "runner": runner.name,
                "pool": runner.pool,
                "from_state": runner.state.value,
                "to_state": transition.target.value,
                "reason": transition.reason.value,
                "detail": transition.message,
            },
        )


def log_new_runners(created: Sequence[Runner]) -> None:
    for runner in created:
        RUNNER_TRANSITIONS.labels(runner.pool, RunnerState.PENDING.value, runner.reason.value).inc()
        logger.info(
            "runner %s (pool %s): -> pending: %s%s",
            runner.name,
            runner.pool,
            runner.reason.value,
            f" (job {runner.job_id})" if runner.job_id is not None else "",
            extra={
                "runner": runner.name,
                "pool": runner.pool,
                "from_state": None,
                "to_state": RunnerState.PENDING.value,
                "reason": runner.reason.value,
            },
        )
