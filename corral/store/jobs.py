"""Job and delivery queries: webhook intake in groups, demand, and what to ask GitHub about.

Intake records many deliveries in one transaction (group commit): each delivery is recorded once (GitHub's
retries and redeliveries reuse its id), and a job never moves backwards (`completed` that arrives before
`queued` stays completed), whatever order the deliveries of one group arrive in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, bindparam, case, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from corral.model import Delivery, DeliveryOutcome, IntakeResult, Job, JobState, JobUpdate, QueuedJob, RunnerState
from corral.store.leases import notify_wake
from corral.store.schema import DELIVERIES, JOBS, RUNNERS, one_of

COLUMNS = (
    JOBS.c.id,
    JOBS.c.repository,
    JOBS.c.labels,
    JOBS.c.status,
    JOBS.c.pool,
    JOBS.c.received_at,
    JOBS.c.conclusion,
    JOBS.c.run_id,
    JOBS.c.runner_name,
    JOBS.c.queued_at,
    JOBS.c.started_at,
    JOBS.c.completed_at,
    JOBS.c.runners_started,
    JOBS.c.runners_diverted,
    JOBS.c.diverted_at,
    JOBS.c.checked_at,
    JOBS.c.maybe_taken_at,
    JOBS.c.source,
    JOBS.c.workflow,
    JOBS.c.name,
    JOBS.c.run_attempt,
    JOBS.c.lost_at,
    JOBS.c.lost_reason,
    JOBS.c.rerun,
    JOBS.c.rerun_at,
)
IN_CLAUSE_CHUNK = 500
ENDED_RUNNER_STATES = (RunnerState.FINISHED, RunnerState.FAILED, RunnerState.DELETING, RunnerState.DELETED)
"""A runner in one of these has left its job, if it had one: a job still running on it is asked about."""


def to_job(row: Any) -> Job:
    return Job(
        id=row[0],
        repository=row[1],
        labels=tuple(row[2] or ()),
        status=JobState(row[3]),
        pool=row[4],
        received_at=row[5],
        conclusion=row[6],
        run_id=row[7],
        runner_name=row[8],
        queued_at=row[9],
        started_at=row[10],
        completed_at=row[11],
        runners_started=row[12] or 0,
        runners_diverted=row[13] or 0,
        diverted_at=row[14],
        checked_at=row[15],
        maybe_taken_at=row[16],
        source=row[17],
        workflow=row[18],
        name=row[19],
        run_attempt=row[20],
        lost_at=row[21],
        lost_reason=row[22],
        rerun=row[23],
        rerun_at=row[24],
    )


def state_rank(status: Any) -> Any:
    """A status column's `JobState.rank`, in SQL: what keeps a job from moving backwards."""
    return case(
        (status == JobState.QUEUED.value, JobState.QUEUED.rank),
        (status == JobState.IN_PROGRESS.value, JobState.IN_PROGRESS.rank),
        else_=JobState.COMPLETED.rank,
    )


def _merge(old: JobUpdate, new: JobUpdate) -> JobUpdate:
    """Two updates of one job in one group, as one: the later wins unless it would move the job backwards."""
    if new.status.rank < old.status.rank:
        new, old = old, new
    return replace(
        new,
        conclusion=new.conclusion if new.conclusion is not None else old.conclusion,
        run_id=new.run_id or old.run_id,
        runner_name=new.runner_name or old.runner_name,
        queued_at=new.queued_at or old.queued_at,
        started_at=new.started_at or old.started_at,
        completed_at=new.completed_at or old.completed_at,
        pool=new.pool if new.pool is not None else old.pool,
        workflow=new.workflow or old.workflow,
    )


@functools.cache
def _upsert_statement(dialect_name: str) -> Any:
    """INSERT ... ON CONFLICT DO UPDATE that never moves a job backwards: built once per dialect (building
    one costs more CPU than running it)."""
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    statement = dialect.insert(JOBS)
    excluded = statement.excluded
    keep_if_null = (
        "conclusion",
        "run_id",
        "runner_name",
        "queued_at",
        "started_at",
        "completed_at",
        "pool",
        "workflow",
        "name",
        "run_attempt",
    )
    return statement.on_conflict_do_update(
        index_elements=[JOBS.c.id],
        set_={
            "status": excluded.status,
            "labels": excluded.labels,
            "repository": excluded.repository,
            **{key: func.coalesce(excluded[key], JOBS.c[key]) for key in keep_if_null},
            # How corral first heard of the job stays; `received_at` likewise (not in the update at all).
            "source": func.coalesce(JOBS.c.source, excluded.source),
        },
        where=state_rank(excluded.status) >= state_rank(JOBS.c.status),
    )


