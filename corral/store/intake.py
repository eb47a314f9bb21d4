"""Group commit for webhook intake: deliveries arriving together are recorded in one transaction.

Each caller waits for the commit of the group its delivery went into, so a 202 still means "recorded
durably"; while one group commits, the next one gathers. Under load a group holds hundreds of deliveries
and costs one commit; at rest it holds one and costs no extra wait (there is no timer).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from corral.clock import SYSTEM_CLOCK, Clock
from corral.model import Delivery, DeliveryOutcome, IntakeResult
from corral.outages import log_unexpected
from corral.store import jobs
from corral.store.database import Store

logger = logging.getLogger("corral.store")


class Intake:
    """Records deliveries in groups; `on_recorded` hears which pools the group woke."""

    def __init__(
        self,
        store: Store,
        on_recorded: Callable[[IntakeResult], None],
        group: int = 500,
        clock: Clock = SYSTEM_CLOCK,
        runner_pool: Callable[[str], str | None] = lambda _: None,
        held_elsewhere: Callable[[str], bool] = lambda _: False,
    ) -> None:
        """`group`: deliveries per transaction at most, which keeps one commit short even after a pause;
        `clock`: what a delivery's receipt is stamped by (the engine's); `runner_pool(name)`: the pool of a
        runner a job names, read from its name where it can be (None: the store looks it up);
        `held_elsewhere(pool)`: the pool's owner is another replica, woken by a NOTIFY in the group's own
        transaction (`jobs.record`)."""
        self._runner_pool = runner_pool
        self._held_elsewhere = held_elsewhere
        self._group = group
        self._clock = clock
        self._store = store
        self._on_recorded = on_recorded
        self._waiting: list[tuple[Delivery, asyncio.Future[DeliveryOutcome]]] = []
        self._committing: asyncio.Task[None] | None = None

    async def record(self, delivery: Delivery) -> DeliveryOutcome:
        """Record one delivery with whatever else arrives meanwhile; returns once it is committed."""
        outcome: asyncio.Future[DeliveryOutcome] = asyncio.get_running_loop().create_future()
        self._waiting.append((delivery, outcome))
        if self._committing is None or self._committing.done():
            self._committing = asyncio.get_running_loop().create_task(self._commit_groups())
        return await outcome

    async def _commit_groups(self) -> None:
        """Commit groups until nobody waits. Errors go to each waiting caller, never lost here."""
        while self._waiting:
            group, self._waiting = self._waiting[: self._group], self._waiting[self._group :]
            try:
                result: IntakeResult = await self._store.run(
                    jobs.record,
                    [delivery for delivery, _ in group],
                    now=self._clock.now(),
                    runner_pool=self._runner_pool,
                    held_elsewhere=self._held_elsewhere,
                )
            except Exception as exc:
                for _, outcome in group:
                    if not outcome.done():
                        outcome.set_exception(exc)
                continue
            for (_, outcome), answer in zip(group, result.outcomes, strict=True):
                if not outcome.done():
                    outcome.set_result(answer)
            if result.demand or result.news:
                try:
                    self._on_recorded(result)
                except Exception:
                    log_unexpected(
                        logger, "waking pools after recording webhooks failed; their next pass will see them"
                    )
