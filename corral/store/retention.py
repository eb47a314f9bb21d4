"""Forgetting history: deleted runners (with their events), old jobs (scale-set jobs too), webhook deliveries and
redelivery requests.

Pruned in small batches, each its own short transaction, so pruning a backlog of weeks never holds a lock
long enough to delay the engine or the webhook.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, select

from corral.model import RunnerState
from corral.store.schema import DELIVERIES, JOBS, RUNNERS, SCALE_SET_JOBS
from corral.store.schema import REDELIVERY_REQUESTS as REDELIVERIES
from corral.store.schema import RUNNER_EVENTS as EVENTS


def prune_batch(connection: Connection, *, older_than: datetime, batch: int) -> int:
    """Delete up to `batch` rows of each kind older than `older_than`; the number of rows deleted."""
    runner_ids = list(
        connection.execute(
            select(RUNNERS.c.id)
            .where(RUNNERS.c.state == RunnerState.DELETED.value, RUNNERS.c.state_changed_at < older_than)
            .limit(batch)
        ).scalars()
    )
    deleted = 0
    if runner_ids:
        connection.execute(delete(EVENTS).where(EVENTS.c.runner_id.in_(runner_ids)))
        deleted += connection.execute(delete(RUNNERS).where(RUNNERS.c.id.in_(runner_ids))).rowcount
    job_ids = list(connection.execute(select(JOBS.c.id).where(JOBS.c.received_at < older_than).limit(batch)).scalars())
    if job_ids:
        deleted += connection.execute(delete(JOBS).where(JOBS.c.id.in_(job_ids))).rowcount
    request_ids = list(
        connection.execute(
            select(SCALE_SET_JOBS.c.request_id).where(SCALE_SET_JOBS.c.received_at < older_than).limit(batch)
        ).scalars()
    )
    if request_ids:
        deleted += connection.execute(
            delete(SCALE_SET_JOBS).where(SCALE_SET_JOBS.c.request_id.in_(request_ids))
        ).rowcount
    delivery_ids = list(
        connection.execute(select(DELIVERIES.c.id).where(DELIVERIES.c.received_at < older_than).limit(batch)).scalars()
    )
    if delivery_ids:
        deleted += connection.execute(delete(DELIVERIES).where(DELIVERIES.c.id.in_(delivery_ids))).rowcount
    guids = list(
        connection.execute(
            select(REDELIVERIES.c.guid).where(REDELIVERIES.c.asked_at < older_than).limit(batch)
        ).scalars()
    )
    if guids:
        deleted += connection.execute(delete(REDELIVERIES).where(REDELIVERIES.c.guid.in_(guids))).rowcount
    return deleted
