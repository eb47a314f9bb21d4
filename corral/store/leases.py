"""Replicas and pool leases on PostgreSQL: who is alive, who acts for which pool, and the fence on writes.

Every time here is the database's (`now()`), so replicas' clocks never have to agree. A lease is a row
(pool, holder, fence, expires_at), not an advisory lock held by a session: a replica paused by SIGSTOP (or a
long GC, or a VM migration) keeps its session and would keep a session lock forever, while its row simply
expires and another replica takes the pool with the next fence number. The paused replica's writes then
carry a stale number and `verify` refuses them, in the transaction that would have written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, func, or_, select, text, tuple_, update
from sqlalchemy.dialects.postgresql import insert

from corral.store.schema import POOL_LEASES, REPLICAS

WAKE_CHANNEL = "corral_wake"
"""The PostgreSQL NOTIFY channel on which a replica asks a pool's owner to run a pass now."""


@dataclass(frozen=True)
class Fence:
    """A replica's hold on a pool: the fencing number it acquired the pool under."""

    pool: str
    holder: str
    number: int


class LeaseLost(RuntimeError):
    """A write for a pool this replica no longer holds (its lease expired and another took it, or never held)."""

    def __init__(self, pool: str) -> None:
        super().__init__(f"pool {pool}: this replica no longer holds its lease; its new owner acts for it")
        self.pool = pool


@dataclass(frozen=True)
class ReplicaRow:
    id: str
    version: str
    pid: int
    started_at: datetime
    last_seen: datetime


@dataclass(frozen=True)
class LeaseRow:
    pool: str
    holder: str
    fence: int
    acquired_at: datetime
    expires_at: datetime
    valid: bool


def heartbeat(connection: Connection, replica: str, version: str, pid: int, live_within: timedelta) -> int | None:
    """Say this replica is alive; returns the pid of another process under the same name that said so within
    `live_within` (the lease time), if any: two replicas sharing a name would take each other's pools in
    turn, and the caller says so loudly."""
    previous = connection.execute(
        select(REPLICAS.c.pid, REPLICAS.c.last_seen > func.now() - live_within)
        .where(REPLICAS.c.id == replica)
        .with_for_update()
    ).first()
    statement = insert(REPLICAS).values(
        id=replica, version=version, pid=pid, started_at=func.now(), last_seen=func.now()
    )
    statement = statement.on_conflict_do_update(
        index_elements=[REPLICAS.c.id], set_={"version": version, "pid": pid, "last_seen": func.now()}
    )
    connection.execute(statement)
    if previous is not None and previous[0] != pid and previous[1]:
        return int(previous[0])
    return None


def replicas(connection: Connection, seen_within: timedelta | None = None) -> list[ReplicaRow]:
    """Replicas, oldest first; with `seen_within` (the lease time), only those seen that recently."""
    query = select(REPLICAS.c.id, REPLICAS.c.version, REPLICAS.c.pid, REPLICAS.c.started_at, REPLICAS.c.last_seen)
    if seen_within is not None:
        query = query.where(REPLICAS.c.last_seen > func.now() - seen_within)
    rows = connection.execute(query.order_by(REPLICAS.c.started_at, REPLICAS.c.id))
    return [ReplicaRow(*row) for row in rows]


def leases(connection: Connection) -> list[LeaseRow]:
    rows = connection.execute(
        select(
            POOL_LEASES.c.pool,
            POOL_LEASES.c.holder,
            POOL_LEASES.c.fence,
            POOL_LEASES.c.acquired_at,
            POOL_LEASES.c.expires_at,
            POOL_LEASES.c.expires_at > func.now(),
        ).order_by(POOL_LEASES.c.pool)
    )
    return [LeaseRow(*row) for row in rows]