def source_of(delivery: Delivery) -> str:
    """How a delivery told corral of a job, as the timeline shows it (`webhook:<delivery id>`, `poll`)."""
    if delivery.event == "workflow_job":
        return f"webhook:{delivery.id}" if delivery.id else "webhook"
    return delivery.event


def _upsert(connection: Connection, updates: Sequence[JobUpdate], sources: dict[int, str], now: datetime) -> None:
    """Insert new jobs and move known ones forward, never backwards, in one statement per job."""
    connection.execute(
        _upsert_statement(connection.dialect.name),
        [
            {
                "id": job.id,
                "repository": job.repository,
                "labels": list(job.labels),
                "status": job.status.value,
                "conclusion": job.conclusion,
                "pool": job.pool,
                "run_id": job.run_id,
                "runner_name": job.runner_name,
                "queued_at": job.queued_at,
                "started_at": job.started_at if job.status is not JobState.QUEUED else None,
                "completed_at": job.completed_at,
                "received_at": now,
                "source": sources.get(job.id),
                "workflow": job.workflow,
                "name": job.name,
                "run_attempt": job.run_attempt,
                "runners_started": 0,
                "runners_diverted": 0,
            }
            for job in updates
        ],
    )


@functools.cache
def _new_deliveries_statement(dialect_name: str) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING RETURNING id, built once per dialect: one statement both records the
    new deliveries and says which were new (a known id returns nothing), where a look-up and an insert were
    two. Two replicas taking the same delivery at once: one records it, the other sees it known."""
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    return (
        dialect.insert(DELIVERIES).on_conflict_do_nothing(index_elements=[DELIVERIES.c.id]).returning(DELIVERIES.c.id)
    )


_POOLS_OF_RUNNERS = select(RUNNERS.c.pool).where(RUNNERS.c.name.in_(bindparam("names", expanding=True)))
"""Built once, as the upsert is: every webhook runs them."""


def record(
    connection: Connection,
    deliveries: Sequence[Delivery],
    *,
    now: datetime,
    runner_pool: Callable[[str], str | None] = lambda _: None,
    held_elsewhere: Callable[[str], bool] = lambda _: False,
) -> IntakeResult:
    """Record a group of deliveries and the job updates they carry; say which were new and whom to wake.

    The pools to wake are the jobs' own pools and, for a job a runner took or finished, that runner's
    pool (a runner of one pool may take a job matched to another): `runner_pool(name)` says it from the name
    where it can (the engine reads corral's own names), the runners table for the others. `now` stamps the
    rows (the caller's clock). The owners of pools `held_elsewhere` (other replicas, on PostgreSQL) are woken
    by a NOTIFY in this same transaction, delivered at its commit: no transaction of its own per group.
    """
    first: dict[str, Delivery] = {}
    for delivery in deliveries:
        if delivery.id is not None:
            first.setdefault(delivery.id, delivery)
    rows = [{"id": d.id, "event": d.event, "action": d.action, "received_at": now} for d in first.values()]
    new = set(connection.execute(_new_deliveries_statement(connection.dialect.name), rows).scalars()) if rows else set()
    outcomes: list[DeliveryOutcome] = []
    fresh: list[Delivery] = []
    for delivery in deliveries:
        # Recorded: one without an id (not de-duplicated), or the first of an id the insert found new.
        if delivery.id is not None and (delivery.id not in new or first[delivery.id] is not delivery):
            outcomes.append(DeliveryOutcome.DUPLICATE)
            continue
        outcomes.append(DeliveryOutcome.RECORDED)
        fresh.append(delivery)
    merged: dict[int, JobUpdate] = {}
    sources: dict[int, str] = {}
    for delivery in fresh:
        if delivery.job is not None:
            job = delivery.job
            merged[job.id] = _merge(merged[job.id], job) if job.id in merged else job
            sources.setdefault(job.id, source_of(delivery))
    demand = {job.pool for job in merged.values() if job.pool is not None and job.status is JobState.QUEUED}
    news = {job.pool for job in merged.values() if job.pool is not None and job.status is not JobState.QUEUED}
    if merged:
        _upsert(connection, list(merged.values()), sources, now)
        names = []
        for job in merged.values():
            if job.runner_name:
                named = runner_pool(job.runner_name)
                if named is None:
                    names.append(job.runner_name)
                else:
                    news.add(named)
        for start in range(0, len(names), IN_CLAUSE_CHUNK):
            chunk = names[start : start + IN_CLAUSE_CHUNK]
            news.update(connection.execute(_POOLS_OF_RUNNERS, {"names": chunk}).scalars())
    elsewhere = {pool for pool in demand | news if held_elsewhere(pool)}
    if elsewhere:
        notify_wake(connection, elsewhere)
    return IntakeResult(outcomes=tuple(outcomes), demand=frozenset(demand), news=frozenset(news - demand))


def queued_count(connection: Connection, pool: str) -> int:
    query = select(func.count()).where(JOBS.c.status == JobState.QUEUED.value, JOBS.c.pool == pool)
    return int(connection.execute(query).scalar_one())


@functools.cache
def _queued_of_pool_query(limited: bool) -> Select[Any]:
    """Built once per variant: a statement is costlier to build than to run (pool, limit and offset are bound)."""
    query = (
        select(
            JOBS.c.id,
            JOBS.c.received_at,
            JOBS.c.checked_at,
            JOBS.c.runners_diverted,
            JOBS.c.diverted_at,
            JOBS.c.maybe_taken_at,
            JOBS.c.repository,
        )
        .where(JOBS.c.status == JobState.QUEUED.value, JOBS.c.pool == bindparam("pool"))
        .order_by(JOBS.c.queued_at, JOBS.c.id)
        .offset(bindparam("offset"))
    )
    return query.limit(bindparam("limit")) if limited else query


def queued_of_pool(connection: Connection, pool: str, *, limit: int | None = None, offset: int = 0) -> list[QueuedJob]:
    """Queued jobs of a pool, oldest first, as plain rows: this runs for every wake of the pool, so the
    engine reads only as many as could change what it does (a backlog of thousands is read in pages)."""
    rows = connection.execute(
        _queued_of_pool_query(limit is not None), {"pool": pool, "offset": offset, "limit": limit}
    )
    return [QueuedJob(row[0], row[1], row[2], row[3] or 0, row[4], row[5], row[6]) for row in rows]


def get(connection: Connection, job_id: int) -> Job | None:
    row = connection.execute(select(*COLUMNS).where(JOBS.c.id == job_id)).first()
    return to_job(row) if row else None


def known_ids(connection: Connection, ids: Iterable[int]) -> set[int]:
    wanted = list(ids)
    found: set[int] = set()
    for start in range(0, len(wanted), IN_CLAUSE_CHUNK):
        chunk = wanted[start : start + IN_CLAUSE_CHUNK]
        found.update(connection.execute(select(JOBS.c.id).where(JOBS.c.id.in_(chunk))).scalars())
    return found


def listing(
    connection: Connection,
    *,
    status: JobState | None = None,
    pool: str | None = None,
    run_id: int | None = None,
    limit: int = 1000,
) -> list[Job]:
    query = select(*COLUMNS).order_by(JOBS.c.received_at.desc(), JOBS.c.id.desc()).limit(limit)
    if run_id is not None:
        query = query.where(JOBS.c.run_id == run_id)
    if status is not None:
        query = query.where(JOBS.c.status == status.value)
    if pool is not None:
        query = query.where(JOBS.c.pool == pool)
    return [to_job(row) for row in connection.execute(query)]


def queued_since(connection: Connection, since: datetime) -> list[Job]:
    """Jobs queued at or after `since` (GitHub's `created_at`, or when corral first heard of a job where that is
    unknown), oldest first: the job history `corral jobs export` writes as a trace."""
    queued = func.coalesce(JOBS.c.queued_at, JOBS.c.received_at)
    query = select(*COLUMNS).where(queued >= since).order_by(queued, JOBS.c.id)
    return [to_job(row) for row in connection.execute(query)]


def _stale_queued_query() -> Select[Any]:
    unasked = JOBS.c.checked_at.is_(None)
    old = (JOBS.c.received_at < bindparam("queued_before")) & (
        unasked | (JOBS.c.checked_at < bindparam("checked_before"))
    )
    presumed = JOBS.c.maybe_taken_at.is_not(None) & (JOBS.c.maybe_taken_at < bindparam("presumed_before"))
    uncertain = presumed & (unasked | (JOBS.c.checked_at < JOBS.c.maybe_taken_at))
    return (
        select(*COLUMNS)
        .where(JOBS.c.status == JobState.QUEUED.value, old | uncertain)
        .order_by(JOBS.c.maybe_taken_at.desc().nulls_last(), JOBS.c.checked_at.nulls_first(), JOBS.c.received_at)
        .limit(bindparam("limit"))
    )


_STALE_QUEUED = _stale_queued_query()
"""Built once (its times and limit bound): it runs at every look, and building it cost more than running it."""


def stale_queued(
    connection: Connection, *, queued_before: datetime, checked_before: datetime, presumed_before: datetime, limit: int
) -> list[Job]:
    """Queued jobs worth asking GitHub about: old ones not asked recently, and ones presumed taken before
    `presumed_before` and not asked since (they may be running already, or still waiting for a runner)."""
    bound = {
        "queued_before": queued_before,
        "checked_before": checked_before,
        "presumed_before": presumed_before,
        "limit": limit,
    }
    return [to_job(row) for row in connection.execute(_STALE_QUEUED, bound)]


def _unfinished_without_runner_query() -> Select[Any]:
    live = [RunnerState.BOOTING.value, RunnerState.IDLE.value, RunnerState.BUSY.value]
    ended = [state.value for state in ENDED_RUNNER_STATES]
    own = RUNNERS.c.name == JOBS.c.runner_name
    running = select(RUNNERS.c.id).where(own, one_of(RUNNERS.c.state, live)).exists()
    unasked_since_it_ended = (
        select(RUNNERS.c.id)
        .where(
            own,
            one_of(RUNNERS.c.state, ended),
            JOBS.c.checked_at.is_(None) | (JOBS.c.checked_at < RUNNERS.c.state_changed_at),
        )
        .exists()
    )
    stale = (
        JOBS.c.pool.is_not(None)
        & (JOBS.c.received_at < bindparam("started_before"))
        & (JOBS.c.checked_at.is_(None) | (JOBS.c.checked_at < bindparam("checked_before")))
    )
    return (
        select(*COLUMNS)
        .where(JOBS.c.status == JobState.IN_PROGRESS.value, ~running, unasked_since_it_ended | stale)
        .order_by(case((unasked_since_it_ended, 0), else_=1), JOBS.c.checked_at.nulls_first(), JOBS.c.received_at)
        .limit(bindparam("limit"))
    )


_UNFINISHED_WITHOUT_RUNNER = _unfinished_without_runner_query()
"""Built once (its times and limit bound): it runs at every look, and building it cost more than running it."""


def unfinished_without_runner(
    connection: Connection, *, started_before: datetime, checked_before: datetime, limit: int
) -> list[Job]:
    """Jobs still `in_progress` whose runner is no longer live: their `completed` webhook may have been lost,
    only GitHub can say, and until asked they would count as running on the API, the dashboard and in usage.

    A job whose runner corral saw end (one of its own, out of the live states) is asked about at once, and
    again after each later move of that runner (finished, deleting, deleted: three asks at most, in case
    GitHub had not finished the job when the runner left). Other jobs of corral's pools (their runner
    unknown to corral) are asked about once they and their last answer are older than `stale_job_check`.
    Jobs whose runner ended come first.
    """
    if limit <= 0:
        return []
    bound = {"started_before": started_before, "checked_before": checked_before, "limit": limit}
    return [to_job(row) for row in connection.execute(_UNFINISHED_WITHOUT_RUNNER, bound)]


def checked(
    connection: Connection,
    job_id: int,
    *,
    status: JobState,
    conclusion: str | None,
    runner_name: str | None = None,
    completed_at: datetime | None = None,
    now: datetime,
) -> None:
    """Record what GitHub said of a job when asked directly (at `now`); it never moves backwards either."""
    connection.execute(update(JOBS).where(JOBS.c.id == job_id).values(checked_at=now))
    forward: dict[str, Any] = {"status": status.value, "conclusion": conclusion}
    if runner_name:
        forward["runner_name"] = runner_name
    if completed_at is not None:
        forward["completed_at"] = completed_at
    connection.execute(
        update(JOBS).where(JOBS.c.id == job_id, state_rank(JOBS.c.status) < status.rank).values(**forward)
    )


def recent_repositories(connection: Connection, *, since: datetime) -> list[str]:
    query = select(JOBS.c.repository).where(JOBS.c.received_at >= since).distinct()
    return list(connection.execute(query).scalars())


def counts(connection: Connection) -> dict[str, int]:
    """Jobs known to corral by status, counted by the database rather than by listing them."""
    query = select(JOBS.c.status, func.count()).group_by(JOBS.c.status)
    return {status: count for status, count in connection.execute(query)}


_ARRIVALS_SINCE = (
    select(JOBS.c.id, JOBS.c.received_at, func.coalesce(JOBS.c.queued_at, JOBS.c.received_at))
    .where(JOBS.c.received_at >= bindparam("since"), JOBS.c.pool == bindparam("pool"))
    .order_by(JOBS.c.received_at, JOBS.c.id)
)


def arrivals_since(connection: Connection, pool: str, since: datetime) -> list[tuple[int, datetime, datetime]]:
    """The pool's jobs corral heard of at or after `since`, in that order: (id, when heard, when GitHub queued
    it). What `min_idle: {auto: ...}` forecasts the pool's arrivals from."""
    rows = connection.execute(_ARRIVALS_SINCE, {"pool": pool, "since": since})
    return [(job_id, received_at, queued_at) for job_id, received_at, queued_at in rows]
