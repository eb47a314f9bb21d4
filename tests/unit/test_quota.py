"""Quota planning (`engine.quota.QuotaBudget`, `cloud.quota`): which creates the headroom lets through, which
pools wait for it and what lower-priority pools give up meanwhile, on a clock the test moves."""

from __future__ import annotations

import pytest

from corral.cloud.quota import Headroom, ServerCost, ports_left, ports_per_server, servers_that_fit
from corral.engine.quota import MAX_RESERVATION_S, MAX_WAITING_S, QuotaBudget

SMALL = ServerCost(cores=2, ram_mb=4096)
BIG = ServerCost(cores=8, ram_mb=16384)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def budget(headroom: Headroom | None, clock: Clock | None = None) -> QuotaBudget:
    quota = QuotaBudget(clock or Clock())
    quota.refresh(headroom, read_began_at=0.0)
    return quota


@pytest.mark.parametrize(
    ("headroom", "cost", "expected"),
    [
        (Headroom(cores=10), SMALL, (5, ["cores"])),
        (Headroom(cores=10, ram_mb=8192), SMALL, (2, ["ram_mb"])),
        (Headroom(cores=4, ram_mb=8192), SMALL, (2, ["cores", "ram_mb"])),
        (Headroom(instances=3, cores=100), SMALL, (3, ["instances"])),
        (Headroom(cores=7), BIG, (0, ["cores"])),
        (Headroom(ports=4), ServerCost(cores=1, ram_mb=1, ports=2), (2, ["ports"])),
        (
            Headroom(volumes=10, gigabytes=100),
            ServerCost(cores=1, ram_mb=1, volumes=1, gigabytes=40),
            (2, ["gigabytes"]),
        ),
        (Headroom(volumes=0), SMALL, (None, [])),  # a server without volumes is not limited by them
        (Headroom(), SMALL, (None, [])),
    ],
)
def test_servers_that_fit_are_the_least_over_the_limited_resources_it_uses(
    headroom: Headroom, cost: ServerCost, expected: tuple[int | None, list[str]]
) -> None:
    assert servers_that_fit(headroom, cost) == expected


def test_headroom_from_novas_and_cinders_limits_treats_minus_one_as_unlimited() -> None:
    compute = {
        "maxTotalInstances": 10,
        "totalInstancesUsed": 4,
        "maxTotalCores": -1,
        "totalCoresUsed": 50,
        "maxTotalRAMSize": 65536,
        "totalRAMUsed": 70000,
    }
    volume = {"maxTotalVolumes": 20, "totalVolumesUsed": 5, "maxTotalVolumeGigabytes": 1000}
    assert Headroom.of(compute, volume, {"limit": 50, "used": 40, "reserved": 3}) == Headroom(
        instances=6, cores=None, ram_mb=0, volumes=15, gigabytes=1000, ports=7
    )


@pytest.mark.parametrize(
    ("details", "left"),
    [
        (None, None),
        ({}, None),
        ({"limit": -1, "used": 9}, None),
        ({"limit": 10, "used": 4}, 6),
        ({"limit": 5, "used": 4, "reserved": 3}, 0),
    ],
)
def test_ports_left_count_neutrons_reserved_ports_as_taken(details: dict[str, int] | None, left: int | None) -> None:
    assert ports_left(details) == left


@pytest.mark.parametrize(("networks", "ports"), [([], 1), (["private"], 1), (["private", "storage"], 2)])
def test_a_server_takes_one_port_per_network_and_novas_auto_network_makes_one(networks: list[str], ports: int) -> None:
    assert ports_per_server(networks) == ports


def test_a_claim_gets_keys_for_what_fits_and_names_what_held_the_rest_back() -> None:
    quota = budget(Headroom(cores=10))
    keys, short = quota.claim(SMALL, 8, pool="small")
    assert (len(keys), short) == (5, ["cores"])
    assert quota.claim(SMALL, 1, pool="small") == ([], ["cores"])


def test_creates_since_the_reading_hold_their_room_until_a_reading_after_they_finished() -> None:
    clock = Clock()
    quota = budget(Headroom(cores=10), clock)
    keys, _ = quota.claim(SMALL, 3, pool="small")
    for index, key in enumerate(keys):
        quota.bind(key, f"runner-{index}")
    assert quota.reserved_runners() == ["runner-0", "runner-1", "runner-2"]
    assert quota.left() == Headroom(cores=4)
    clock.now = 5.0
    quota.finished("runner-0")
    clock.now = 6.0
    quota.refresh(Headroom(cores=8), read_began_at=4.0)  # began before runner-0's create finished
    assert quota.reserved_runners() == ["runner-0", "runner-1", "runner-2"]
    quota.refresh(Headroom(cores=8), read_began_at=5.5)
    assert quota.reserved_runners() == ["runner-1", "runner-2"]
    assert quota.left() == Headroom(cores=4)


def test_a_create_that_never_finishes_stops_holding_room_after_ten_minutes() -> None:
    clock = Clock()
    quota = budget(Headroom(cores=10), clock)
    (key,), _ = quota.claim(SMALL, 1, pool="small")
    quota.bind(key, "runner-0")
    clock.now = MAX_RESERVATION_S - 0.5
    quota.refresh(Headroom(cores=10), read_began_at=clock.now)
    assert quota.left() == Headroom(cores=8)
    clock.now = MAX_RESERVATION_S
    quota.refresh(Headroom(cores=10), read_began_at=clock.now)
    assert quota.left() == Headroom(cores=10)


def test_a_released_claim_gives_its_room_back_at_once() -> None:
    quota = budget(Headroom(cores=4))
    keys, _ = quota.claim(SMALL, 2, pool="small")
    quota.release(keys[0])
    assert quota.left() == Headroom(cores=2)
    assert quota.left(excluding=[keys[1]]) == Headroom(cores=4)


