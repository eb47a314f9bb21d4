"""Pool status rows: what the engine last published about each pool, and operators' drains."""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update

from corral.clock import utcnow
from corral.model import PoolStatus
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
    )
    return {row[0]: PoolStatus(*row) for row in connection.execute(query)}


def publish(
    connection: Connection, name: str, *, generation: int, ready: bool, reason: str | None, removed: bool
) -> None:
    values = {"applied_generation": generation, "ready": ready, "reason": reason, "removed": removed}
    changed = connection.execute(update(POOLS).where(POOLS.c.name == name).values(**values, updated_at=utcnow()))
    if not changed.rowcount:
        connection.execute(insert(POOLS).values(name=name, drained=False, updated_at=utcnow(), **values))


def set_drained(connection: Connection, name: str, drained: bool) -> None:
    changed = connection.execute(update(POOLS).where(POOLS.c.name == name).values(drained=drained, updated_at=utcnow()))
    if not changed.rowcount:
        connection.execute(
            insert(POOLS).values(
                name=name, applied_generation=0, ready=False, removed=False, drained=drained, updated_at=utcnow()
            )
        )


def forget(connection: Connection, name: str) -> None:
    """A removed pool with nothing left: its status row goes too (an operator's drain goes with it)."""
    connection.execute(POOLS.delete().where(POOLS.c.name == name))
