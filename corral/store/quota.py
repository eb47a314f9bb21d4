"""What replicas sharing one project's quota read of each other's creates, in the transaction that writes
their own.

A replica's reading of the quota (Nova's limits) counts every server Nova accepted before the reading
began; the creates this replica sent since, it holds itself (`engine.quota`). Those other replicas sent
since are read here: runners of pools it does not hold whose create is under way (`pending`, `creating`),
or whose server was made after the reading began (their move to `booting`). On PostgreSQL every pool's
adds that ask take turns under one advisory lock, so two replicas cannot each count the other's runners
before either has written its own.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, false, func, select, text, true

from corral.model import RunnerState
from corral.store.schema import POOL_STATUS, RUNNERS, one_of
from corral.store.schema import RUNNER_EVENTS as EVENTS

QUOTA_LOCK_KEY = 0x636F7271  # the project's quota, one advisory lock for all pools
IN_FLIGHT = (RunnerState.PENDING.value, RunnerState.CREATING.value)


def take_turn(connection: Connection) -> None:
    """On PostgreSQL, wait for any other replica's add that is reading the quota, until this one commits."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": QUOTA_LOCK_KEY})


def made_since(
    connection: Connection,
    pools: Collection[str],
    since: datetime,
    cloud: str,
    or_unrecorded: bool,
    excluding: Collection[str] = (),
) -> dict[str, int]:
    """Per pool of `pools`, its runners in `cloud` (`or_unrecorded`: or of no recorded cloud, the first) whose
    server a reading begun at `since` may not count: their create is under way, or their server was made
    after it (deleted ones aside: their server is gone), but the runners `excluding` (the asking replica's own
    creates, which its headroom already holds)."""
    if not pools:
        return {}
    booted_since = select(EVENTS.c.runner_id).where(
        EVENTS.c.to_state == RunnerState.BOOTING.value, EVENTS.c.at >= since
    )
    query = (
        select(RUNNERS.c.pool, func.count())
        .where(
            RUNNERS.c.pool.in_(list(pools)),
            RUNNERS.c.state != RunnerState.DELETED.value,
            (RUNNERS.c.cloud == cloud) | (RUNNERS.c.cloud.is_(None) if or_unrecorded else false()),
            one_of(RUNNERS.c.state, IN_FLIGHT) | RUNNERS.c.id.in_(booted_since),
            RUNNERS.c.id.not_in(list(excluding)) if excluding else true(),
        )
        .group_by(RUNNERS.c.pool)
    )
    return {pool: int(count) for pool, count in connection.execute(query)}


def server_costs(connection: Connection, pools: Collection[str]) -> dict[str, dict[str, Any]]:
    """What one server of each of these pools costs, as their holders published it (pools never checked are
    missing)."""
    if not pools:
        return {}
    query = select(POOL_STATUS.c.name, POOL_STATUS.c.server_cost).where(POOL_STATUS.c.name.in_(list(pools)))
    return {name: dict(cost) for name, cost in connection.execute(query) if isinstance(cost, dict)}
