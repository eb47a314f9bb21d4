"""Why a queued job has no runner yet (`explain`): the one reason an operator reads, in the order a job meets
them, from facts given at one moment."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corral.config import PoolConfig
from corral.explain import Wait, WaitCode, WaitFacts, explain, scale_set_of
from corral.model import Job, JobState, Reason, Runner, RunnerState
from corral.policy import DemandTuning

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
TUNING = DemandTuning(
    stale_after=timedelta(seconds=600),
    max_runners_per_job=2,
    max_hold=timedelta(seconds=3600),
    busy_covers_job=timedelta(seconds=120),
    confirm_after=timedelta(seconds=45),
)


def pool(labels: list[str], **extra: Any) -> PoolConfig:
    return PoolConfig.model_validate({"scope": {"org": "octo"}, "labels": labels, "image": "i", "flavor": "f", **extra})


POOLS = {
    "small": pool(["small"], max_runners=4, max_runners_per_repo=2),
    "gpu": pool(["gpu", "cuda"]),
    "arm": pool(["arm"], intake="scale_set", scale_set_name="arm-set"),
}


def job(pool_name: str | None = "small", labels: tuple[str, ...] = ("small",), **extra: Any) -> Job:
    fields: dict[str, Any] = {
        "id": 42,
        "repository": "octo/app",
        "labels": labels,
        "status": JobState.QUEUED,
        "pool": pool_name,
        "received_at": NOW - timedelta(seconds=30),
    }
    return Job(**(fields | extra))


def runner(state: RunnerState, name: str = "corral-small-1", started_s_ago: int = 45) -> Runner:
    created = NOW - timedelta(seconds=started_s_ago)
    return Runner(
        id=f"id-{name}",
        pool="small",
        scope="org:octo",
        state=state,
        name=name,
        labels=("small",),
        reason=Reason.DEMAND,
        message=None,
        created_at=created,
        state_changed_at=created,
        job_id=42,
    )


def why(the_job: Job | None = None, **facts: Any) -> Wait | None:
    return explain(WaitFacts(job=the_job or job(), now=NOW, pools=POOLS, tuning=TUNING, **facts))


def test_a_job_no_longer_queued_is_waiting_for_nothing() -> None:
    assert why(job(status=JobState.IN_PROGRESS)) is None


def test_a_job_no_pool_fits_names_the_nearest_pool_and_the_labels_it_lacks() -> None:
    assert why(job(None, ("self-hosted", "GPU", "fast"))) == Wait(
        WaitCode.NO_POOL, "no pool has every label it asks for (fast, gpu); the nearest, pool gpu, lacks fast"
    )


def test_a_job_outside_every_pools_scope_says_so() -> None:
    assert why(job(None, ("small",), repository="elsewhere/app")) == Wait(
        WaitCode.NO_POOL, "no pool's scope covers repository elsewhere/app"
    )


def test_a_job_of_a_pool_since_removed_from_the_configuration() -> None:
    assert why(job("old")) == Wait(WaitCode.POOL_REMOVED, "its pool old was removed from the configuration")


def test_a_drained_pool_comes_before_every_other_reason() -> None:
    wait = why(drained=True, ready=False, own_runners=[runner(RunnerState.BOOTING)], quota_short=("cores",))
    assert wait == Wait(WaitCode.POOL_DRAINED, "pool small is drained: it starts no runner until undrained")


def test_a_job_whose_runner_boots_waits_for_the_boot_whatever_the_quota_says() -> None:
    booting = runner(RunnerState.BOOTING)
    wait = why(own_runners=[booting], server_status={booting.id: "BUILD"}, quota_short=("cores",))
    assert wait == Wait(
        WaitCode.RUNNER_BOOTING,
        "waiting for its runner corral-small-1 to boot (booting, server BUILD, started 45 s ago)",
    )


def test_in_an_auto_pool_a_job_booting_its_own_runner_hears_how_many_auto_keeps_warm_and_why() -> None:
    said = "auto keeps 2 warm: p95 of jobs found a runner within 30s with 2 warm (the last 15 minutes; boots p95 60s)"
    wait = why(own_runners=[runner(RunnerState.BOOTING)], auto_warm=said)
    assert wait == Wait(
        WaitCode.RUNNER_BOOTING, f"waiting for its runner corral-small-1 to boot (booting, started 45 s ago); {said}"
    )


def test_a_job_whose_runner_is_online_waits_for_github_to_hand_it_over() -> None:
    assert why(own_runners=[runner(RunnerState.IDLE)]) == Wait(
        WaitCode.RUNNER_ONLINE, "its runner corral-small-1 is online; GitHub hands it the oldest job it fits"
    )


def test_a_booting_runner_is_named_before_an_idle_one() -> None:
    wait = why(own_runners=[runner(RunnerState.IDLE, "idle-one"), runner(RunnerState.PENDING, "new-one", 3)])
    assert wait == Wait(WaitCode.RUNNER_BOOTING, "waiting for its runner new-one to boot (pending, started 3 s ago)")


def test_a_job_presumed_taken_waits_for_githubs_word_until_45_s_after_its_runner_took_another() -> None:
    taken = NOW - timedelta(seconds=10)
    wait = why(job(maybe_taken_at=taken))
    assert wait is not None
    assert (wait.code, wait.until) == (WaitCode.PRESUMED_TAKEN, taken + timedelta(seconds=45))


def test_an_old_job_github_has_not_confirmed_waits_for_confirmation() -> None:
    wait = why(job(received_at=NOW - timedelta(seconds=601)))
    assert wait is not None and wait.code is WaitCode.UNCONFIRMED


def test_a_job_whose_runners_went_to_other_jobs_twice_is_held() -> None:
    wait = why(job(runners_diverted=2, diverted_at=NOW - timedelta(seconds=5)))
    assert wait == Wait(
        WaitCode.HELD,
        "its runners went to other jobs 2 times (max_runners_per_job 2): it gets another once GitHub confirms it "
        "still queued",
    )


LIMITS: list[tuple[dict[str, Any], Wait]] = [
    (
        {"ready": False, "not_ready_reason": "image not found"},
        Wait(WaitCode.POOL_NOT_READY, "pool small is not ready: image not found"),
    ),
    ({"ready": False}, Wait(WaitCode.POOL_NOT_READY, "pool small is not ready: unknown")),
    (
        {"repository_runners": 2},
        Wait(
            WaitCode.REPOSITORY_CAP,
            "repository octo/app holds 2 of pool small's runners, its cap (max_runners_per_repo 2)",
        ),
    ),
    (
        {"pool_runners": 4},
        Wait(WaitCode.POOL_FULL, "pool small is at max_runners (4); a runner starts when one finishes"),
    ),
    (
        {"github_paused_until": NOW + timedelta(minutes=7)},
        Wait(
            WaitCode.GITHUB_RATE_LIMIT,
            "GitHub's rate limit for the pool's credentials is spent until 09:07:00 UTC",
            NOW + timedelta(minutes=7),
        ),
    ),
    (
        {"create_paused_until": NOW + timedelta(seconds=90), "last_error": "Quota exceeded for cores"},
        Wait(
            WaitCode.CLOUD_BACKOFF,
            "pool small backs off after failed creates until 09:01:30 UTC: Quota exceeded for cores",
            NOW + timedelta(seconds=90),
        ),
    ),
    (
        {"quota_short": ("cores", "ram_mb")},
        Wait(WaitCode.QUOTA, "the project's quota has no room for another of pool small's servers (cores, ram_mb)"),
    ),
    ({"create_paused_until": NOW}, Wait(WaitCode.NEXT_PASS, "a runner is requested on the pool's next pass")),
    (
        {"older_queued": 3},
        Wait(
            WaitCode.NEXT_PASS,
            "a runner is requested on the pool's next pass; 3 older queued job(s) of the pool come first",
        ),
    ),
]


@pytest.mark.parametrize(("facts", "wait"), LIMITS, ids=[wait.code.value for _, wait in LIMITS])
def test_a_job_that_should_get_a_runner_names_the_first_limit_that_holds_it(facts: dict[str, Any], wait: Wait) -> None:
    assert why(**facts) == wait


def test_limits_are_named_in_order_not_ready_then_cap_then_full_then_github_then_backoff_then_quota() -> None:
    every: dict[str, Any] = {
        "ready": False,
        "repository_runners": 2,
        "pool_runners": 4,
        "github_paused_until": NOW + timedelta(minutes=1),
        "create_paused_until": NOW + timedelta(minutes=1),
        "quota_short": ("cores",),
    }
    codes = []
    for lifted in [
        "",
        "ready",
        "repository_runners",
        "pool_runners",
        "github_paused_until",
        "create_paused_until",
        "quota_short",
    ]:
        if lifted:
            every.pop(lifted)
        wait = why(**every)
        assert wait is not None
        codes.append(wait.code.value)
    assert codes == [
        "pool_not_ready",
        "repository_cap",
        "pool_full",
        "github_rate_limit",
        "cloud_backoff",
        "quota",
        "next_pass",
    ]


def test_a_job_asking_for_a_scale_set_by_name_belongs_to_that_pool() -> None:
    asked = job(None, ("self-hosted", "arm-set"))
    assert scale_set_of(asked, POOLS) == "arm"
    assert scale_set_of(replace(asked, repository="elsewhere/app"), POOLS) is None
    assert scale_set_of(job(None, ("self-hosted",)), POOLS) is None


def test_a_scale_set_job_waits_for_github_or_for_the_pools_limits() -> None:
    asked = job(None, ("arm-set",))
    assert why(asked) == Wait(
        WaitCode.SCALE_SET,
        "pool arm is a scale set: GitHub assigns its jobs to the scale set's idle runners, and the pool keeps a free "
        "runner for each job assigned and not yet running",
    )
    full = why(asked, pool_runners=10)
    assert full is not None and full.code is WaitCode.POOL_FULL
