"""Which pools a replica acts for (`engine.leases`): the spread of pools over replicas, and the single replica of
a SQLite store, which holds every pool without writing a lease (a store file in tmp_path)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.engine.backoff import LogOnce
from corral.engine.leases import HOUSEKEEPING, LeaseKeeper, spread
from corral.store import Store


@pytest.mark.parametrize(
    ("pools", "replicas", "loads"),
    [
        (1, 1, [1]),
        (4, 1, [4]),
        (4, 2, [2, 2]),
        (6, 3, [2, 2, 2]),
        (5, 3, [1, 2, 2]),
        (2, 3, [1, 1]),
        (12, 4, [3, 3, 3, 3]),
        (30, 5, [6, 6, 6, 6, 6]),
    ],
)
def test_each_replica_holds_at_most_its_share_and_none_is_left_idle_when_pools_suffice(
    pools: int, replicas: int, loads: list[int]
) -> None:
    owners = spread([f"pool-{index}" for index in range(pools)], [f"replica-{index}" for index in range(replicas)])
    assert sorted(Counter(owners.values()).values()) == loads


def test_a_replica_joining_takes_only_pools_from_others_and_no_more_than_its_share() -> None:
    pools = [f"pool-{index}" for index in range(12)] + [HOUSEKEEPING]
    before = spread(pools, ["a", "b", "c"])
    after = spread(pools, ["a", "b", "c", "d"])
    taken = {pool for pool in pools if after[pool] == "d"}
    moved = {pool for pool in pools if before[pool] != after[pool]}
    assert len(taken) == 4  # ceil(13 / 4)
    assert len(moved - taken) <= 2, "pools between the old replicas barely move"


def test_the_same_pool_listed_twice_counts_once() -> None:
    assert spread(["alpha", "alpha"], ["a", "a"]) == {"alpha": "a"}


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    yield store
    store.close()


def keeper(store: Store, busy: set[str] | None = None) -> LeaseKeeper:
    return LeaseKeeper(
        store,
        "replica-1",
        lease_s=30.0,
        busy=lambda pool: pool in (busy or set()),
        log_once=LogOnce(logging.getLogger("tests.unit.leases")),
        clock=lambda: 0.0,
    )


def test_on_sqlite_the_one_replica_acts_for_every_pool_and_its_writes_carry_no_fence(sqlite_store: Store) -> None:
    leases = keeper(sqlite_store)
    leases.wanted = {"small", "big"}
    assert leases.enabled is False
    assert [leases.holds(pool) for pool in ("small", "big", "never-configured", HOUSEKEEPING)] == [True] * 4
    assert leases.fence("small") is None


def test_on_sqlite_a_tick_gains_and_loses_nothing_and_leaving_lets_nothing_go(sqlite_store: Store) -> None:
    leases = keeper(sqlite_store, busy={"small"})
    leases.wanted = {"small"}

    async def scenario() -> tuple[set[str], set[str]]:
        ticked = await leases.tick()
        await leases.leave()
        return ticked

    assert asyncio.run(scenario()) == (set(), set())
    assert leases.held == {}
    assert leases.holds("small") is True


@pytest.mark.parametrize(("lease_s", "every"), [(30.0, 10.0), (90.0, 30.0), (3.0, 1.0)])
def test_leases_are_renewed_three_times_per_lease_time(sqlite_store: Store, lease_s: float, every: float) -> None:
    leases = keeper(sqlite_store)
    leases.lease_s = lease_s
    assert leases.renew_every_s == every
