"""What one job's story is told from (`engine.timeline`): the job, the runners started for it or that ran it
with their events (one read), and, while it waits, its pool's counts that can hold it back (another)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, and_, func, or_, select, tuple_

from corral.model import Job, JobState, PoolStatus, Runner, RunnerEvent, RunnerState
from corral.store import jobs, pools, scaleset_jobs
from corral.store.runners import CAPACITY, COLUMNS, events_of, to_runner
from corral.store.schema import JOBS, RUNNERS, one_of
from corral.store.schema import RUNNER_EVENTS as EVENTS


@dataclass(frozen=True)
class PoolFacts:
    """A queued job's pool, as the database has it."""

    status: PoolStatus | None = None
    runners: int = 0
    """Runners counting against `max_runners`."""
    repository_runners: int = 0
    """...of which registered at the job's repository."""
    last_error: str | None = None
    """The message of the pool's latest failed runner."""
    older_queued: int = 0


@dataclass(frozen=True)
class JobRecord:
    job: Job
    runners: list[Runner] = field(default_factory=list)
    """Started for the job, or the one that ran it; oldest first."""
    events: list[RunnerEvent] = field(default_factory=list)


def job_record(connection: Connection, job_id: int, *, scale_set: bool = False) -> JobRecord | None:
    """A job (`scale_set`: a scale-set job, by runner request id) with its runners and their events."""
    job = scaleset_jobs.get(connection, job_id) if scale_set else jobs.get(connection, job_id)
    if job is None:
        return None
    # A scale-set job's runner is whichever idle one GitHub handed it: only its name links them.
    return _with_runners(connection, [job], started_for=not scale_set)[0]


def _with_runners(connection: Connection, found: list[Job], *, started_for: bool = True) -> list[JobRecord]:
    """Each job with the runners that ran it (by name) or, `started_for`, were started for it, and their
    events, in order: two reads for them all."""
    ids = [job.id for job in found] if started_for else []
    names = [job.runner_name for job in found if job.runner_name]
    if not ids and not names:
        return [JobRecord(job) for job in found]
    mine = or_(RUNNERS.c.job_id.in_(ids), RUNNERS.c.name.in_(names))
    ordered = select(*COLUMNS).where(mine).order_by(RUNNERS.c.created_at)
    runners = [to_runner(row) for row in connection.execute(ordered)]
    events = events_of(connection, [runner.id for runner in runners]) if runners else []
    by_runner: dict[str, list[RunnerEvent]] = {}
    for event in events:
        by_runner.setdefault(event.runner_id, []).append(event)
    records = []
    for job in found:
        own = [
            runner
            for runner in runners
            if (started_for and runner.job_id == job.id) or (job.runner_name and runner.name == job.runner_name)
        ]
        records.append(JobRecord(job, own, [event for runner in own for event in by_runner.get(runner.id, [])]))
    return records


def pool_facts(connection: Connection, job: Job, pool: str) -> PoolFacts:
    """What of `pool` can hold a queued job back (the job's own pool, or the scale set it asks for)."""
    in_pool = and_(RUNNERS.c.pool == pool, one_of(RUNNERS.c.state, CAPACITY))
    count = select(func.count()).select_from(RUNNERS)
    failed = (
        select(EVENTS.c.message)
        .select_from(EVENTS.join(RUNNERS, RUNNERS.c.id == EVENTS.c.runner_id))
        .where(RUNNERS.c.pool == pool, EVENTS.c.to_state == RunnerState.FAILED.value)
        .order_by(EVENTS.c.id.desc())
        .limit(1)
    )
    queued_at = job.queued_at or job.received_at
    older = (
        select(func.count())
        .select_from(JOBS)
        .where(
            JOBS.c.status == JobState.QUEUED.value,
            JOBS.c.pool == pool,
            tuple_(JOBS.c.queued_at, JOBS.c.id) < tuple_(queued_at, job.id),
        )
    )
    return PoolFacts(
        status=pools.statuses(connection).get(pool),
        runners=int(connection.execute(count.where(in_pool)).scalar_one()),
        repository_runners=int(
            connection.execute(count.where(in_pool, RUNNERS.c.scope == f"repo:{job.repository}")).scalar_one()
        ),
        last_error=connection.execute(failed).scalar(),
        older_queued=int(connection.execute(older).scalar_one()),
    )


def completed_since(connection: Connection, after: tuple[datetime, int], *, limit: int) -> list[JobRecord]:
    """Jobs completed after `after` (GitHub's completion time, then the job id: a page's last), the earliest
    first, each with its runners and their events (three reads for a page): what `corral.tracing` sends."""
    query = (
        select(*jobs.COLUMNS)
        .where(
            JOBS.c.status == JobState.COMPLETED.value,
            JOBS.c.completed_at >= after[0],
            tuple_(JOBS.c.completed_at, JOBS.c.id) > tuple_(*after),
        )
        .order_by(JOBS.c.completed_at, JOBS.c.id)
        .limit(limit)
    )
    found = [jobs.to_job(row) for row in connection.execute(query)]
    return _with_runners(connection, found) if found else []
