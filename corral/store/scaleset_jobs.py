"""Scale-set jobs as their pool's listener hears of them: one row per runner request, moved forward by each
message (available or assigned, started, completed) and never backwards, whatever order a batch holds them in.

Written once per queue message (at most 50 job messages, one transaction), from the listener, so the webhook
path is untouched. Read for a job's story (`corral why`) and for usage by repository and workflow.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.dialects import postgresql, sqlite

from corral.model import Job, JobMessage, JobState
from corral.store.jobs import state_rank
from corral.store.schema import SCALE_SET_JOBS as JOBS

STATE_OF_KIND = {
    "JobAvailable": JobState.QUEUED,
    "JobAssigned": JobState.QUEUED,
    "JobStarted": JobState.IN_PROGRESS,
    "JobCompleted": JobState.COMPLETED,
}
COLUMNS = (
    JOBS.c.request_id,
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
    JOBS.c.source,
    JOBS.c.workflow,
)
KEEP_IF_NULL = ("conclusion", "runner_name", "queued_at", "started_at", "completed_at", "workflow", "run_id")


def to_job(row: Any) -> Job:
    """A scale-set job in the shape of any other (`id` is its runner request id), so its story is told alike."""
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
        source=f"scale_set:{row[12]}" if row[12] else "scale_set",
        workflow=row[13],
    )


@functools.cache
def _upsert_statement(dialect_name: str) -> Any:
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    statement = dialect.insert(JOBS)
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[JOBS.c.request_id],
        set_={
            "status": excluded.status,
            **{key: func.coalesce(excluded[key], JOBS.c[key]) for key in KEEP_IF_NULL},
        },
        where=state_rank(excluded.status) >= state_rank(JOBS.c.status),
    )


def record(connection: Connection, pool: str, messages: Sequence[JobMessage], *, now: datetime) -> None:
    """The jobs of one queue message, each merged to the furthest state the batch says it reached; `now`
    stamps the rows (the caller's clock)."""
    rows: dict[int, dict[str, Any]] = {}
    for message in messages:
        state = STATE_OF_KIND.get(message.kind)
        if state is None or message.runner_request_id <= 0:
            continue
        row = rows.setdefault(
            message.runner_request_id,
            {
                "request_id": message.runner_request_id,
                "pool": pool,
                "repository": message.full_repository[:256],
                "workflow": message.workflow,
                "display_name": message.display_name,
                "job_guid": message.job_id[:64] or None,
                "run_id": message.workflow_run_id or None,
                "labels": list(message.labels),
                "status": state.value,
                "conclusion": None,
                "runner_name": None,
                "queued_at": message.queue_time,
                "started_at": None,
                "completed_at": None,
                "received_at": now,
                "source": message.kind,
            },
        )
        if state.rank > JobState(row["status"]).rank:
            row["status"] = state.value
        if message.runner_name:
            row["runner_name"] = message.runner_name[:128]
        if message.kind == "JobStarted":
            row["started_at"] = row["started_at"] or now
        if message.kind == "JobCompleted":
            # When corral heard it: `finishTime` is to the second, coarser than the runner steps beside it.
            row["completed_at"] = now
            row["conclusion"] = (message.result or "unknown")[:32]
    if rows:
        connection.execute(_upsert_statement(connection.dialect.name), list(rows.values()))


def get(connection: Connection, request_id: int) -> Job | None:
    row = connection.execute(select(*COLUMNS).where(JOBS.c.request_id == request_id)).first()
    return to_job(row) if row else None


def listing(
    connection: Connection,
    *,
    status: JobState | None = None,
    pool: str | None = None,
    run_id: int | None = None,
    limit: int = 1000,
) -> list[Job]:
    query = select(*COLUMNS).order_by(JOBS.c.received_at.desc(), JOBS.c.request_id.desc()).limit(limit)
    if status is not None:
        query = query.where(JOBS.c.status == status.value)
    if pool is not None:
        query = query.where(JOBS.c.pool == pool)
    if run_id is not None:
        query = query.where(JOBS.c.run_id == run_id)
    return [to_job(row) for row in connection.execute(query)]


def queued_since(connection: Connection, since: datetime) -> list[Job]:
    """Scale-set jobs queued at or after `since` (the message's `queueTime`, or when corral first heard of the
    job), oldest first: with the webhook jobs, the history `corral jobs export` writes."""
    queued = func.coalesce(JOBS.c.queued_at, JOBS.c.received_at)
    query = select(*COLUMNS).where(queued >= since).order_by(queued, JOBS.c.request_id)
    return [to_job(row) for row in connection.execute(query)]


def started_between(connection: Connection, *, since: datetime, until: datetime) -> list[Any]:
    """(pool, repository, workflow, queued_at, started_at) of those started in the window, for usage."""
    query = select(JOBS.c.pool, JOBS.c.repository, JOBS.c.workflow, JOBS.c.queued_at, JOBS.c.started_at).where(
        JOBS.c.started_at >= since, JOBS.c.started_at < until
    )
    return list(connection.execute(query))
