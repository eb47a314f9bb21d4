"""Jobs lost with their runner's server, and corral's re-runs of them (`rerun_lost_jobs`).

A job is marked lost in the transaction that moves its busy runner to `failed` because its server went to
ERROR or vanished (`runners.apply`). Once GitHub has failed it, the job tracker decides: re-run it, or say
why not (`jobs.rerun`). A re-run is claimed in the database before GitHub is asked (`claim`), so that of
several replicas, or a corral that restarted, exactly one asks once per lost attempt: a claim left by a
corral killed before GitHub answered is not taken again (a lost job not re-run, never one re-run twice).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, func, select, update

from corral.model import Job
from corral.store.jobs import COLUMNS, to_job
from corral.store.schema import JOBS, one_of

REQUESTED = "requested"
REQUESTING = "requesting"


def undecided(connection: Connection, *, limit: int) -> list[Job]:
    """Lost jobs nothing has been decided about yet, the longest lost first."""
    query = (
        select(*COLUMNS)
        .where(JOBS.c.lost_at.is_not(None), JOBS.c.rerun.is_(None))
        .order_by(JOBS.c.lost_at, JOBS.c.id)
        .limit(limit)
    )
    return [to_job(row) for row in connection.execute(query)]


def reruns_of(connection: Connection, job: Job) -> int:
    """How many times corral has re-run this job: its attempts' rows (same run, same name) it asked for."""
    query = select(func.count()).where(
        JOBS.c.run_id == job.run_id,
        one_of(JOBS.c.rerun, (REQUESTED, REQUESTING)),
    )
    if job.name is not None:
        query = query.where(JOBS.c.name == job.name)
    return int(connection.execute(query).scalar_one())


def claim(connection: Connection, job_id: int, *, now: datetime) -> bool:
    """Take the re-run of a lost job for this corral; False if another (or an earlier run) already has."""
    claimed = connection.execute(
        update(JOBS).where(JOBS.c.id == job_id, JOBS.c.rerun.is_(None)).values(rerun=REQUESTING, rerun_at=now)
    )
    return claimed.rowcount == 1


def decide(connection: Connection, job_id: int, outcome: str) -> None:
    """What became of a lost job: `requested` once GitHub accepted the re-run, or why there was none."""
    connection.execute(update(JOBS).where(JOBS.c.id == job_id).values(rerun=outcome[:200]))


def release(connection: Connection, job_id: int) -> None:
    """Give a claimed re-run back (GitHub could not be asked, or refused for now): asked again later."""
    connection.execute(
        update(JOBS).where(JOBS.c.id == job_id, JOBS.c.rerun == REQUESTING).values(rerun=None, rerun_at=None)
    )