def acquire(connection: Connection, pool: str, replica: str, ttl: timedelta) -> tuple[Fence, datetime | None] | None:
    """Take `pool` if nobody holds it (no row, or an expired one), with the next fence number; None if another
    replica holds it. Also returns when the previous lease expired (for the failover time), if there was one.

    A replica taking back a pool under its own name (a restart) gets a new number too: whatever its previous
    incarnation still had in flight is refused."""
    previous = connection.execute(
        select(POOL_LEASES.c.expires_at, POOL_LEASES.c.holder).where(POOL_LEASES.c.pool == pool).with_for_update()
    ).first()
    values = insert(POOL_LEASES).values(
        pool=pool, holder=replica, fence=1, acquired_at=func.now(), expires_at=func.now() + ttl
    )
    statement = values.on_conflict_do_update(
        index_elements=[POOL_LEASES.c.pool],
        set_={
            "holder": replica,
            "fence": POOL_LEASES.c.fence + 1,
            "acquired_at": func.now(),
            "expires_at": func.now() + ttl,
        },
        where=or_(POOL_LEASES.c.expires_at <= func.now(), POOL_LEASES.c.holder == replica),
    ).returning(POOL_LEASES.c.fence)
    number = connection.execute(statement).scalar_one_or_none()
    if number is None:
        return None
    expired_at = previous[0] if previous is not None and previous[1] != replica else None
    return Fence(pool, replica, int(number)), expired_at


def renew(connection: Connection, fences: Sequence[Fence], ttl: timedelta) -> set[str]:
    """Extend the leases still held under these numbers; the pools not returned are lost (an expired lease
    is not renewed even if nobody took it yet: it is acquired again, under a new number)."""
    if not fences:
        return set()
    held = [(fence.pool, fence.number) for fence in fences]
    rows = connection.execute(
        update(POOL_LEASES)
        .where(
            tuple_(POOL_LEASES.c.pool, POOL_LEASES.c.fence).in_(held),
            POOL_LEASES.c.holder == fences[0].holder,
            POOL_LEASES.c.expires_at > func.now(),
        )
        .values(expires_at=func.now() + ttl)
        .returning(POOL_LEASES.c.pool)
    )
    return {row[0] for row in rows}


def release(connection: Connection, fences: Iterable[Fence]) -> None:
    """Let these pools go at once (a handover, or a clean stop): expired now, so the next taker needs no wait."""
    for fence in fences:
        connection.execute(
            update(POOL_LEASES)
            .where(
                POOL_LEASES.c.pool == fence.pool,
                POOL_LEASES.c.holder == fence.holder,
                POOL_LEASES.c.fence == fence.number,
            )
            .values(expires_at=func.now())
        )


def leave(connection: Connection, replica: str) -> None:
    """A replica stopping cleanly: its heartbeat row goes, so the others rebalance without waiting."""
    connection.execute(delete(REPLICAS).where(REPLICAS.c.id == replica))


def verify(connection: Connection, fences: Sequence[Fence]) -> None:
    """Refuse (LeaseLost) unless each fence is still its pool's valid lease. The rows are read FOR SHARE, so
    a takeover (an UPDATE of the row) waits for this transaction to end: nothing this transaction writes can
    land after another replica acquired the pool."""
    if not fences:
        return
    rows = connection.execute(
        select(POOL_LEASES.c.pool, POOL_LEASES.c.holder, POOL_LEASES.c.fence)
        .where(POOL_LEASES.c.pool.in_({fence.pool for fence in fences}), POOL_LEASES.c.expires_at > func.now())
        .with_for_update(read=True)
    )
    valid = {(pool, holder, number) for pool, holder, number in rows}
    for fence in fences:
        if (fence.pool, fence.holder, fence.number) not in valid:
            raise LeaseLost(fence.pool)


_NOTIFY = text("SELECT pg_notify(:channel, payload) FROM unnest(CAST(:payloads AS text[])) AS payload")


def notify_wake(connection: Connection, pools: Iterable[str]) -> None:
    """Ask the owners of these pools (on whichever replica) to run a pass now, or send other messages
    (`engine.messages`): one statement for them all, delivered at commit, in this order."""
    payloads = sorted(set(pools))
    if payloads:
        connection.execute(_NOTIFY, {"channel": WAKE_CHANNEL, "payloads": payloads})