def test_claims_of_two_costs_released_twice_and_bound_leave_exactly_what_they_hold() -> None:
    quota = budget(Headroom(cores=40, ram_mb=100_000))
    small, _ = quota.claim(SMALL, 3, pool="small")
    big, _ = quota.claim(BIG, 2, pool="big")
    assert quota.left() == Headroom(cores=40 - 3 * 2 - 2 * 8, ram_mb=100_000 - 3 * 4096 - 2 * 16384)
    quota.release(small[0])
    quota.release(small[0])  # a second release of the same claim gives nothing back twice
    quota.release("claim:unknown")
    quota.bind(big[0], "runner-1")
    quota.bind(small[1], "runner-1")  # the runner's claim replaced: it holds one server, not two
    assert quota.reserved_runners() == ["runner-1"]
    assert quota.left() == Headroom(cores=40 - 2 * 2 - 8, ram_mb=100_000 - 2 * 4096 - 16384)
    assert quota.left(excluding=[small[2], small[2], "claim:unknown"]) == Headroom(
        cores=40 - 2 - 8, ram_mb=100_000 - 4096 - 16384
    )


@pytest.mark.parametrize("headroom", [None, Headroom(cores=0)])
def test_without_a_reading_or_a_known_cost_every_wanted_server_is_let_through(headroom: Headroom | None) -> None:
    quota = QuotaBudget(Clock())
    assert quota.looked is False
    if headroom is not None:
        quota.refresh(headroom, read_began_at=0.0)
        keys, short = quota.claim(None, 3, pool="small")
    else:
        keys, short = quota.claim(SMALL, 3, pool="small")
    assert (len(keys), short) == (3, [])
    assert quota.left() == headroom


def test_a_pool_whose_runners_for_queued_jobs_find_no_room_waits_for_that_many() -> None:
    quota = budget(Headroom(cores=16))
    keys, short = quota.claim(BIG, 5, pool="big", priority=10, for_jobs=4)
    assert (len(keys), short, quota.waiting("big")) == (2, ["cores"], 2)
    quota.not_waiting("big")
    assert quota.waiting("big") == 0


def test_warm_runners_held_back_make_no_pool_wait() -> None:
    quota = budget(Headroom(cores=16))
    keys, _ = quota.claim(BIG, 5, pool="big", priority=10, for_jobs=2)
    assert (len(keys), quota.waiting("big")) == (2, 0)


def test_a_pool_of_priority_10_waiting_for_quota_takes_two_warm_runners_room_from_a_pool_of_priority_1() -> None:
    quota = budget(Headroom(cores=0, ram_mb=100000))
    quota.claim(SMALL, 2, pool="urgent", priority=10, for_jobs=2)
    assert quota.waiting("urgent") == 2
    assert {
        pool: quota.outranked(pool, priority)
        for pool, priority in [("warm", 1), ("same", 10), ("top", 11), ("urgent", 10)]
    } == {
        "warm": 2,
        "same": 0,
        "top": 0,
        "urgent": 0,
    }


def test_a_lower_priority_pool_may_use_only_what_the_waiting_pools_wait_leaves() -> None:
    clock = Clock()
    quota = budget(Headroom(cores=4), clock)
    quota.held_back("urgent", 10, SMALL, 1)
    keys, short = quota.claim(SMALL, 2, pool="batch", priority=1)
    assert (len(keys), short) == (1, ["cores"])
    assert quota.left(below=1) == Headroom(cores=0)
    assert quota.left(below=10) == Headroom(cores=2)


def test_held_back_runners_add_up_until_the_pool_claims_again() -> None:
    quota = budget(Headroom(cores=0))
    quota.held_back("urgent", 10, SMALL, 2)
    quota.held_back("urgent", 10, SMALL, 1)
    quota.held_back("urgent", 10, SMALL, 0)
    assert quota.waiting("urgent") == 3
    quota.claim(SMALL, 1, pool="urgent", priority=10, for_jobs=1)
    assert quota.waiting("urgent") == 1


def test_a_wait_not_renewed_for_five_minutes_no_longer_holds_lower_pools_back() -> None:
    clock = Clock()
    quota = budget(Headroom(cores=0), clock)
    quota.held_back("urgent", 10, SMALL, 2)
    clock.now = MAX_WAITING_S - 1
    quota.refresh(Headroom(cores=0), read_began_at=clock.now)
    assert quota.outranked("batch", 1) == 2
    clock.now = MAX_WAITING_S
    quota.refresh(Headroom(cores=0), read_began_at=clock.now)
    assert (quota.outranked("batch", 1), quota.waiting("urgent")) == (0, 0)


def test_pools_other_replicas_hold_that_wait_for_quota_outrank_this_replicas_pools_until_their_word_is_old() -> None:
    clock = Clock()
    quota = budget(Headroom(cores=10), clock)
    quota.others_waiting(
        [
            ("remote-urgent", 10, SMALL, 3, 100.0),
            ("remote-stale", 10, SMALL, 5, MAX_WAITING_S),
            ("remote-served", 10, SMALL, 0, 1.0),
        ]
    )
    assert quota.outranked("batch", 1) == 3
    assert quota.left(below=1) == Headroom(cores=4)
    clock.now = MAX_WAITING_S - 100.0 - 0.5
    assert quota.outranked("batch", 1) == 3
    clock.now = MAX_WAITING_S - 100.0
    assert quota.outranked("batch", 1) == 0


def test_a_new_look_replaces_what_other_replicas_said() -> None:
    quota = budget(Headroom(cores=10))
    quota.others_waiting([("remote", 10, SMALL, 3, 0.0)])
    quota.others_waiting([])
    assert quota.outranked("batch", 1) == 0
