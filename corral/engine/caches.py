"""Cache volumes (`cache_volumes`): a pool's Cinder volumes, handed to its new servers one each.

Two duties:
- `take`, for the creator: a free volume of the pool for a new runner (the most used first), or while the pool
  has fewer than `max`, a new one (its row written before Cinder is asked, then waited for until Cinder says
  `available`, as Nova attaches only an available volume). At `max`, or when Cinder cannot make one, the
  runner boots without a cache volume: a job never waits for a cache, and the log says why once.
- `keep`, after each look, on the housekeeping replica: the join of Cinder's listing of the installation's
  cache volumes with the store's rows. A volume whose runner is gone is free again once Cinder says it is
  `available` (Nova detaches it when it deletes the server); one in error is deleted (the pool makes a new
  one when it needs it); the volumes of a pool removed, or whose `cache_volumes` was, and free ones above a
  lowered `max`, are deleted; a volume no row knows (a create whose answer was lost) is deleted, and a row
  whose volume is gone from Cinder is forgotten.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TypeVar

from corral.clock import Clock
from corral.cloud.clouds import CloudSet
from corral.cloud.provider import META_CACHE, META_INSTALLATION, META_POOL, CacheVolumeSpec, CloudError, CloudVolume
from corral.config import CorralConfig, Placement
from corral.engine.backoff import LogOnce
from corral.engine.quota import QuotaBudget
from corral.executors import call_blocking
from corral.metrics import CACHE_STARTS, CACHE_VOLUMES, CLOUD_CALLS
from corral.model import LIVE_STATES, CacheStart, CacheVolume, CacheVolumeState, Runner, RunnerState
from corral.store import Store
from corral.store import cache_volumes as store_volumes

logger = logging.getLogger("corral.engine")

T = TypeVar("T")

READY_WAIT_S = 120.0
"""How long a new volume may stay `creating` before its runner boots without it (it is kept for the next)."""
READY_POLL_S = (0.2, 0.5, 1.0, 2.0)
"""The pauses between looks at a new volume's status: Cinder makes a blank volume in a second or a few."""
ORPHAN_GRACE = timedelta(minutes=10)
"""How long a `creating` row without a Cinder id is left to the create that wrote it, when Cinder has no
volume of its name: then it is forgotten (Cinder never made it)."""
ADOPT_AFTER = timedelta(seconds=READY_WAIT_S + 60)
"""When a `creating` row whose volume Cinder lists by its name is taken to have lost its create's answer (the
create would have recorded it within its wait), and the volume is recorded as the row's."""
ON_ITS_WAY_OUT = frozenset({RunnerState.FINISHED, RunnerState.FAILED, RunnerState.DELETING})
"""Runner states after which a server is only ever deleted: once the look no longer lists the runner's server,
its volume is free as soon as Cinder says `available`, without waiting for the runner to read `deleted`."""
KEPT_HELD = (CacheVolumeState.CREATING, CacheVolumeState.HELD)
"""The states in which a volume counts against its pool's `max` before any free one does."""
DETACHED = ("available", "error")
"""Cinder's statuses in which a volume is attached to nothing and may be deleted."""


@dataclass(frozen=True)
class Taken:
    """What a new runner's server gets: a volume id (None: none) and how the runner starts."""

    volume_id: str | None
    start: CacheStart


@dataclass(frozen=True)
class CacheSummary:
    """A pool's cache volumes, for the API and the dashboard: how many in each state, and how its runners
    started (over the history kept)."""

    max: int
    """The pool's `cache_volumes.max` (0: the setting is gone and its volumes are being deleted)."""
    states: dict[str, int]
    starts: dict[str, int]

    @property
    def warm_share(self) -> float | None:
        """The share of the pool's runners that started with a volume an earlier one used (None: none yet)."""
        total = sum(self.starts.values())
        return self.starts.get(CacheStart.WARM.value, 0) / total if total else None


