"""The rows usage is accounted from (`corral.usage`): runners alive in a window with their moves and the job
each ran (else was started for), and the jobs that started in it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, and_, case, func, or_, select

from corral.model import RunnerState
from corral.store import scaleset_jobs
from corral.store.reruns import REQUESTED
from corral.store.schema import JOBS, RUNNERS, SCALE_SET_JOBS
from corral.store.schema import RUNNER_EVENTS as EVENTS
from corral.usage import LostJob, RunnerHistory, StartedJob

CHUNK = 500


def histories(connection: Connection, *, since: datetime, until: datetime) -> list[RunnerHistory]:
    ran = JOBS.alias("ran")
    own = JOBS.alias("own")
    scale_set = SCALE_SET_JOBS.alias("scale_set")
    query = (
        select(
            RUNNERS.c.id,
            RUNNERS.c.pool,
            func.coalesce(ran.c.repository, scale_set.c.repository, own.c.repository),
            func.coalesce(ran.c.workflow, scale_set.c.workflow, own.c.workflow),
        )
        .select_from(
            RUNNERS.outerjoin(ran, ran.c.runner_name == RUNNERS.c.name)
            .outerjoin(scale_set, scale_set.c.runner_name == RUNNERS.c.name)
            .outerjoin(own, own.c.id == RUNNERS.c.job_id)
        )
        .where(
            RUNNERS.c.created_at < until,
            or_(RUNNERS.c.state != RunnerState.DELETED.value, RUNNERS.c.state_changed_at >= since),
        )
    )
    found = {row[0]: row for row in connection.execute(query)}
    moves: dict[str, list[tuple[RunnerState, datetime]]] = {runner_id: [] for runner_id in found}
    ids = list(found)
    for start in range(0, len(ids), CHUNK):
        events = (
            select(EVENTS.c.runner_id, EVENTS.c.to_state, EVENTS.c.at)
            .where(and_(EVENTS.c.runner_id.in_(ids[start : start + CHUNK]), EVENTS.c.at < until))
            .order_by(EVENTS.c.id)
        )
        for runner_id, state, at in connection.execute(events):
            moves[runner_id].append((RunnerState(state), at))
    return [
        RunnerHistory(pool=row[1], repository=row[2], workflow=row[3], moves=moves[runner_id])
        for runner_id, row in found.items()
    ]


def started_jobs(connection: Connection, *, since: datetime, until: datetime) -> list[StartedJob]:
    """Jobs that started in the window: webhook pools' (by the pool they matched) and scale-set pools'."""
    query = select(JOBS.c.pool, JOBS.c.repository, JOBS.c.workflow, JOBS.c.queued_at, JOBS.c.started_at).where(
        JOBS.c.started_at >= since, JOBS.c.started_at < until, JOBS.c.pool.is_not(None)
    )
    rows = list(connection.execute(query)) + scaleset_jobs.started_between(connection, since=since, until=until)
    return [StartedJob(*row) for row in rows]


def lost_jobs(connection: Connection, *, since: datetime, until: datetime) -> list[LostJob]:
    """Jobs lost with their runner's server, or re-run by corral, in the window (by the pool they matched)."""
    lost_in = and_(JOBS.c.lost_at >= since, JOBS.c.lost_at < until)
    rerun_in = and_(JOBS.c.rerun == REQUESTED, JOBS.c.rerun_at >= since, JOBS.c.rerun_at < until)
    query = select(
        JOBS.c.pool,
        JOBS.c.repository,
        JOBS.c.workflow,
        JOBS.c.lost_at,
        case((JOBS.c.rerun == REQUESTED, JOBS.c.rerun_at), else_=None),
    ).where(JOBS.c.lost_at.is_not(None), or_(lost_in, rerun_in))
    return [LostJob(*row) for row in connection.execute(query)]
