"""Image rollouts (`engine.rollouts`): which image new runners get while a pool moves to a new one, when the new
image is rolled back or put in service, and how a canary's share of new runners is given out."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from corral.config import CorralConfig, parse_config
from corral.engine.rollouts import Rollout, Rollouts
from corral.engine.running import Running
from corral.executors import inline
from corral.metrics import REGISTRY
from corral.model import Reason, Runner, RunnerState
from corral.store import IN_MEMORY, Store, pools

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def config(**rollout: Any) -> CorralConfig:
    return parse_config(
        {
            "github": {"token": "ghp_x"},
            "pools": {
                "small": {
                    "scope": {"org": "octo"},
                    "labels": ["small"],
                    "image": "ubuntu",
                    "flavor": "m1.small",
                    "rollout": rollout,
                }
            },
        }
    )


def rollouts(**rollout: Any) -> Rollouts:
    loaded = config(**rollout)
    return Rollouts(Running(loaded))


def runner(image: str, index: int = 0) -> Runner:
    return Runner(
        id=f"r{index}",
        pool="small",
        scope="org:octo",
        state=RunnerState.BOOTING,
        name=f"corral-small-{index}",
        labels=("small",),
        reason=Reason.DEMAND,
        message=None,
        created_at=NOW,
        state_changed_at=NOW,
        image_id=image,
    )


def rolled_out(plan: Rollouts, to: str = "img-b") -> str | None:
    """Check img-a, then `to`: the image in service after the change (the old one while `to` is a canary)."""
    assert plan.image("small", "img-a") == "img-a"
    return plan.image("small", to)


def rollbacks() -> float:
    return REGISTRY.get_sample_value("corral_image_rollbacks_total", {"pool": "small"}) or 0.0


def test_the_first_check_puts_its_image_in_service_and_a_change_starts_a_rollout() -> None:
    plan = rollouts()
    assert plan.image("small", None) is None
    assert plan.image("small", "img-a") == "img-a"
    assert plan.rollout("small") is None
    assert plan.image("small", "img-b") == "img-b"
    rollout = plan.rollout("small")
    assert rollout is not None
    assert (rollout.from_image, rollout.to_image, rollout.phase) == ("img-a", "img-b", "rolling")


@pytest.mark.parametrize(
    ("boots", "outcome", "image"),
    [
        (["online", "online", "online"], "in service", "img-b"),
        (["online", "failed", "online"], "in service", "img-b"),
        (["failed", "failed", "online"], "rolled back", "img-a"),
        (["failed", "failed", "failed"], "rolled back", "img-a"),
        (["failed", "failed"], "judging", "img-b"),
        (["online", "failed", "failed", "online"], "rolled back", "img-a"),  # judged at the third boot
    ],
)
def test_three_boots_on_the_new_image_decide_at_a_50_percent_failure_rate(
    boots: list[str], outcome: str, image: str
) -> None:
    plan = rollouts(min_boots=3, max_failure_rate=0.5)
    rolled_out(plan)
    before = rollbacks()
    for index, boot in enumerate(boots):
        if boot == "online":
            plan.came_online(runner("img-b", index))
        else:
            plan.boot_failed(runner("img-b", index))
    rollout = plan.rollout("small")
    seen = "in service" if rollout is None else ("rolled back" if rollout.rolled_back else "judging")
    assert (seen, plan.image("small", "img-b")) == (outcome, image)
    assert rollbacks() == before + (outcome == "rolled back")


def test_a_failure_rate_exactly_at_the_limit_puts_the_image_in_service() -> None:
    plan = rollouts(min_boots=2, max_failure_rate=0.5)
    rolled_out(plan)
    plan.boot_failed(runner("img-b", 0))
    plan.came_online(runner("img-b", 1))
    assert plan.rollout("small") is None


def test_runners_on_the_old_image_say_nothing_of_the_new_one() -> None:
    plan = rollouts(min_boots=1)
    rolled_out(plan)
    plan.boot_failed(runner("img-a"))
    plan.came_online(runner("img-a"))
    rollout = plan.rollout("small")
    assert rollout is not None and (rollout.online, rollout.failed) == (0, 0)


def test_after_a_rollback_the_next_image_rolls_out_from_the_image_that_stayed_in_service() -> None:
    plan = rollouts(min_boots=1, max_failure_rate=0.0)
    rolled_out(plan)
    plan.boot_failed(runner("img-b"))
    assert plan.image("small", "img-b") == "img-a"
    assert plan.image("small", "img-c") == "img-c"
    rollout = plan.rollout("small")
    assert rollout is not None and (rollout.from_image, rollout.to_image, rollout.phase) == (
        "img-a",
        "img-c",
        "rolling",
    )


def test_an_edit_back_to_the_image_in_service_ends_the_rollout() -> None:
    plan = rollouts()
    rolled_out(plan)
    assert plan.image("small", "img-a") == "img-a"
    assert plan.rollout("small") is None


def test_a_25_percent_canary_gives_the_first_new_runner_the_new_image_then_one_in_four() -> None:
    plan = rollouts(canary="25%", canary_jobs=5)
    assert plan.image("small", "img-a") == "img-a"
    assert plan.image("small", "img-b") == "img-a"  # the image in service stays the old one
    given = [plan.image_for_new_runner("small") for _ in range(8)]
    assert given == ["img-b", "img-a", "img-a", "img-a", "img-b", "img-a", "img-a", "img-a"]
    rollout = plan.canary("small")
    assert rollout is not None and (rollout.canaries, rollout.kept, rollout.phase) == (2, 6, "canary")


def test_canaries_given_out_after_the_last_pass_are_saved_at_shutdown_and_carried_on() -> None:
    """A create beside the passes counts a canary; the stop writes it, so the corral that starts next gives
    the new image its share and not one runner more."""
    store = Store(IN_MEMORY, executors=inline)
    store.migrate()
    try:
        plan = rollouts(canary="25%", canary_jobs=5)
        plan.image("small", "img-a")
        plan.image("small", "img-b")
        asyncio.run(plan.save(store, "small"))  # the last pass's write: no canary given out yet
        assert plan.image_for_new_runner("small") == "img-b"
        asyncio.run(plan.save_all(store))
        restarted = rollouts(canary="25%", canary_jobs=5)
        restarted.restore(store.run_blocking(pools.statuses), lambda _: True)
        carried = restarted.canary("small")
        assert carried is not None and (carried.canaries, carried.kept) == (1, 0)
        assert restarted.image_for_new_runner("small") == "img-a"
    finally:
        store.close()


def test_a_canary_is_promoted_once_its_jobs_succeeded_and_then_rolls_out_to_every_runner() -> None:
    plan = rollouts(canary="10%", canary_jobs=5, min_boots=3)
    assert rolled_out(plan, "img-b") == "img-a"
    plan.jobs_succeeded("small", 4)
    assert (plan.image("small", "img-b"), plan.canary("small") is not None) == ("img-a", True)
    plan.jobs_succeeded("small", 5)
    rollout = plan.rollout("small")
    assert rollout is not None and rollout.phase == "rolling"
    assert (plan.image("small", "img-b"), plan.image_for_new_runner("small")) == ("img-b", None)


def test_a_canary_whose_boots_are_fine_waits_for_its_jobs() -> None:
    plan = rollouts(canary="50%", min_boots=2)
    rolled_out(plan)
    plan.came_online(runner("img-b", 0))
    plan.came_online(runner("img-b", 1))
    rollout = plan.canary("small")
    assert rollout is not None and (rollout.online, rollout.phase) == (2, "canary")


def test_a_canary_whose_boots_fail_is_rolled_back_and_gives_out_the_new_image_no_more() -> None:
    plan = rollouts(canary="50%", min_boots=2, max_failure_rate=0.4)
    rolled_out(plan)
    plan.boot_failed(runner("img-b", 0))
    plan.came_online(runner("img-b", 1))
    assert plan.canary("small") is None
    assert [plan.image_for_new_runner("small") for _ in range(3)] == ["img-a"] * 3


def test_a_rollout_kept_in_the_status_row_reads_back_as_it_was_and_a_broken_one_as_none() -> None:
    rollout = Rollout("img-a", "img-b", online=2, failed=1, canary=True, started_at=NOW, canaries=3, kept=9)
    assert Rollout.of(rollout.saved()) == rollout
    assert Rollout.of(None) is None
    assert Rollout.of({"from_image": "img-a"}) is None
    assert Rollout.of({**rollout.saved(), "started_at": "yesterday"}) is None
    assert Rollout.of({**rollout.saved(), "unknown": 1}) is None


@pytest.mark.parametrize(("online", "failed", "rate"), [(0, 0, 0.0), (3, 1, 0.25), (0, 2, 1.0), (1, 2, 2 / 3)])
def test_the_failure_rate_is_failed_boots_over_judged_boots(online: int, failed: int, rate: float) -> None:
    assert Rollout("a", "b", online=online, failed=failed, started_at=NOW).failure_rate == rate
