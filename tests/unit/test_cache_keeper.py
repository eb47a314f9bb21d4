"""Cache volumes (`engine.caches`): what a new runner gets, and what the keeper's round does with what Cinder
says, in virtual time against a Cinder held in memory (the sandbox test drives the same code over HTTP)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.counting import StatementCounter
from corral.clock import LoopClock
from corral.cloud.clouds import CloudSet
from corral.cloud.provider import (
    META_CACHE,
    META_INSTALLATION,
    META_POOL,
    CacheVolumeSpec,
    CloudQuotaExceeded,
    CloudServer,
    CloudVolume,
    ServerSpec,
)
from corral.cloud.quota import Headroom, ServerCost
from corral.config import CorralConfig, parse_config
from corral.engine.backoff import LogOnce
from corral.engine.caches import CacheVolumes, Taken
from corral.engine.quota import QuotaBudget
from corral.executors import inline
from corral.metrics import REGISTRY
from corral.model import CacheStart, CacheVolumeState, Reason, Runner, RunnerState, Transition
from corral.store import IN_MEMORY, Store, cache_volumes, runners
from corral.store.runners import NewRunner
from tests.unit import virtual_time

START = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


class MemoryCinder:
    """A project's volumes, answering as Cinder does; `creating_for` keeps a new volume `creating` that long."""

    def __init__(self, creating_for: float = 0.0, refuse: Exception | None = None) -> None:
        self.volumes: dict[str, CloudVolume] = {}
        self._ids = itertools.count(1)
        self.created = 0
        self.deleted: list[str] = []
        self.detached: list[tuple[str, str]] = []
        self.creating_for = creating_for
        self.refuse = refuse

    def add(self, name: str, status: str, pool: str = "small", attached_to: tuple[str, ...] = ()) -> CloudVolume:
        volume = CloudVolume(f"vol-{next(self._ids)}", name, status, 5, "corral", pool, attached_to)
        self.volumes[volume.id] = volume
        return volume

    def list_cache_volumes(self) -> list[CloudVolume]:
        return list(self.volumes.values())

    def create_cache_volume(self, spec: CacheVolumeSpec) -> CloudVolume:
        if self.refuse is not None:
            raise self.refuse
        assert spec.metadata == {META_INSTALLATION: "corral", META_POOL: "small", META_CACHE: "1"}
        self.created += 1
        return self.add(spec.name, "creating" if self.creating_for else "available")

    def volume(self, volume_id: str) -> CloudVolume | None:
        found = self.volumes.get(volume_id)
        if found is not None and found.status == "creating" and virtual_time.now() >= self.creating_for:
            found = self.volumes[volume_id] = dataclasses.replace(found, status="available")
        return found

    def delete_volume(self, volume_id: str) -> None:
        self.deleted.append(volume_id)
        self.volumes.pop(volume_id, None)

    def detach_volume(self, volume_id: str, attachment_id: str) -> None:
        self.detached.append((volume_id, attachment_id))
        self.volumes[volume_id] = dataclasses.replace(
            self.volumes[volume_id], status="available", attached_to=(), attachment_ids=()
        )

    # The rest of a cloud, which the cache duties never ask for.
    def list_servers(self) -> list[CloudServer]:
        raise AssertionError("not asked")

    def create_server(self, spec: ServerSpec) -> CloudServer:
        raise AssertionError("not asked")

    def delete_server(self, server_id: str) -> None:
        raise AssertionError("not asked")

    def check_pool(self, spec: ServerSpec) -> list[str]:
        raise AssertionError("not asked")

    def headroom(self, volumes: bool) -> Headroom:
        raise AssertionError("not asked")

    def image_id(self, spec: ServerSpec) -> str:
        raise AssertionError("not asked")

    def server_cost(self, spec: ServerSpec) -> ServerCost:
        raise AssertionError("not asked")

    def close(self) -> None:
        """Nothing to close."""


def config(cache: dict[str, Any] | None) -> CorralConfig:
    pool: dict[str, Any] = {"scope": {"org": "octo-org"}, "labels": ["linux"], "image": "ubuntu", "flavor": "m1.small"}
    if cache is not None:
        pool["cache_volumes"] = cache
    return parse_config({"github": {"token": "ghp_" + "Zq7" * 12}, "installation": "corral", "pools": {"small": pool}})


MOMENTS = itertools.count()


