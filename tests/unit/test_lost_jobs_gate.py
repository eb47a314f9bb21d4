"""`engine.reruns.LostJobs`: job upkeep runs every time a runner finishes a job, and lost jobs are rare, so the
store is asked for them only when one may be there: at start, when this corral's judge lost one, while one waits
on GitHub, and once a minute for those another replica lost. Counted in SQL statements, in virtual time."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from sqlalchemy import Connection, update

from bench.counting import StatementCounter
from corral.clock import LoopClock
from corral.config import CorralConfig, ScopeConfig, parse_config
from corral.engine.backoff import LogOnce
from corral.engine.reruns import LOST_JOBS_RECHECK_S, LostJobs
from corral.model import Delivery, JobState, JobUpdate
from corral.simulate.github import SimulatedGitHub
from corral.simulate.settings import BootTimes
from corral.simulate.world import World
from corral.store import Store, jobs
from corral.store.schema import JOBS
from tests.unit import virtual_time

START = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
CONFIG: CorralConfig = parse_config(
    {
        "github": {"token": "ghp_" + "Zq7" * 12},
        "installation": "corral",
        "pools": {"small": {"scope": {"org": "octo"}, "image": "ubuntu", "flavor": "m1.small", "labels": ["small"]}},
    }
)


async def lose(store: Store, job_id: int) -> None:
    """A running job of pool `small` (whose `rerun_lost_jobs` is 0), marked lost as the judge marks it."""
    job = JobUpdate(id=job_id, repository="octo/app", labels=("small",), status=JobState.IN_PROGRESS, pool="small")
    await store.run(jobs.record, [Delivery(f"d-{job_id}", "workflow_job", "in_progress", job)], now=START)

    def mark(connection: Connection) -> None:
        connection.execute(update(JOBS).where(JOBS.c.id == job_id).values(lost_at=START, lost_reason="host failed"))

    await store.run(mark)


def test_the_store_is_asked_for_lost_jobs_at_start_when_one_is_heard_of_and_once_a_minute_otherwise(
    store: Store,
) -> None:
    counter = StatementCounter(store.engine)

    async def rounds() -> list[int]:
        clock = LoopClock(START)
        lost = LostJobs(
            store,
            SimulatedGitHub(World(clock, boot=BootTimes(60.0))),
            LogOnce(logging.getLogger("test")),
            clock,
            lambda config, pool, repository: ScopeConfig(org="octo"),
        )
        statements: list[int] = []

        async def one_round() -> None:
            with counter.counting():
                await lost.decide(CONFIG)
            statements.append(counter.total)

        await one_round()  # at start: whatever a previous life left undecided
        await one_round()  # a runner finished a job a moment later: nothing is asked
        await asyncio.sleep(LOST_JOBS_RECHECK_S - 1)
        await one_round()
        await lose(store, 7)  # lost by another replica's judge: this corral hears nothing
        await asyncio.sleep(1)
        await one_round()  # the minute is up: found, decided (its pool re-runs none)
        await lose(store, 8)
        lost.heard()  # lost by this corral's judge
        await one_round()
        await one_round()
        return statements

    assert virtual_time.run(rounds()) == [1, 0, 0, 2, 2, 0]
    decided = {job.id: job.rerun for job in store.run_blocking(jobs.listing, limit=10)}
    assert decided == {7: "off", 8: "off"}
