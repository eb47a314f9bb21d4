"""Pool status rows: what the engine last published about each pool, operators' drains, create backoffs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from corral.model import PoolStatus
from corral.store.leases import notify_wake
from corral.store.schema import POOL_STATUS as POOLS


def statuses(connection: Connection) -> dict[str, PoolStatus]:
    query = select(
        POOLS.c.name,
        POOLS.c.applied_generation,
        POOLS.c.ready,
        POOLS.c.reason,
        POOLS.c.removed,
        POOLS.c.drained,
        POOLS.c.updated_at,
        POOLS.c.create_failures,
        POOLS.c.create_paused_until,
        POOLS.c.scale_set_id,
        POOLS.c.scale_set_session,
        POOLS.c.server_cost,
        POOLS.c.quota_waiting,
        POOLS.c.quota_waiting_at,
        POOLS.c.rollouts,
        POOLS.c.cloud_backoffs,
        POOLS.c.quota_waiting_cloud,
        POOLS.c.warm,
    )
    return {row[0]: PoolStatus(*row) for row in connection.execute(query)}


def drained(statuses: dict[str, PoolStatus]) -> set[str]:
    """The pools an operator drained, of these status rows."""
    return {name for name, status in statuses.items() if status.drained}


def publish(
    connection: Connection,
    name: str,
    *,
    generation: int,
    ready: bool,
    reason: str | None,
    removed: bool,
    now: datetime,
) -> None:
    _upsert(connection, name, now=now, applied_generation=generation, ready=ready, reason=reason, removed=removed)


def set_drained(
    connection: Connection, name: str, drained: bool, *, now: datetime, notices: Iterable[str] = ()
) -> None:
    """An operator's drain (or undrain) of a pool; `notices` (PostgreSQL NOTIFY) are sent in the same
    transaction, so the pool's holder on another replica hears of it exactly when, and only if, it is written."""
    _upsert(connection, name, now=now, drained=drained)
    notify_wake(connection, notices)


def set_create_backoff(
    connection: Connection, name: str, failures: int, paused_until: datetime | None, *, now: datetime
) -> None:
    """The pool's create backoff as its holder has it now (0 and None when creates go at full speed)."""
    _upsert(connection, name, now=now, create_failures=failures, create_paused_until=paused_until)


def set_scale_set(
    connection: Connection, name: str, scale_set_id: int | None, session: str | None, *, now: datetime
) -> None:
    """A scale-set pool's scale set and the session its holder has open (None: none open)."""
    _upsert(connection, name, now=now, scale_set_id=scale_set_id, scale_set_session=session)


def set_quota(
    connection: Connection,
    name: str,
    *,
    server_cost: dict[str, int] | None,
    waiting: int,
    waiting_at: datetime,
    waiting_cloud: str | None = None,
    now: datetime,
) -> None:
    """What the pool's holder knows of it that replicas sharing the project plan with: a server's cost, and
    how many runners for queued jobs the quota holds back (renewed while it does, else it lapses) in which
    cloud's quota."""
    _upsert(
        connection,
        name,
        now=now,
        server_cost=server_cost,
        quota_waiting=waiting,
        quota_waiting_at=waiting_at,
        quota_waiting_cloud=waiting_cloud,
    )


def set_server_cost(connection: Connection, name: str, server_cost: dict[str, int], *, now: datetime) -> None:
    """What one of the pool's servers costs of the quota, written before its holder's first runners: replicas
    sharing the project count those runners at this cost, and a runner whose cost they cannot read yet would
    count as a bare instance."""
    _upsert(connection, name, now=now, server_cost=server_cost)


def set_cloud_backoffs(connection: Connection, name: str, backoffs: dict[str, Any], *, now: datetime) -> None:
    """The pool's backoff in each cloud that failed it lately (`{cloud: {failures, paused_until}}`)."""
    _upsert(connection, name, now=now, cloud_backoffs=backoffs)


def set_rollouts(connection: Connection, name: str, rollouts: dict[str, Any], *, now: datetime) -> None:
    """Per placement of the pool: the image its last check resolved to, and its rollout (None: none)."""
    _upsert(connection, name, now=now, rollouts=rollouts)


def set_warm(connection: Connection, name: str, warm: dict[str, Any] | None, *, now: datetime) -> None:
    """An auto pool's warm runners and forecast as its holder's last pass had them (None: not auto)."""
    _upsert(connection, name, now=now, warm=warm)


def release_session(connection: Connection, name: str, session: str, *, now: datetime) -> None:
    """The holder that opened `session` has closed it: the pool shows none open, unless a newer holder has
    already recorded its own (an old holder closing late must not erase the new one's)."""
    connection.execute(
        update(POOLS)
        .where(POOLS.c.name == name, POOLS.c.scale_set_session == session)
        .values(scale_set_session=None, updated_at=now)
    )


_NEW_ROW = {"applied_generation": 0, "ready": False, "removed": False, "drained": False}
"""What a pool's first row says about whatever its first write does not set."""


def _upsert(connection: Connection, name: str, *, now: datetime, **values: object) -> None:
    """Write `values` to the pool's row (made if missing), stamped `now` (the writer's clock)."""
    updated_at = now
    changed = connection.execute(update(POOLS).where(POOLS.c.name == name).values(**values, updated_at=updated_at))
    if not changed.rowcount:
        connection.execute(insert(POOLS).values({**_NEW_ROW, **values, "name": name, "updated_at": updated_at}))


def forget(connection: Connection, name: str) -> None:
    """A removed pool with nothing left: its status row goes too (an operator's drain goes with it)."""
    connection.execute(POOLS.delete().where(POOLS.c.name == name))