def keeper(store: Store, cinder: MemoryCinder, headroom: Headroom | None = None) -> CacheVolumes:
    """The cache duties, a second later than the last ones made (each test's volumes are made in order), with
    the project's quota as the last look read it (`headroom`; None: not read yet)."""
    clock = LoopClock(START + timedelta(seconds=next(MOMENTS)))
    budget = QuotaBudget(clock)
    if headroom is not None:
        budget.refresh(headroom, 0.0)
    log = LogOnce(logging.getLogger("t"))
    return CacheVolumes(store, CloudSet({"default": cinder}), inline(1, "cloud"), log, clock, {"default": budget})


def runner(store: Store, state: RunnerState = RunnerState.CREATING) -> Runner:
    """A runner of pool `small` in `state` (its row, as the creator has it when it asks for a volume)."""
    (row,) = store.run_blocking(
        runners.add, "corral", [NewRunner("small", "org:octo-org", ("linux",), Reason.DEMAND)], now=START
    )
    return dataclasses.replace(row, state=state)


def gone_for_good(store: Store, row: Runner) -> None:
    """The runner's server and registration are gone (`deleted`): nothing of it holds a volume any more."""
    pending = dataclasses.replace(row, state=RunnerState.PENDING)
    (deleting,) = store.run_blocking(
        runners.apply, [Transition(pending, RunnerState.DELETING, Reason.CLEANUP)], now=START
    )
    assert deleting is not None
    store.run_blocking(runners.apply, [Transition(deleting, RunnerState.DELETED, Reason.CLEANUP)], now=START)


def take(
    store: Store, cinder: MemoryCinder, cfg: CorralConfig, who: Runner, headroom: Headroom | None = None
) -> tuple[Taken | None, float]:
    """What `who` gets, and the virtual seconds it waited for it."""

    async def run() -> tuple[Taken | None, float]:
        taken = await keeper(store, cinder, headroom).take(cfg, who, cfg.placements("small")[0])
        return taken, virtual_time.now()

    return virtual_time.run(run())


def rows(store: Store) -> list[tuple[str | None, CacheVolumeState, str | None, int]]:
    return [(row.volume_id, row.state, row.runner, row.uses) for row in store.run_blocking(cache_volumes.of_pools)]


CACHE = {"size_gb": 5, "max": 2}


def test_runners_get_a_new_volume_until_the_pool_has_max_then_boot_without_one(store: Store) -> None:
    cinder, cfg = MemoryCinder(), config(CACHE)
    first, second, third = (runner(store) for _ in range(3))
    assert take(store, cinder, cfg, first) == (Taken("vol-1", CacheStart.COLD), 0.0)
    assert take(store, cinder, cfg, second) == (Taken("vol-2", CacheStart.COLD), 0.0)
    assert take(store, cinder, cfg, third) == (Taken(None, CacheStart.NONE), 0.0)
    assert cinder.created == 2
    assert rows(store) == [
        ("vol-1", CacheVolumeState.HELD, first.name, 1),
        ("vol-2", CacheVolumeState.HELD, second.name, 1),
    ]


def test_a_pool_without_cache_volumes_gets_none_and_asks_nothing(store: Store) -> None:
    cinder = MemoryCinder()
    assert take(store, cinder, config(None), runner(store)) == (None, 0.0)
    assert cinder.created == 0 and rows(store) == []


def test_a_new_volume_is_waited_for_until_cinder_says_available(store: Store) -> None:
    """Cinder takes 3 s to make it: the create waits 0.2 + 0.5 + 1 + 2 s of pauses, asking after each."""
    cinder = MemoryCinder(creating_for=3.0)
    assert take(store, cinder, config(CACHE), runner(store)) == (Taken("vol-1", CacheStart.COLD), 3.7)


def test_a_volume_cinder_is_slow_to_make_is_kept_for_a_later_runner_and_this_one_boots_without(store: Store) -> None:
    """Still `creating` after 120 s: this runner boots without it (the job does not wait longer); the row stays
    the pool's, held by the runner, and the keeper frees it once that runner is gone and Cinder has made it."""
    cinder, cfg = MemoryCinder(creating_for=500.0), config(CACHE)
    slow = runner(store)
    taken, waited = take(store, cinder, cfg, slow)
    assert taken == Taken(None, CacheStart.NONE) and waited == 121.7
    assert rows(store) == [("vol-1", CacheVolumeState.HELD, slow.name, 1)]


