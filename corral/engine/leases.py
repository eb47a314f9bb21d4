"""Which pools this replica acts for: leases on PostgreSQL, every pool on SQLite.

Every `lease_time / 3` the keeper says this replica is alive, renews the leases it holds, and takes the
pools that are free and fall to it. Pools are spread by rendezvous hashing with bounded load over the live
replicas (`spread`): every replica computes the same answer from the same lists, each gets its share, and
a replica joining or leaving moves few pools. A replica holding a pool
that now falls to another lets it go once no create or delete of that pool is under way, so a scale-out
never cuts an action short; a replica that stops renewing (killed, paused, partitioned) loses its pools
when their leases expire and the others take them.

On SQLite there is one replica (the serve lock sees to that): the keeper holds every pool, writes carry
no fence, and nothing here touches the database.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Callable, Iterable
from datetime import timedelta

from corral import __version__
from corral.clock import SYSTEM_CLOCK, ClockLike, as_clock
from corral.engine.backoff import LogOnce
from corral.metrics import LEASE_ACQUISITIONS, LEASE_FAILOVER_SECONDS, LEASE_LOSSES, POOLS_HELD
from corral.store import Store, leases
from corral.store.database import known_revisions, schema_revision
from corral.store.leases import Fence, LeaseLost

logger = logging.getLogger("corral.engine")

HOUSEKEEPING = "~housekeeping"
"""A lease for what one replica does for all: job upkeep (asking GitHub about jobs), pruning history, and
deleting servers of pools no replica configures. `~` cannot start a pool name."""


def spread(pools: Iterable[str], replicas: Iterable[str]) -> dict[str, str]:
    """Which replica each pool falls to: rendezvous hashing with bounded load.

    Each pool prefers the replicas in the order of their hash with it (highest first) and goes to the first
    that has fewer than its share, ceil(pools / replicas): so every replica gets a share (plain rendezvous
    can leave one with nothing while another holds three), and a replica joining or leaving moves few pools.
    Pools are placed in name order, so every replica computes the same answer from the same lists.
    """
    names = sorted(set(replicas))
    wanted = sorted(set(pools))
    if not names:
        return {}
    share = math.ceil(len(wanted) / len(names))
    load = dict.fromkeys(names, 0)
    owners: dict[str, str] = {}
    for pool in wanted:

        def weight(replica: str, pool: str = pool) -> bytes:
            return hashlib.blake2b(f"{pool}\0{replica}".encode(), digest_size=8).digest()

        owner = next(replica for replica in sorted(names, key=weight, reverse=True) if load[replica] < share)
        owners[pool] = owner
        load[owner] += 1
    return owners


class LeaseKeeper:
    """This replica's leases, renewed and rebalanced by `tick`; `fence` gives writes their fencing number."""

    def __init__(
        self,
        store: Store,
        replica: str,
        *,
        lease_s: float,
        busy: Callable[[str], bool],
        log_once: LogOnce,
        clock: ClockLike = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.replica = replica
        self.lease_s = lease_s
        self.enabled = not store.is_sqlite
        self.held: dict[str, Fence] = {}
        self.wanted: set[str] = set()
        """The pools this replica would act for (configured, or with runners left), set by the engine."""
        self._busy = busy
        self._log_once = log_once
        self._clock = as_clock(clock)
        self._free_since: dict[str, float] = {}
        self._beaten = False

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / 3

    def holds(self, pool: str) -> bool:
        return not self.enabled or pool in self.held

    def fence(self, pool: str) -> Fence | None:
        """The fence a write for `pool` carries (None on SQLite: nothing to fence); LeaseLost if not held."""
        if not self.enabled:
            return None
        fence = self.held.get(pool)
        if fence is None:
            raise LeaseLost(pool)
        return fence

    async def tick(self) -> tuple[set[str], set[str]]:
        """Heartbeat, renew, take and hand over; returns the pools gained and the pools lost or let go."""
        if not self.enabled:
            return set(), set()
        revision = await self.store.run(schema_revision)
        if revision is not None and revision not in known_revisions():
            # A newer corral migrated the database during a rolling upgrade: acting on a schema this code does
            # not know could undo its work. Let every pool go; the upgraded replicas take them.
            self._log_once.warning(
                "schema-too-new",
                f"the database's schema is now at revision {revision!r}, newer than this corral knows: acting for "
                "no pool any more; upgrade this replica",
            )
            lost = set(self.held)
            await self.leave()
            return set(), lost
        ttl = timedelta(seconds=self.lease_s)
        twin = await self.store.run(leases.heartbeat, self.replica, __version__, os.getpid(), ttl)
        # At the first heartbeat another pid under this name is most likely this replica before a kill -9 and
        # restart; after that, it can only be a second live process that wrote since this one last did.
        first_beat, self._beaten = not self._beaten, True
        if twin is not None and not first_beat:
            self._log_once.warning(
                "replica-twin",
                f"another live process (pid {twin}) calls itself replica {self.replica!r}: give each replica its "
                "own replica_name, or they take each other's pools in turn",
            )
        live = sorted({row.id for row in await self.store.run(leases.replicas, ttl)} | {self.replica})
        lost = self._forget(set(self.held) - await self.store.run(leases.renew, list(self.held.values()), ttl))
        for pool in lost:
            LEASE_LOSSES.labels(pool).inc()
            logger.warning("pool %s: lease lost (not renewed in time); another replica acts for it now", pool)
        current = {row.pool: row for row in await self.store.run(leases.leases)}
        # Spread what anybody wants now: the pools this replica wants and those another one holds.
        owners = spread(self.wanted | {pool for pool, row in current.items() if row.valid}, live)
        gained: set[str] = set()
        for pool in sorted(self.wanted - set(self.held)):
            row = current.get(pool)
            if row is not None and row.valid and row.holder != self.replica:
                continue
            if owners.get(pool) != self.replica and not self._unclaimed_too_long(pool):
                continue
            taken = await self.store.run(leases.acquire, pool, self.replica, ttl)
            if taken is None:
                continue
            fence, expired_at = taken
            self._free_since.pop(pool, None)
            self.held[pool] = fence
            gained.add(pool)
            LEASE_ACQUISITIONS.labels(pool).inc()
            if expired_at is not None:
                LEASE_FAILOVER_SECONDS.observe(max((self._clock.now() - expired_at).total_seconds(), 0.0))
            logger.info("pool %s: lease acquired (fence %d)", pool, fence.number)
        handed = {
            pool
            for pool in self.held
            if (pool not in self.wanted or owners.get(pool) != self.replica) and not self._busy(pool)
        }
        if handed:
            await self.store.run(leases.release, [self.held[pool] for pool in handed])
            self._forget(handed)
            for pool in sorted(handed):
                logger.info("pool %s: lease handed over (it falls to another replica now)", pool)
        POOLS_HELD.set(len(self.held))
        return gained, lost | handed

    def _unclaimed_too_long(self, pool: str) -> bool:
        """A free pool its rendezvous owner has not taken within a lease time (it may not configure that pool,
        say in the middle of a rolling config change): any replica that wants it takes it then."""
        since = self._free_since.setdefault(pool, self._clock.monotonic())
        return self._clock.monotonic() - since > self.lease_s

    def _forget(self, pools: set[str]) -> set[str]:
        for pool in pools:
            self.held.pop(pool, None)
        return pools

    async def leave(self) -> None:
        """A clean stop: let every pool go and leave the replica list, so the others take over at once."""
        if not self.enabled:
            return
        held = list(self.held.values())
        self.held.clear()
        await self.store.run(leases.release, held)
        await self.store.run(leases.leave, self.replica)
        POOLS_HELD.set(0)
