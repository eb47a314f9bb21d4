"""Operators' actions on a pool go through the pool's worker, the path the engine's own passes take (issue 25).

An operator's delete of a runner waits for the pass of its pool under way and holds the next one, so the pass
and the delete never judge and move the same runner at once.
"""

from __future__ import annotations

import asyncio

from corral.engine.operator import DeleteOutcome
from corral.model import Reason, RunnerState
from corral_sandbox.local import pool_spec
from tests.conftest import StartCorral
from tests.test_lifecycle import converge
from tests.waiting import wait_until

POOL = "small"


def test_an_operators_delete_waits_for_its_pools_worker(start_corral: StartCorral) -> None:
    corral = start_corral({POOL: pool_spec([POOL], min_idle=1)})
    idle = converge(corral, lambda: corral.runners(pool=POOL, states=[RunnerState.IDLE]), "a warm runner idle")[0]
    engine = corral.service.engine
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold_the_pool() -> None:
        """Stands for a pass of the pool under way: it holds the pool's worker until released."""
        holding.set()
        await release.wait()

    async def begin() -> tuple[asyncio.Task[None], asyncio.Task[DeleteOutcome]]:
        held = asyncio.create_task(engine.workers.call(POOL, hold_the_pool))
        await holding.wait()
        return held, asyncio.create_task(corral.service.operator.delete_runner(idle.id))

    held, deleting = corral.call(begin)
    # The delete reads the runner (a database call in a thread), then queues on the pool's worker, or, were it
    # to bypass the worker, is done with the runner.
    wait_until(lambda: engine.workers.queued(POOL) or deleting.done(), what="the delete queued or done")
    queued, while_held = engine.workers.queued(POOL), corral.runners(pool=POOL)

    async def end() -> DeleteOutcome:
        release.set()
        await held
        return await deleting

    outcome = corral.call(end)
    assert (queued, [(r.id, r.state) for r in while_held]) == (1, [(idle.id, RunnerState.IDLE)]), "it waited"
    operators = [(e.from_state, e.to_state, e.message) for e in corral.events(idle.id) if e.reason is Reason.OPERATOR]
    assert (outcome, operators) == (
        DeleteOutcome.DELETING,
        [(RunnerState.IDLE, RunnerState.DELETING, "deleted by an operator")],
    )