@pytest.mark.parametrize(
    ("headroom", "made"),
    [
        (Headroom(volumes=0, gigabytes=100), 0),
        (Headroom(volumes=3, gigabytes=4), 0),
        (Headroom(volumes=1, gigabytes=5), 1),
        (Headroom(instances=2), 1),  # Cinder's quota unlimited, or not read
    ],
)
def test_a_new_volume_is_made_only_where_the_volume_quota_has_room_for_it(
    store: Store, headroom: Headroom, made: int
) -> None:
    """A create Cinder would refuse for quota is not sent: the runner boots without a volume at once."""
    cinder = MemoryCinder()
    taken, _ = take(store, cinder, config(CACHE), runner(store), headroom)
    assert cinder.created == made and (taken is not None and taken.start is CacheStart.COLD) == bool(made)
    assert len(rows(store)) == made


def test_a_volume_cinder_refuses_to_make_leaves_no_row_and_the_runner_boots_without(store: Store) -> None:
    cinder = MemoryCinder(refuse=CloudQuotaExceeded("VolumeLimitExceeded: Maximum number of volumes allowed (10)"))
    assert take(store, cinder, config(CACHE), runner(store)) == (Taken(None, CacheStart.NONE), 0.0)
    assert rows(store) == []


def keep(store: Store, cinder: MemoryCinder, cfg: CorralConfig, servers: dict[str, set[str]] | None = None) -> None:
    virtual_time.run(keeper(store, cinder).keep(cfg, servers))


def test_the_keeper_frees_a_volume_once_its_runner_is_gone_and_cinder_says_available(store: Store) -> None:
    cinder, cfg = MemoryCinder(), config(CACHE)
    gone, working = runner(store), runner(store)
    take(store, cinder, cfg, gone)
    take(store, cinder, cfg, working)
    gone_for_good(store, gone)
    cinder.volumes["vol-1"] = dataclasses.replace(cinder.volumes["vol-1"], status="in-use", attached_to=("srv",))
    keep(store, cinder, cfg)  # Nova has not detached it yet: still held
    assert rows(store)[0][1] is CacheVolumeState.HELD
    cinder.volumes["vol-1"] = dataclasses.replace(cinder.volumes["vol-1"], status="available", attached_to=())
    keep(store, cinder, cfg)
    assert rows(store) == [("vol-1", CacheVolumeState.FREE, None, 1), ("vol-2", CacheVolumeState.HELD, working.name, 1)]
    again = runner(store)
    assert take(store, cinder, cfg, again) == (Taken("vol-1", CacheStart.WARM), 0.0)
    assert cinder.deleted == []


def test_a_volume_in_error_is_deleted_and_the_next_runner_gets_a_new_one(store: Store) -> None:
    cinder, cfg = MemoryCinder(), config({"size_gb": 5, "max": 1})
    first = runner(store)
    take(store, cinder, cfg, first)
    gone_for_good(store, first)
    cinder.volumes["vol-1"] = dataclasses.replace(cinder.volumes["vol-1"], status="error")
    keep(store, cinder, cfg)
    assert cinder.deleted == ["vol-1"] and rows(store) == [("vol-1", CacheVolumeState.DELETING, None, 1)]
    keep(store, cinder, cfg)  # gone from Cinder: forgotten, and the pool has room for a new one
    assert rows(store) == []
    assert take(store, cinder, cfg, runner(store)) == (Taken("vol-2", CacheStart.COLD), 0.0)


def test_volumes_no_row_knows_are_deleted_once_detached_and_rows_whose_volume_is_gone_are_forgotten(
    store: Store,
) -> None:
    cinder, cfg = MemoryCinder(), config(CACHE)
    kept = runner(store)
    take(store, cinder, cfg, kept)
    cinder.add("corral-cache-small-lost", "available")  # a create whose answer never came: vol-2
    cinder.add("corral-cache-small-busy", "in-use", attached_to=("srv",))  # vol-3, attached: left alone
    keep(store, cinder, cfg)
    assert cinder.deleted == ["vol-2"] and sorted(cinder.volumes) == ["vol-1", "vol-3"]
    del cinder.volumes["vol-1"]  # deleted behind corral's back
    keep(store, cinder, cfg)
    assert rows(store) == []


def test_a_volume_being_made_is_not_taken_for_an_orphan(store: Store) -> None:
    """Cinder lists the volume before the create's answer is recorded: its name is the row's, so it stays."""
    cinder, cfg = MemoryCinder(), config(CACHE)
    reserved = store.run_blocking(cache_volumes.reserve_new, "small", "default", "r", size_gb=5, most=2, now=START)
    assert reserved is not None
    cinder.add(reserved.name, "creating")
    keep(store, cinder, cfg)
    assert cinder.deleted == [] and rows(store) == [(None, CacheVolumeState.CREATING, "r", 1)]


