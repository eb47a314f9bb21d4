"""One simulation: corral's engine, unchanged, on a virtual-time loop against the simulated world.

The engine is the one `corral serve` runs (the same passes, planner, policies, schedules, quotas, placements,
fair share, backoffs and timers) with three things swapped: the clock is the loop's (`LoopClock`), whose time
jumps to the next timer whenever every task waits; the cloud and GitHub are `SimulatedCloud` and
`SimulatedGitHub`; and blocking calls run inline (`corral.executors.inline`) instead of in threads, so nothing
happens at a moment the machine chooses. The store is a SQLite file in a temporary folder, thrown away after.

The engine starts `lead` seconds before the trace's first job (warm runners boot meanwhile, as they would have
in a corral that was already running); jobs are queued at their `at`, each heard of through the same intake a
webhook takes; the simulation ends when every job routed to a pool has completed, or `drain` seconds after the
last job was queued, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import looptime

from corral.clock import LoopClock
from corral.cloud.clouds import CloudSet
from corral.config import CorralConfig
from corral.engine.coordinator import Engine
from corral.executors import inline
from corral.model import Delivery, JobState, JobUpdate
from corral.policy import match_pool
from corral.simulate.cloud import SimulatedCloud
from corral.simulate.github import SimulatedGitHub
from corral.simulate.settings import Settings
from corral.simulate.trace import Trace
from corral.simulate.world import Ledger, SimJob, World
from corral.store import IN_MEMORY, Intake, Store

DEFAULT_START = datetime(2026, 1, 5, tzinfo=UTC)
"""Where a trace of offsets starts: a Monday at midnight UTC (schedules read the time of day and week)."""


class SimulationRefused(ValueError):
    """The config asks for something `corral simulate` does not model; `problems` says what and the fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Outcome:
    """What a simulation saw: the world's ledger, with the loop time the trace started and the run ended."""

    ledger: Ledger
    origin: float
    """The loop time of the trace's first job (`at` 0)."""
    end: float
    pools: tuple[str, ...]
    cached_pools: tuple[str, ...] = ()
    """The pools with `cache_volumes`, whose servers' starts (warm, cold, none) the report counts."""


def refusals(config: CorralConfig) -> list[str]:
    """What in `config` the simulation cannot model, each with its fix."""
    return [
        f"pools.{name}.intake: scale_set pools are not simulated yet; simulate a copy of the config with "
        "`intake: webhook` (their runners are sized alike)"
        for name, pool in config.pools.items()
        if pool.intake == "scale_set"
    ]


def simulate(config: CorralConfig, trace: Trace, settings: Settings | None = None) -> Outcome:
    """Replay `trace` against `config` in virtual time and return what happened (with `Settings()`'s
    defaults when none are given)."""
    settings = settings or Settings()
    problems = refusals(config)
    if problems:
        raise SimulationRefused(problems)
    start = (trace.origin or DEFAULT_START) - timedelta(seconds=settings.lead)
    with _quiet_engine():
        # A throwaway store, in memory: nothing of it outlives the run, and a file's commits (a WAL write
        # each) were a sixth of a simulation's time.
        store = Store(IN_MEMORY, executors=inline)
        try:
            store.migrate()
            with asyncio.Runner(loop_factory=lambda: looptime.new_event_loop(start=0.0, noop_cycles=0)) as runner:
                return runner.run(_run(config, trace, settings, store, LoopClock(start)))
        finally:
            store.close()


async def _run(config: CorralConfig, trace: Trace, settings: Settings, store: Store, clock: LoopClock) -> Outcome:
    world = World(
        clock,
        boot=settings.boot,
        boot_by_pool=settings.boot_by_pool,
        boot_failure_rate=settings.boot_failure_rate,
        seed=settings.seed,
    )
    clouds = CloudSet(
        {name: SimulatedCloud(world, name, config.installation, settings.instances) for name in config.cloud_settings()}
    )
    engine = Engine(config, store, clouds, SimulatedGitHub(world), clock=clock, replica="simulate", executors=inline)
    intake = Intake(store, engine.recorded, config.tuning.intake_group, clock, runner_pool=engine.pool_of_runner)
    deliveries = itertools.count(1)
    pending: set[asyncio.Task[object]] = set()

    def deliver(job: SimJob, action: str) -> None:
        delivery = Delivery(
            id=f"00000000-0000-4000-8000-{next(deliveries):012d}",
            event="workflow_job",
            action=action,
            job=_update(job, action, world),
        )
        task = asyncio.get_running_loop().create_task(intake.record(delivery))
        pending.add(task)
        task.add_done_callback(pending.discard)

    world.deliver = deliver
    stop = asyncio.Event()
    serving = asyncio.get_running_loop().create_task(engine.run(stop))
    origin = clock.monotonic() + settings.lead
    for at, batch in itertools.groupby(trace.jobs, key=lambda job: job.at):
        await clock.sleep(origin + at - clock.monotonic())
        running = engine.config
        for job in batch:
            pool = match_pool(job.labels, job.repo, running.pools, running.default_pool)
            world.submit(job.repo, job.labels, job.duration, job.workflow_name, pool)
    if world.unfinished:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(settings.drain):
                await world.all_done.wait()
    end = clock.monotonic()
    stop.set()
    await serving
    await asyncio.gather(*pending, return_exceptions=True)
    cached = tuple(name for name, pool in config.pools.items() if pool.cache_volumes is not None)
    return Outcome(ledger=world.ledger, origin=origin, end=end, pools=tuple(config.pools), cached_pools=cached)


def _update(job: SimJob, action: str, world: World) -> JobUpdate:
    """The job as a `workflow_job` webhook of `action` tells it (GitHub's times, in the wall clock)."""
    status = {"queued": JobState.QUEUED, "in_progress": JobState.IN_PROGRESS}.get(action, JobState.COMPLETED)
    return JobUpdate(
        id=job.id,
        repository=job.repository,
        labels=job.labels,
        status=status,
        pool=job.pool,
        conclusion=job.conclusion if status is JobState.COMPLETED else None,
        run_id=job.run_id,
        runner_name=job.runner.name if job.runner is not None and status is not JobState.QUEUED else None,
        queued_at=world.wall(job.queued_at),
        started_at=world.wall(job.started_at) if job.started_at is not None else None,
        completed_at=world.wall(job.completed_at) if job.completed_at is not None else None,
        workflow=job.workflow,
    )


@contextlib.contextmanager
def _quiet_engine() -> Iterator[None]:
    """The engine's log lines are about simulated servers at virtual times: kept out of the user's terminal
    (warnings and errors still show, as they may say the config does something unintended)."""
    corral = logging.getLogger("corral")
    level = corral.level
    corral.setLevel(logging.WARNING)
    try:
        yield
    finally:
        corral.setLevel(level)
