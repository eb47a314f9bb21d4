"""The pools' cache volumes (`cache_volumes`): which exist, and which runner holds each.

A runner's server gets a free volume of its pool (`take`), or, while the pool has fewer than `max`, a new one
whose row is written before Cinder is asked (`reserve_new`), so a volume Cinder makes is never unknown to the
store for longer than a crash lasts. Taking is one guarded `UPDATE ... WHERE state = 'free'`: of two creates
(or replicas) reaching for the same volume one gets it, so no two servers are ever handed one volume. The
cache keeper (`engine.caches`) frees what a gone runner held, once Cinder says the volume is `available`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, text, update

from corral.model import CacheVolume, CacheVolumeState, RunnerState
from corral.store.schema import CACHE_VOLUMES as VOLUMES
from corral.store.schema import RUNNERS

CACHE_LOCK_NAMESPACE = 0x636163
"""First key of the per-pool advisory lock taken while a pool's volumes are counted against its `max`."""
TAKE_ATTEMPTS = 5
"""Free volumes tried when others are taking them at the same moment, before booting without one."""

COLUMNS = (
    VOLUMES.c.id,
    VOLUMES.c.pool,
    VOLUMES.c.cloud,
    VOLUMES.c.state,
    VOLUMES.c.volume_id,
    VOLUMES.c.runner,
    VOLUMES.c.size_gb,
    VOLUMES.c.uses,
    VOLUMES.c.created_at,
    VOLUMES.c.state_changed_at,
)


def to_volume(row: Any) -> CacheVolume:
    return CacheVolume(
        id=row[0],
        pool=row[1],
        cloud=row[2],
        state=CacheVolumeState(row[3]),
        volume_id=row[4],
        runner=row[5],
        size_gb=row[6],
        uses=row[7],
        created_at=row[8],
        state_changed_at=row[9],
    )


def take(connection: Connection, pool: str, cloud: str, runner: str, *, now: datetime) -> CacheVolume | None:
    """Hand a free volume of `pool` in `cloud` to `runner`, the most used (the warmest), then the oldest,
    first; None if none is free."""
    for _ in range(TAKE_ATTEMPTS):
        candidate = connection.execute(
            select(VOLUMES.c.id)
            .where(
                VOLUMES.c.pool == pool,
                VOLUMES.c.cloud == cloud,
                VOLUMES.c.state == CacheVolumeState.FREE,
                VOLUMES.c.volume_id.is_not(None),
            )
            .order_by(VOLUMES.c.uses.desc(), VOLUMES.c.created_at, VOLUMES.c.id)
            .limit(1)
        ).scalar()
        if candidate is None:
            return None
        taken = connection.execute(
            update(VOLUMES)
            .where(VOLUMES.c.id == candidate, VOLUMES.c.state == CacheVolumeState.FREE)
            .values(state=CacheVolumeState.HELD, runner=runner, uses=VOLUMES.c.uses + 1, state_changed_at=now)
            .returning(*COLUMNS)
        ).first()
        if taken is not None:
            return to_volume(taken)
    return None


def reserve_new(
    connection: Connection, pool: str, cloud: str, runner: str, *, size_gb: int, most: int, now: datetime
) -> CacheVolume | None:
    """Write the row of a new volume for `runner` (`creating`), unless the pool already has `most`; on
    PostgreSQL the pool's count is taken under a lock held to the commit, so two creates cannot both pass it."""
    if connection.dialect.name == "postgresql":
        connection.execute(
            text("SELECT pg_advisory_xact_lock(:namespace, hashtext(:pool))"),
            {"namespace": CACHE_LOCK_NAMESPACE, "pool": pool},
        )
    kept = connection.execute(select(func.count()).select_from(VOLUMES).where(VOLUMES.c.pool == pool)).scalar_one()
    if int(kept) >= most:
        return None
    volume = CacheVolume(
        id=secrets.token_hex(5),
        pool=pool,
        cloud=cloud,
        state=CacheVolumeState.CREATING,
        volume_id=None,
        runner=runner,
        size_gb=size_gb,
        uses=1,
        created_at=now,
        state_changed_at=now,
    )
    connection.execute(
        insert(VOLUMES).values(
            id=volume.id,
            pool=pool,
            cloud=cloud,
            state=volume.state,
            runner=runner,
            size_gb=size_gb,
            uses=1,
            created_at=now,
            state_changed_at=now,
        )
    )
    return volume