def test_taking_the_setting_out_deletes_the_free_volumes_at_once_and_the_held_ones_once_released(store: Store) -> None:
    cinder = MemoryCinder()
    first, second = runner(store), runner(store)
    take(store, cinder, config(CACHE), first)
    take(store, cinder, config(CACHE), second)
    gone_for_good(store, first)
    keep(store, cinder, config(CACHE))  # vol-1 free, vol-2 held by the second
    keep(store, cinder, config(None))
    assert cinder.deleted == ["vol-1"]
    assert rows(store) == [
        ("vol-1", CacheVolumeState.DELETING, None, 1),
        ("vol-2", CacheVolumeState.HELD, second.name, 1),
    ]
    gone_for_good(store, second)
    keep(store, cinder, config(None))  # vol-1 forgotten; vol-2 freed, then retired and deleted in the same round
    assert cinder.deleted == ["vol-1", "vol-2"]
    keep(store, cinder, config(None))
    assert rows(store) == [] and cinder.volumes == {}


def test_lowering_max_deletes_the_least_used_free_volumes(store: Store) -> None:
    cinder = MemoryCinder()
    wide = config({"size_gb": 5, "max": 3})
    made = [runner(store) for _ in range(3)]
    for row in made:
        take(store, cinder, wide, row)
    gone_for_good(store, made[0])
    gone_for_good(store, made[1])
    keep(store, cinder, wide)  # vol-1 and vol-2 free
    reused = runner(store)
    assert take(store, cinder, wide, reused) == (Taken("vol-1", CacheStart.WARM), 0.0)
    gone_for_good(store, reused)
    keep(store, cinder, config({"size_gb": 5, "max": 2}))
    # vol-3 is held and vol-1 has served two servers: vol-2, used once, goes.
    assert cinder.deleted == ["vol-2"]
    assert [(volume, state) for volume, state, _, _ in rows(store)] == [
        ("vol-1", CacheVolumeState.FREE),
        ("vol-2", CacheVolumeState.DELETING),
        ("vol-3", CacheVolumeState.HELD),
    ]


@pytest.mark.parametrize(
    ("listed", "detached"),
    [
        ({"default": {"srv-other"}}, [("vol-1", "att-1")]),  # the server is gone: Nova's detach never came
        ({"default": {"srv-gone", "srv-other"}}, []),  # still listed: not corral's to take
        ({}, []),  # the cloud's servers could not be listed: nothing is known
    ],
)
def test_a_volume_left_attached_to_a_server_that_is_gone_is_detached_and_then_free(
    store: Store, listed: dict[str, set[str]], detached: list[tuple[str, str]]
) -> None:
    cinder, cfg = MemoryCinder(), config(CACHE)
    first = runner(store)
    take(store, cinder, cfg, first)
    gone_for_good(store, first)
    stuck = dataclasses.replace(cinder.volumes["vol-1"], status="in-use", attached_to=("srv-gone",))
    cinder.volumes["vol-1"] = dataclasses.replace(stuck, attachment_ids=("att-1",))
    keep(store, cinder, cfg, listed)
    assert cinder.detached == detached and rows(store)[0][1] is CacheVolumeState.HELD
    keep(store, cinder, cfg, listed)
    assert rows(store)[0][1] is (CacheVolumeState.FREE if detached else CacheVolumeState.HELD)


def test_a_volume_whose_create_answer_was_lost_is_recorded_as_its_rows_and_freed_with_its_runner(
    store: Store,
) -> None:
    """corral was killed after Cinder made the volume and before it recorded the id: five minutes on, the keeper
    finds the volume by the row's name and records it; once its runner is gone, it is the pool's free volume."""
    cinder, cfg = MemoryCinder(), config(CACHE)
    killed = runner(store)
    earlier = START - timedelta(minutes=5)
    reserved = store.run_blocking(
        cache_volumes.reserve_new, "small", "default", killed.name, size_gb=5, most=2, now=earlier
    )
    assert reserved is not None
    cinder.add(reserved.name, "available")
    keep(store, cinder, cfg)
    assert rows(store) == [("vol-1", CacheVolumeState.HELD, killed.name, 1)]
    gone_for_good(store, killed)
    keep(store, cinder, cfg)
    assert rows(store) == [("vol-1", CacheVolumeState.FREE, None, 1)] and cinder.deleted == []