class CacheVolumes:
    def __init__(
        self,
        store: Store,
        clouds: CloudSet,
        executor: Executor,
        log_once: LogOnce,
        clock: Clock,
        quotas: Mapping[str, QuotaBudget] | None = None,
    ) -> None:
        """`quotas`: each cloud's quota budget (the engine's), which a new volume must fit, as a server must."""
        self._quotas = quotas or {}
        self._store = store
        self._clouds = clouds
        self._executor = executor
        self._log_once = log_once
        self._clock = clock
        self._published: set[str] = set()
        """The pools whose gauges the last round set."""
        self._kept_any = True
        """Whether the last round found any row or volume: a corral without caches stops looking (until a
        pool asks for them) after one round has found nothing left of earlier ones."""

    def idle(self, config: CorralConfig) -> bool:
        """Nothing to keep or show: no pool asks for cache volumes, the last round found none left and left no
        gauge to take down."""
        configured = any(pool.cache_volumes for pool in config.pools.values())
        return not configured and not self._kept_any and not self._published

    async def summary(self, config: CorralConfig) -> dict[str, CacheSummary]:
        """Every pool with cache volumes (set in the config, or still left from an earlier one)."""
        if self.idle(config):
            return {}
        states = await self._store.run(store_volumes.counts)
        pools = sorted(set(states) | {name for name, pool in config.pools.items() if pool.cache_volumes})
        starts = await self._store.run(store_volumes.starts, pools) if pools else {}
        summaries = {}
        for name in pools:
            pool = config.pools.get(name)
            settings = pool.cache_volumes if pool is not None else None
            summaries[name] = CacheSummary(
                max=settings.max if settings is not None else 0,
                states={state.value: states.get(name, {}).get(state.value, 0) for state in CacheVolumeState},
                starts={start.value: starts.get(name, {}).get(start.value, 0) for start in CacheStart},
            )
        return summaries

    # -- a new runner's volume ---------------------------------------------------------------------------

    async def take(self, config: CorralConfig, runner: Runner, placement: Placement) -> Taken | None:
        """A cache volume for `runner`'s server in `placement`'s cloud; None for a pool without caches."""
        settings = config.pools[runner.pool].cache_volumes
        if settings is None:
            return None
        now = self._clock.now()
        taken = await self._store.run(store_volumes.take, runner.pool, placement.cloud, runner.name, now=now)
        if taken is not None and taken.volume_id is not None:
            return self._started(runner, Taken(taken.volume_id, CacheStart.WARM if taken.uses > 1 else CacheStart.COLD))
        if not self._fits(placement.cloud, settings.size_gb):
            self._log_once.warning(
                f"cache:{runner.pool}:quota",
                f"pool {runner.pool}: the project's volume quota has no room for another {settings.size_gb} GB cache "
                "volume; its new runners boot without one until it has",
            )
            return self._started(runner, Taken(None, CacheStart.NONE))
        reserved = await self._store.run(
            store_volumes.reserve_new,
            runner.pool,
            placement.cloud,
            runner.name,
            size_gb=settings.size_gb,
            most=settings.max,
            now=now,
        )
        if reserved is None:
            self._log_once.warning(
                f"cache:{runner.pool}:full",
                f"pool {runner.pool}: its {settings.max} cache volumes are all in use; its new runners boot "
                "without one (raise cache_volumes.max for more)",
            )
            return self._started(runner, Taken(None, CacheStart.NONE))
        volume_id = await self._create(config, reserved, placement)
        return self._started(runner, Taken(volume_id, CacheStart.COLD if volume_id else CacheStart.NONE))

    def _fits(self, cloud: str, size_gb: int) -> bool:
        """Whether the cloud's last quota reading (less this replica's creates since) has room for one more
        volume of `size_gb`: a create Cinder would refuse is not sent (no reading yet: it is)."""
        budget = self._quotas.get(cloud)
        left = budget.left() if budget is not None else None
        if left is None:
            return True
        return (left.volumes is None or left.volumes >= 1) and (left.gigabytes is None or left.gigabytes >= size_gb)

    def _started(self, runner: Runner, taken: Taken) -> Taken:
        CACHE_STARTS.labels(runner.pool, taken.start.value).inc()
        return taken

    async def _create(self, config: CorralConfig, reserved: CacheVolume, placement: Placement) -> str | None:
        """Make the row's volume and wait until Cinder says it is available; None (the runner boots without
        it) if Cinder refuses or is slow: a volume it made stays the pool's, for a later runner."""
        settings = config.pools[reserved.pool].cache_volumes
        assert settings is not None
        spec = CacheVolumeSpec(
            name=reserved.name,
            size_gb=settings.size_gb,
            type=settings.type,
            availability_zone=placement.availability_zone,
            metadata={META_INSTALLATION: config.installation, META_POOL: reserved.pool, META_CACHE: "1"},
            cloud=placement.cloud,
        )
        try:
            volume = await self._cloud("create_volume", self._clouds.create_cache_volume, spec)
        except CloudError as exc:
            await self._store.run(store_volumes.forget, [reserved.id])
            self._log_once.warning(
                f"cache:{reserved.pool}:create",
                f"pool {reserved.pool}: Cinder did not make a cache volume, its runner boots without one: {exc}",
            )
            return None
        await self._store.run(store_volumes.created, reserved.id, volume.id, now=self._clock.now())
        logger.info("pool %s: cache volume %s (%s) made", reserved.pool, reserved.name, volume.id)
        waited = 0.0
        for attempt in itertools.count():
            if volume.status == "available":
                self._log_once.clear(f"cache:{reserved.pool}:create")
                return volume.id
            if volume.is_error or waited >= READY_WAIT_S:
                break
            pause = READY_POLL_S[min(attempt, len(READY_POLL_S) - 1)]
            await self._clock.sleep(pause)
            waited += pause
            try:
                found = await self._cloud("show_volume", self._clouds.volume, volume.id, placement.cloud)
            except CloudError:
                continue
            if found is None:
                break
            volume = found
        self._log_once.warning(
            f"cache:{reserved.pool}:create",
            f"pool {reserved.pool}: cache volume {volume.id} is {volume.status}, not available; its runner boots "
            "without it",
        )
        return None

    async def _cloud(self, operation: str, call: Callable[..., T], *args: object) -> T:
        try:
            result = await call_blocking(self._executor, call, *args)
        except CloudError as exc:
            CLOUD_CALLS.labels(operation, type(exc).__name__).inc()
            raise
        CLOUD_CALLS.labels(operation, "ok").inc()
        return result

    # -- the keeper's round --------------------------------------------------------------------------------

    async def keep(self, config: CorralConfig, servers: Mapping[str, set[str]] | None = None) -> None:
        """Join Cinder's cache volumes with the store's rows, in every cloud, and act on what differs.
        `servers`: the ids of corral's servers the last look listed, by cloud (a cloud it did not list is
        absent): a volume still attached to a server gone from there is detached."""
        if self.idle(config):
            return
        rows = await self._store.run(store_volumes.of_pools)
        found_any = bool(rows)
        for cloud in self._clouds.names:
            try:
                listed = await self._cloud("list_volumes", self._clouds.list_cache_volumes, cloud)
            except CloudError as exc:
                self._log_once.warning(f"cache:list:{cloud}", f"cannot list cache volumes in cloud {cloud}: {exc}")
                found_any = True  # not known to be empty: look again next round
                continue
            self._log_once.clear(f"cache:list:{cloud}")
            found_any |= bool(listed)
            mine = [row for row in rows if row.cloud == cloud]
            await self._keep_cloud(config, cloud, mine, listed, (servers or {}).get(cloud))
        self._kept_any = found_any
        self._publish(await self._store.run(store_volumes.counts), config)

    async def _keep_cloud(
        self,
        config: CorralConfig,
        cloud: str,
        rows: list[CacheVolume],
        listed: list[CloudVolume],
        servers: set[str] | None,
    ) -> None:
        by_id = {volume.id: volume for volume in listed}
        settled = await self._settle(cloud, rows, by_id, servers)
        now = self._clock.now()
        for pool in sorted({row.pool for row in settled}):
            settings = config.pools[pool].cache_volumes if pool in config.pools else None
            held = sum(1 for row in settled if row.pool == pool and row.state in KEPT_HELD)
            room = max(settings.max - held, 0) if settings is not None else 0
            free = sorted(
                (row for row in settled if row.pool == pool and row.state is CacheVolumeState.FREE),
                key=lambda row: (-row.uses, row.created_at, row.id),
            )
            for row in free[room:]:
                if await self._store.run(store_volumes.retire, row.id, now=now):
                    why = (
                        "its pool keeps no cache volumes now" if settings is None else f"its pool keeps {settings.max}"
                    )
                    logger.info("cache volume %s of pool %s: deleting it (%s)", row.volume_id, pool, why)
                    settled[settled.index(row)] = replace(row, state=CacheVolumeState.DELETING)
        for row in settled:
            volume = by_id.get(row.volume_id or "")
            if row.state is CacheVolumeState.DELETING and volume is not None and self._detached(volume):
                await self._delete(volume)
        known = {row.volume_id for row in rows if row.volume_id} | {row.name for row in rows}
        for volume in listed:
            if volume.id not in known and volume.name not in known and self._detached(volume):
                logger.warning(
                    "cache volume %s (%s) in cloud %s: no pool's record holds it; deleting it",
                    volume.id,
                    volume.name,
                    cloud,
                )
                await self._delete(volume)

    async def _settle(
        self, cloud: str, rows: list[CacheVolume], by_id: dict[str, CloudVolume], servers: set[str] | None
    ) -> list[CacheVolume]:
        """The rows after what Cinder says of their volumes: a volume whose runner is gone and which is
        available is free again (still attached to that runner's gone server: detached, and free at the next
        round); one in error is to be deleted; a row whose volume is gone is forgotten (as is a `creating` row
        whose create never answered)."""
        now = self._clock.now()
        by_name = {volume.name: volume for volume in by_id.values()}
        holders = sorted({row.runner for row in rows if row.runner and row.state is CacheVolumeState.HELD})
        states = await self._store.run(store_volumes.runner_states, holders) if holders else {}
        alive = {name for name, (state, _) in states.items() if state in LIVE_STATES}
        # A runner on its way out whose server the look no longer listed holds nothing, a look before it reads
        # `deleted`; one that never got a server id may yet get a server (a create whose answer was lost).
        holding = {
            name
            for name, (state, server_id) in states.items()
            if state in LIVE_STATES
            and not (
                state in ON_ITS_WAY_OUT and server_id is not None and servers is not None and server_id not in servers
            )
        }
        settled: list[CacheVolume] = []
        gone: list[str] = []
        for row in rows:
            volume = by_id.get(row.volume_id or "")
            made = by_name.get(row.name) if row.volume_id is None else None
            if made is not None and now - row.created_at > ADOPT_AFTER:
                # Its create's answer never came back to be recorded (corral killed, the answer lost): the row
                # is the volume's, held by the runner it was made for, and freed when that runner is gone.
                logger.info("cache volume %s of pool %s: made, though its create was never answered", made.id, row.pool)
                await self._store.run(store_volumes.created, row.id, made.id, now=now)
                settled.append(replace(row, volume_id=made.id, state=CacheVolumeState.HELD))
            elif row.volume_id is None:
                if now - row.created_at > ORPHAN_GRACE:
                    gone.append(row.id)  # Cinder never made it
                else:
                    settled.append(row)
            elif volume is None:
                logger.warning(
                    "cache volume %s of pool %s is gone from cloud %s; forgotten", row.volume_id, row.pool, cloud
                )
                gone.append(row.id)
            elif volume.is_error and row.state is not CacheVolumeState.DELETING:
                logger.warning("cache volume %s of pool %s is in %s: deleting it", volume.id, row.pool, volume.status)
                await self._store.run(store_volumes.condemn, row.id, now=now)
                settled.append(replace(row, state=CacheVolumeState.DELETING))
            elif row.state is CacheVolumeState.HELD and row.runner not in holding and volume.status == "available":
                freed = await self._store.run(store_volumes.free, row.id, row.runner, now=now)
                settled.append(replace(row, state=CacheVolumeState.FREE, runner=None) if freed else row)
            elif row.state is CacheVolumeState.HELD and row.runner not in alive and _left_on_gone(volume, servers):
                await self._detach(volume, row)
                settled.append(row)
            else:
                settled.append(row)
        if gone:
            await self._store.run(store_volumes.forget, gone)
        return settled

    @staticmethod
    def _detached(volume: CloudVolume) -> bool:
        return volume.status in DETACHED and not volume.attached_to

    async def _detach(self, volume: CloudVolume, row: CacheVolume) -> None:
        logger.warning(
            "cache volume %s of pool %s is still attached to server %s, which is gone: detaching it",
            volume.id,
            row.pool,
            ", ".join(volume.attached_to),
        )
        for attachment in volume.attachment_ids:
            try:
                await self._cloud("detach_volume", self._clouds.detach_volume, volume.id, attachment, volume.cloud)
            except CloudError as exc:
                self._log_once.warning("cache:detach", f"detach cache volume {volume.id} failed, trying again: {exc}")

    async def _delete(self, volume: CloudVolume) -> None:
        try:
            await self._cloud("delete_volume", self._clouds.delete_volume, volume.id, volume.cloud)
        except CloudError as exc:
            self._log_once.warning("cache:delete", f"delete cache volume {volume.id} failed, trying again later: {exc}")

    def _publish(self, counts: dict[str, dict[str, int]], config: CorralConfig) -> None:
        """The gauges of every pool with volumes or the setting; a pool with neither any more loses its series
        (rather than showing its last figures for ever)."""
        pools = set(counts) | {name for name, pool in config.pools.items() if pool.cache_volumes}
        for pool in pools:
            for state in CacheVolumeState:
                CACHE_VOLUMES.labels(pool, state.value).set(counts.get(pool, {}).get(state.value, 0))
        for pool in self._published - pools:
            for state in CacheVolumeState:
                with contextlib.suppress(KeyError):
                    CACHE_VOLUMES.remove(pool, state.value)
        self._published = pools


def _left_on_gone(volume: CloudVolume, servers: set[str] | None) -> bool:
    """Attached only to servers the last look of its cloud did not list (None: the cloud was not listed)."""
    return servers is not None and bool(volume.attached_to) and not servers.intersection(volume.attached_to)
