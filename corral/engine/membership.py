"""Which pools this replica works, and what the database says of the others.

On PostgreSQL, replicas share the pools by leases (`engine/leases.py`): each lease tick renews, takes and hands
over pools, and the workers and scale-set listeners follow what this replica holds. The pools other replicas
hold are read from the database: their drains, their quota waits (the quota budgets account for them), their
runners and readiness for the API. On SQLite this replica holds every pool, and these reads describe it.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from corral import __version__
from corral.clock import SYSTEM_CLOCK, Clock
from corral.cloud.quota import ServerCost
from corral.engine.leases import HOUSEKEEPING, LeaseKeeper
from corral.engine.pauses import PoolPauses
from corral.engine.quota import QuotaBudget
from corral.engine.rollouts import Rollouts
from corral.engine.running import Running
from corral.engine.scalesets import ScaleSetIntake
from corral.engine.status import PoolSnapshot
from corral.engine.supervisor import ActionKind, Supervisor
from corral.engine.workers import KeyedWorkers
from corral.model import PoolStatus
from corral.store import Store, jobs, leases, pools, runners
from corral.warmth import WarmForecast


class Membership:
    def __init__(
        self,
        running: Running,
        store: Store,
        *,
        leases: LeaseKeeper,
        workers: KeyedWorkers,
        scalesets: ScaleSetIntake,
        supervisor: Supervisor,
        pauses: PoolPauses,
        rollouts: Rollouts,
        quotas: dict[str, QuotaBudget],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.running = running
        self._clock = clock
        self.store = store
        self.leases = leases
        self.workers = workers
        self.scalesets = scalesets
        self.supervisor = supervisor
        self.pauses = pauses
        self.rollouts = rollouts
        self.quotas = quotas
        """Each cloud's quota budget (the same dict the engine's other parts read; a reload edits it)."""
        self.started_at = clock.now()

    def restore(self, statuses: dict[str, PoolStatus], holds: Callable[[str], bool]) -> None:
        """Adopt what the status rows say of the pools `holds` names: operators' drains (of every pool), and
        the create pauses and rollouts their former holder left."""
        self.running.drained = pools.drained(statuses)
        self.pauses.restore(statuses, holds)
        self.rollouts.restore(statuses, holds)

    async def sync_workers(self) -> None:
        """A worker for every configured pool and every pool that still has runners, of those this replica
        holds (all of them on SQLite)."""
        live = await self.store.run(runners.live_pools)
        wanted = set(self.running.config.pools) | live
        self.leases.wanted = wanted | {HOUSEKEEPING}
        held = {pool for pool in wanted if self.leases.holds(pool)}
        self.workers.ensure(held)
        self.scalesets.ensure(held)
        for name in self.scalesets.retiring - live:
            # Taken out of scale-set intake with no runner left: its scale set goes now (else after the last).
            self.supervisor.start(ActionKind.SCALE_SET, f"scale-set-delete:{name}", self.scalesets.forget(name))

    async def lease_tick(self) -> set[str]:
        """Renew, take and hand over pools (PostgreSQL); workers follow what this replica holds. Returns the
        pools taken."""
        gained, lost = await self.leases.tick()
        if not gained and not lost:
            return gained
        if gained:
            # A pool taken over may have been drained or undrained on its former owner, and backing off.
            self.restore(await self.store.run(pools.statuses), gained.__contains__)
        await self.sync_workers()
        for pool in gained:
            self.workers.wake(pool)
        return gained

    async def read_pool_statuses(self) -> None:
        """Read every pool's status row: operators' drains, and the quota waits of pools others hold."""
        statuses = await self.store.run(pools.statuses)
        drained = pools.drained(statuses)
        changed, self.running.drained = drained ^ self.running.drained, drained
        for pool in changed:
            self.workers.wake(pool)
        waits = self._others_waiting(statuses)
        for cloud, budget in self.quotas.items():
            budget.others_waiting(wait for in_cloud, wait in waits if in_cloud == cloud)

    def _others_waiting(
        self, statuses: dict[str, PoolStatus]
    ) -> list[tuple[str, tuple[str, int, ServerCost, int, float]]]:
        """The quota waits of pools other replicas hold, as their status rows say, each with the cloud whose
        quota it waits for (the holder says which; rows that do not: the pool's first)."""
        config = self.running.config
        now, elsewhere = self._clock.now(), set(self._held_elsewhere())
        waits = []
        for name, status in statuses.items():
            if name not in elsewhere or not status.quota_waiting or status.quota_waiting_at is None:
                continue
            cost = ServerCost.of(status.server_cost)
            if cost is not None:
                age = max((now - status.quota_waiting_at).total_seconds(), 0.0)
                cloud = status.quota_waiting_cloud or config.clouds_of(name)[0]
                waits.append((cloud, (name, config.pools[name].priority, cost, status.quota_waiting, age)))
        return waits

    def sharing_quota(self, _pool: str) -> list[str]:
        """Every pool, with replicas (any may have another replica's creates under way: one held elsewhere, or
        one taken over from a replica that stalled past its lease); none on SQLite, where this replica makes
        every create."""
        return list(self.running.config.pools) if self.leases.enabled else []

    def _held_elsewhere(self, pool: str | None = None) -> list[str]:
        """The pools other replicas hold, `pool` aside (none on SQLite, where this replica holds all)."""
        if not self.leases.enabled:
            return []
        return [name for name in self.running.config.pools if name != pool and not self.leases.holds(name)]

    # -- what the API reads -----------------------------------------------------------------------

    async def holders(self) -> dict[str, str]:
        """Pool -> the replica acting for it (on SQLite, this one for every pool)."""
        if not self.leases.enabled:
            return dict.fromkeys(set(self.running.config.pools) | self.workers.keys, self.leases.replica)
        return {row.pool: row.holder for row in await self.store.run(leases.leases) if row.valid}

    async def membership(self) -> tuple[list[leases.ReplicaRow], list[leases.LeaseRow]]:
        """The replicas on this database and the leases (on SQLite: this process, holding every pool)."""
        if self.leases.enabled:
            return await self.store.run(leases.replicas), await self.store.run(leases.leases)
        now = self._clock.now()
        me = leases.ReplicaRow(self.leases.replica, __version__, os.getpid(), self.started_at, now)
        held = [leases.LeaseRow(pool, me.id, 0, self.started_at, now, True) for pool in await self.holders()]
        return [me], held

    async def remote_snapshots(self, names: Iterable[str]) -> dict[str, PoolSnapshot]:
        """Pools another replica holds, as the database has them: their runners by state, queued jobs, and
        the readiness their holder last published (its in-memory snapshot is not ours to read)."""
        names = sorted(names)
        if not names:
            return {}
        counts = await self.store.run(runners.counts)
        statuses = await self.store.run(pools.statuses)
        snapshots = {}
        for name in names:
            status = statuses.get(name)
            snapshots[name] = PoolSnapshot(
                name,
                Counter({state: n for (pool, state), n in counts.items() if pool == name}),
                queued_jobs=await self.store.run(jobs.queued_count, name),
                ready=status.ready if status else False,
                reason=status.reason if status else "not reconciled yet",
                removed=status.removed if status else False,
                scale_set_id=status.scale_set_id if status else None,
                session_open=bool(status and status.scale_set_session),
                **_warm_of(status),
            )
        return snapshots


def _warm_of(status: PoolStatus | None) -> dict[str, Any]:
    """An auto pool's warm runners and forecast as its holder published them (nothing if it did not)."""
    if status is None or not status.warm or status.warm.get("forecast") is None:
        return {}
    return {"min_idle": status.warm.get("min_idle"), "warm_forecast": WarmForecast(**status.warm["forecast"])}