def test_a_volume_being_deleted_leaves_the_pools_free_volumes_alone(store: Store) -> None:
    """max 2: one volume in error (being deleted) and two free ones. The one in error is no longer the pool's
    to count; the two free ones stay (counting it deleted one of them too)."""
    cinder, cfg = MemoryCinder(), config({"size_gb": 5, "max": 2})
    made = [runner(store) for _ in range(2)]
    for row in made:
        take(store, cinder, cfg, row)
        gone_for_good(store, row)
    keep(store, cinder, cfg)  # both free
    broken = runner(store)
    taken, _ = take(store, cinder, cfg, broken)
    assert taken == Taken("vol-1", CacheStart.WARM)
    gone_for_good(store, broken)
    cinder.volumes["vol-1"] = dataclasses.replace(cinder.volumes["vol-1"], status="error")
    reserved = store.run_blocking(cache_volumes.reserve_new, "small", "default", "r", size_gb=5, most=3, now=START)
    assert reserved is not None  # a third row (another replica's create, as far as the keeper can tell)
    store.run_blocking(cache_volumes.created, reserved.id, cinder.add(reserved.name, "available").id, now=START)
    gone_for_good(store, runner(store))
    keep(store, cinder, cfg)
    assert cinder.deleted == ["vol-1"]


@pytest.mark.parametrize(
    ("server_id", "listed", "freed"),
    [
        ("srv-1", {"default": {"srv-other"}}, True),  # its server is gone: free, a look before `deleted`
        ("srv-1", {"default": {"srv-1"}}, False),  # its server is still listed (Cinder says available: not yet)
        ("srv-1", {}, False),  # its cloud was not listed: nothing known
        (None, {"default": set()}, False),  # no server id recorded: a create whose answer was lost may yet make one
    ],
)
def test_a_volume_is_free_once_its_deleting_runners_server_is_gone_and_cinder_says_available(
    store: Store, server_id: str | None, listed: dict[str, set[str]], freed: bool
) -> None:
    cinder, cfg = MemoryCinder(), config(CACHE)
    leaving = runner(store)
    take(store, cinder, cfg, leaving)
    pending = dataclasses.replace(leaving, state=RunnerState.PENDING)
    move = Transition(pending, RunnerState.DELETING, Reason.CLEANUP, server_id=server_id)
    assert store.run_blocking(runners.apply, [move], now=START)[0] is not None
    keep(store, cinder, cfg, listed)
    assert rows(store)[0][1] is (CacheVolumeState.FREE if freed else CacheVolumeState.HELD)


def test_a_pool_with_no_volumes_and_no_setting_left_loses_its_gauges(store: Store) -> None:
    cinder = MemoryCinder()
    keeping = keeper(store, cinder)
    labels = {"pool": "small", "state": "free"}
    virtual_time.run(keeping.keep(config(CACHE), {}))
    assert REGISTRY.get_sample_value("corral_cache_volumes", labels) == 0.0  # the setting: shown, none yet
    virtual_time.run(keeping.keep(config(None), {}))
    assert REGISTRY.get_sample_value("corral_cache_volumes", labels) is None  # gone, not frozen at its last value


def test_what_a_runner_of_a_cache_pool_costs_the_store_and_an_idle_keeper_costs_nothing(store: Store) -> None:
    """Count, don't time: a warm take is one SELECT and one guarded UPDATE; a new volume two statements more
    (the pool's count, the row) and one Cinder create; a corral without caches asks nothing of anyone."""
    cinder, cfg = MemoryCinder(), config(CACHE)
    counter = StatementCounter(store.engine)
    first = runner(store)
    with counter.counting():
        take(store, cinder, cfg, first)
    assert dict(counter.kinds) == {
        "SELECT cache_volumes": 2,  # no free one; the pool's count against max
        "INSERT cache_volumes": 1,  # the row, before Cinder is asked
        "UPDATE cache_volumes": 1,  # Cinder's id recorded
    }
    gone_for_good(store, first)
    keep(store, cinder, cfg)
    second = runner(store)
    with counter.counting():
        assert take(store, cinder, cfg, second)[0] == Taken("vol-1", CacheStart.WARM)
    assert dict(counter.kinds) == {"SELECT cache_volumes": 1, "UPDATE cache_volumes": 1}
    assert cinder.created == 1
    bare = Store(IN_MEMORY, executors=inline)  # a corral that never had caches
    bare.migrate()
    try:
        idle, elsewhere = keeper(bare, MemoryCinder()), StatementCounter(bare.engine)
        with elsewhere.counting():
            virtual_time.run(idle.keep(config(None), {}))  # the first round looks: anything left of earlier caches?
        assert dict(elsewhere.kinds) == {"SELECT cache_volumes": 2}  # the rows, then the counts: none
        with elsewhere.counting():
            virtual_time.run(idle.keep(config(None), {}))
            assert virtual_time.run(idle.summary(config(None))) == {}
        assert elsewhere.total == 0
    finally:
        bare.close()
