"""Fair share between repositories (`policy.cap_per_repository`) and how a rollout replaces outdated runners
(`policy.plan_replacements`, `policy.retirement_order`): pure decisions, exact answers."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from corral.model import QueuedJob
from corral.policy import (
    Demand,
    Outdated,
    PoolCounts,
    Replacement,
    cap_per_repository,
    plan_replacements,
    plan_scale,
    retirement_order,
)

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def queued(*repositories: str) -> list[QueuedJob]:
    """Jobs 1, 2, ... queued a second apart, oldest first, of these repositories."""
    return [
        QueuedJob(id=index, received_at=NOW + timedelta(seconds=index), checked_at=None, repository=repository)
        for index, repository in enumerate(repositories, start=1)
    ]


def fair(
    repositories: list[str], *, cap: int, holdings: dict[str, int] | None = None, covered: set[int] | None = None
) -> tuple[list[int], list[int], Counter[str]]:
    jobs = queued(*repositories)
    held = Counter(holdings or {})
    kept = cap_per_repository(
        Demand(wanted=[job.id for job in jobs]), jobs, covered=covered or set(), holdings=held, cap=cap
    )
    return kept.wanted, kept.capped, held


def test_a_matrix_of_ten_jobs_gets_three_runners_and_the_jobs_queued_after_it_are_served_beside_it() -> None:
    wanted, capped, holdings = fair(["octo/matrix"] * 10 + ["octo/app", "octo/lib"], cap=3)
    assert wanted == [1, 2, 3, 11, 12]
    assert capped == [4, 5, 6, 7, 8, 9, 10]
    assert holdings == Counter({"octo/matrix": 3, "octo/app": 1, "octo/lib": 1})


@pytest.mark.parametrize(
    ("held", "wanted", "capped"),
    [(0, [1, 2, 3], [4]), (1, [1, 2], [3, 4]), (3, [], [1, 2, 3, 4]), (5, [], [1, 2, 3, 4])],
)
def test_runners_a_repository_already_holds_count_against_its_cap(
    held: int, wanted: list[int], capped: list[int]
) -> None:
    assert fair(["octo/matrix"] * 4, cap=3, holdings={"octo/matrix": held})[:2] == (wanted, capped)


def test_a_job_that_already_has_its_runner_is_still_wanted_and_takes_no_more_of_the_cap() -> None:
    wanted, capped, holdings = fair(["octo/matrix"] * 5, cap=2, holdings={"octo/matrix": 2}, covered={1, 4})
    assert (wanted, capped, holdings["octo/matrix"]) == ([1, 4], [2, 3, 5], 2)


def test_held_and_already_capped_jobs_stay_where_they_were() -> None:
    jobs = queued("octo/a", "octo/a", "octo/b")
    kept = cap_per_repository(
        Demand(wanted=[1, 2], held=[7], capped=[8]), jobs, covered=set(), holdings=Counter(), cap=1
    )
    assert (kept.wanted, kept.held, kept.capped) == ([1], [7], [8, 2])


def test_once_a_repository_is_below_its_cap_again_its_oldest_waiting_job_is_served_first() -> None:
    repos = ["octo/matrix"] * 6
    assert fair(repos, cap=3, holdings={"octo/matrix": 3})[0] == []
    assert fair(repos, cap=3, holdings={"octo/matrix": 2})[0] == [1]


@pytest.mark.parametrize(
    ("counts", "min_idle", "max_runners", "plan"),
    [
        (PoolCounts(queued_jobs=3), 0, 10, (3, 3, 0)),
        (PoolCounts(queued_jobs=3, starting=2), 0, 10, (3, 1, 0)),
        (PoolCounts(queued_jobs=0, idle=4), 1, 10, (1, 0, 3)),
        (PoolCounts(queued_jobs=0, idle=4, starting=2), 1, 10, (1, 0, 4)),
        (PoolCounts(queued_jobs=0, starting=3), 1, 10, (1, 0, 0)),
        (PoolCounts(queued_jobs=12, busy=5), 2, 10, (10, 5, 0)),
        (PoolCounts(idle=3, busy=9), 0, 10, (9, 0, 3)),
        (PoolCounts(idle=2, busy=10), 2, 10, (10, 0, 2)),
        (PoolCounts(queued_jobs=1, idle=1), 1, 10, (2, 1, 0)),
        (PoolCounts(), 0, 0, (0, 0, 0)),
    ],
)
def test_one_scale_pass_creates_and_retires_exactly(
    counts: PoolCounts, min_idle: int, max_runners: int, plan: tuple[int, int, int]
) -> None:
    result = plan_scale(counts, min_idle=min_idle, max_runners=max_runners)
    assert (result.desired, result.create, result.surplus_idle) == plan


def outdated(*states: str | None, cloud: str = "east") -> list[Outdated]:
    return [Outdated(f"r{index}", cloud, state) for index, state in enumerate(states)]  # type: ignore[arg-type]


def test_surplus_retires_runners_whose_replacement_is_online_first_and_those_still_waiting_for_one_last() -> None:
    order = retirement_order(outdated("booting", None, "online", "booting", "online", None))
    assert [runner.runner_id for runner in order] == ["r2", "r4", "r1", "r5", "r0", "r3"]


@pytest.mark.parametrize(
    ("max_surge", "in_flight", "min_idle", "room", "creating", "replaced"),
    [
        (1, 0, 5, 10, 0, ["r0"]),
        (2, 0, 5, 10, 0, ["r0", "r1"]),
        (3, 1, 5, 10, 0, ["r0", "r1"]),
        (3, 3, 5, 10, 0, []),
        (3, 4, 5, 10, 0, []),
        (5, 0, 2, 10, 0, ["r0", "r1"]),
        (5, 0, 5, 3, 2, ["r0"]),
        (5, 0, 5, 3, 3, []),
        (10, 0, 10, 10, 0, ["r0", "r1", "r2", "r3"]),
    ],
)
def test_a_rollout_pass_replaces_within_max_surge_min_idle_and_the_room_demand_leaves(
    max_surge: int, in_flight: int, min_idle: int, room: int, creating: int, replaced: list[str]
) -> None:
    plan = plan_replacements(
        outdated(None, None, None, None),
        max_surge=max_surge,
        in_flight=in_flight,
        min_idle=min_idle,
        room=room,
        creating=creating,
        usable=["east"],
    )
    assert [replacement.runner_id for replacement in plan] == replaced


def test_a_runner_whose_replacement_boots_or_is_online_gets_no_second_one() -> None:
    plan = plan_replacements(
        outdated("booting", "online", None), max_surge=3, in_flight=0, min_idle=3, room=10, creating=0, usable=["east"]
    )
    assert plan == [Replacement("r2", "east")]


def test_a_replacement_stays_in_its_runners_cloud_while_the_pool_places_there_and_goes_anywhere_otherwise() -> None:
    runners = [Outdated("in-east", "east"), Outdated("in-west", "west")]
    plan = plan_replacements(runners, max_surge=2, in_flight=0, min_idle=2, room=10, creating=0, usable=["east"])
    assert plan == [Replacement("in-east", "east"), Replacement("in-west", None)]