def created(connection: Connection, volume_id: str, cinder_id: str, *, now: datetime) -> None:
    """Cinder made the row's volume: it is held by the runner it was made for."""
    connection.execute(
        update(VOLUMES)
        .where(VOLUMES.c.id == volume_id)
        .values(volume_id=cinder_id, state=CacheVolumeState.HELD, state_changed_at=now)
    )


def of_pools(connection: Connection) -> list[CacheVolume]:
    """Every cache volume the store knows, of every pool, the oldest first."""
    query = select(*COLUMNS).order_by(VOLUMES.c.pool, VOLUMES.c.created_at, VOLUMES.c.id)
    return [to_volume(row) for row in connection.execute(query)]


def free(connection: Connection, volume_id: str, holder: str | None, *, now: datetime) -> bool:
    """A held volume whose runner is gone, and which Cinder says is `available`: free for the next server.
    Guarded by the holder read with it (a volume handed on meanwhile stays with its new runner)."""
    guard = VOLUMES.c.runner.is_(None) if holder is None else VOLUMES.c.runner == holder
    freed = connection.execute(
        update(VOLUMES)
        .where(VOLUMES.c.id == volume_id, VOLUMES.c.state == CacheVolumeState.HELD, guard)
        .values(state=CacheVolumeState.FREE, runner=None, state_changed_at=now)
    )
    return freed.rowcount == 1


def retire(connection: Connection, volume_id: str, *, now: datetime) -> bool:
    """A free volume the pool no longer keeps (its pool or setting went, or `max` fell): `deleting`, so that
    nothing takes it while Cinder deletes it."""
    retired = connection.execute(
        update(VOLUMES)
        .where(VOLUMES.c.id == volume_id, VOLUMES.c.state == CacheVolumeState.FREE)
        .values(state=CacheVolumeState.DELETING, state_changed_at=now)
    )
    return retired.rowcount == 1


def forget(connection: Connection, volume_ids: Iterable[str]) -> None:
    """Rows whose volumes are gone from Cinder (deleted, or lost)."""
    wanted = list(volume_ids)
    if wanted:
        connection.execute(delete(VOLUMES).where(VOLUMES.c.id.in_(wanted)))


def counts(connection: Connection) -> dict[str, dict[str, int]]:
    """Volumes by pool and state (the API's and metrics' figures)."""
    rows = connection.execute(
        select(VOLUMES.c.pool, VOLUMES.c.state, func.count()).group_by(VOLUMES.c.pool, VOLUMES.c.state)
    )
    found: dict[str, dict[str, int]] = {}
    for pool, state, count in rows:
        found.setdefault(pool, {})[state] = int(count)
    return found


def condemn(connection: Connection, volume_id: str, *, now: datetime) -> None:
    """A volume Cinder has in error: `deleting`, whoever held it (the pool makes a new one when it needs one)."""
    connection.execute(
        update(VOLUMES)
        .where(VOLUMES.c.id == volume_id)
        .values(state=CacheVolumeState.DELETING, runner=None, state_changed_at=now)
    )


def runner_states(connection: Connection, names: list[str]) -> dict[str, tuple[RunnerState, str | None]]:
    """The state and server id of each of these runners, by name (a name with no row is left out)."""
    found: dict[str, tuple[RunnerState, str | None]] = {}
    for start in range(0, len(names), 500):
        rows = connection.execute(
            select(RUNNERS.c.name, RUNNERS.c.state, RUNNERS.c.server_id).where(
                RUNNERS.c.name.in_(names[start : start + 500])
            )
        )
        found.update((name, (RunnerState(state), server_id)) for name, state, server_id in rows)
    return found


def starts(connection: Connection, pools: list[str]) -> dict[str, dict[str, int]]:
    """How the runners of these pools started (`runners.cache`: warm, cold, none), by pool, over the history
    kept (`retention`)."""
    if not pools:
        return {}
    rows = connection.execute(
        select(RUNNERS.c.pool, RUNNERS.c.cache, func.count())
        .where(RUNNERS.c.pool.in_(pools), RUNNERS.c.cache.is_not(None))
        .group_by(RUNNERS.c.pool, RUNNERS.c.cache)
    )
    found: dict[str, dict[str, int]] = {}
    for pool, start, count in rows:
        found.setdefault(pool, {})[start] = int(count)
    return found
