"""Pure decisions: which pool serves a job, and how a pool scales."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corral.config import PoolConfig
from corral.model import InvalidTransition, JobState, QueuedJob, Reason, RunnerState
from corral.policy import (
    Demand,
    PoolCounts,
    RunnerFacts,
    Verdict,
    judge_demand,
    judge_runner,
    match_pool,
    plan_scale,
)


def pool(labels: list[str], scope: dict[str, str] | None = None, **extra: Any) -> PoolConfig:
    return PoolConfig.model_validate(
        {"scope": scope or {"org": "octo"}, "labels": labels, "image": "i", "flavor": "f", **extra}
    )


POOLS = {
    "small": pool(["small"]),
    "big": pool(["big", "docker"]),
    "gpu": pool(["gpu", "docker", "cuda"]),
    "gpu-fast": pool(["gpu", "docker", "cuda", "fast"], priority=5),
    "other-org": pool(["special"], scope={"org": "elsewhere"}),
    "one-repo": pool(["repo-only"], scope={"repo": "octo/app"}),
}


@pytest.mark.parametrize(
    ("labels", "repo", "expected"),
    [
        (["self-hosted"], "octo/app", "small"),
        (["self-hosted", "Linux", "X64"], "octo/app", "small"),
        (["docker"], "octo/app", "big"),
        (["gpu"], "octo/app", "gpu"),
        (["gpu", "fast"], "octo/app", "gpu-fast"),
        (["special"], "octo/app", None),
        (["special"], "Elsewhere/x", "other-org"),
        (["repo-only"], "octo/app", "one-repo"),
        (["repo-only"], "octo/lib", None),
        (["windows"], "octo/app", None),
    ],
)
def test_jobs_go_to_the_most_specific_fitting_pool(labels: list[str], repo: str, expected: str | None) -> None:
    assert match_pool(labels, repo, POOLS, default_pool="small") == expected


def test_priority_breaks_ties_between_equally_specific_pools() -> None:
    pools = {"a": pool(["x", "y"]), "b": pool(["x", "z"], priority=1)}
    assert match_pool(["x"], "octo/app", pools, default_pool="a") == "b"


def test_switching_the_default_pool_moves_generic_jobs() -> None:
    assert match_pool(["self-hosted"], "octo/app", POOLS, default_pool="big") == "big"


def test_a_generic_job_outside_the_default_pools_scope_goes_to_a_pool_in_scope() -> None:
    assert match_pool(["self-hosted"], "elsewhere/x", POOLS, default_pool="small") == "other-org"


@pytest.mark.parametrize(
    ("counts", "min_idle", "max_runners", "expected"),
    [
        (PoolCounts(), 2, 10, (2, 2, 0)),
        (PoolCounts(queued_jobs=5), 0, 10, (5, 5, 0)),
        (PoolCounts(queued_jobs=5, starting=3), 0, 10, (5, 2, 0)),
        (PoolCounts(queued_jobs=50), 1, 10, (10, 10, 0)),
        (PoolCounts(queued_jobs=5, busy=8), 0, 10, (10, 2, 0)),
        (PoolCounts(idle=5), 1, 10, (1, 0, 4)),
        (PoolCounts(idle=3, busy=4), 0, 5, (4, 0, 3)),
        (PoolCounts(starting=4), 0, 10, (0, 0, 0)),
        (PoolCounts(idle=2, queued_jobs=2), 0, 10, (2, 0, 0)),
    ],
)
def test_scale_plan(counts: PoolCounts, min_idle: int, max_runners: int, expected: tuple[int, int, int]) -> None:
    plan = plan_scale(counts, min_idle=min_idle, max_runners=max_runners)
    assert (plan.desired, plan.create, plan.surplus_idle) == expected


def test_a_burst_never_exceeds_max_runners_and_never_starts_twice() -> None:
    counts = PoolCounts()
    for _ in range(5):
        plan = plan_scale(PoolCounts(queued_jobs=30, starting=counts.starting), min_idle=0, max_runners=20)
        counts = PoolCounts(starting=counts.starting + plan.create)
    assert counts.starting == 20


def test_runner_state_machine_refuses_illegal_moves() -> None:
    RunnerState.BOOTING.check_transition(RunnerState.BUSY)
    with pytest.raises(InvalidTransition, match="deleted to idle"):
        RunnerState.DELETED.check_transition(RunnerState.IDLE)
    with pytest.raises(InvalidTransition):
        RunnerState.FAILED.check_transition(RunnerState.IDLE)
    assert not RunnerState.FAILED.counts_as_capacity and RunnerState.BOOTING.counts_as_capacity
    assert JobState.COMPLETED.rank > JobState.IN_PROGRESS.rank > JobState.QUEUED.rank


def facts(state: RunnerState, **overrides: Any) -> RunnerFacts:
    base: dict[str, Any] = {"state": state, "in_flight": False, "observed_age_s": 10.0, "bootstrap_timeout_s": 600.0}
    base.update(overrides)
    return RunnerFacts(**base)


ACTIVE = {"server_status": "ACTIVE"}


@pytest.mark.parametrize(
    ("runner", "expected"),
    [
        (facts(RunnerState.PENDING, in_flight=True), None),
        (facts(RunnerState.PENDING), RunnerState.FAILED),
        (facts(RunnerState.PENDING, server_known=False), None),
        (facts(RunnerState.PENDING, **ACTIVE), RunnerState.CREATING),
        (facts(RunnerState.CREATING, **ACTIVE), RunnerState.BOOTING),
        (facts(RunnerState.CREATING, in_flight=True, **ACTIVE), None),
        (facts(RunnerState.BOOTING, server_status="BUILD", had_registration=True, registered=True), None),
        (facts(RunnerState.BOOTING, server_status="BUILD", observed_age_s=601, registered=True), RunnerState.FAILED),
        (facts(RunnerState.BOOTING, server_status="ERROR", server_fault="No valid host"), RunnerState.FAILED),
        (facts(RunnerState.BOOTING, registered=True, online=True, **ACTIVE), RunnerState.IDLE),
        (facts(RunnerState.BOOTING, registered=True, online=True, busy=True, **ACTIVE), RunnerState.BUSY),
        (facts(RunnerState.BOOTING, had_registration=True, **ACTIVE), RunnerState.FINISHED),
        (facts(RunnerState.BOOTING, had_registration=True, registration_known=False, **ACTIVE), None),
        (facts(RunnerState.BOOTING, server_status="SHUTOFF", registered=True), RunnerState.FINISHED),
        (facts(RunnerState.BOOTING), RunnerState.FAILED),
        (facts(RunnerState.IDLE, registered=True, online=True, busy=True, **ACTIVE), RunnerState.BUSY),
        (facts(RunnerState.IDLE, registered=True, online=True, **ACTIVE), None),
        (facts(RunnerState.BUSY, had_registration=True, **ACTIVE), RunnerState.FINISHED),
        (facts(RunnerState.BUSY, registered=True, busy=True, server_status="SHUTOFF"), RunnerState.FINISHED),
        (facts(RunnerState.BUSY, registered=True, busy=True, server_known=False), None),
        (facts(RunnerState.FAILED), RunnerState.DELETING),
        (facts(RunnerState.FINISHED, **ACTIVE), RunnerState.DELETING),
        (facts(RunnerState.DELETING, **ACTIVE), None),
        (facts(RunnerState.DELETING, had_registration=True, registered=True), None),
        (facts(RunnerState.DELETING, had_registration=True), RunnerState.DELETED),
        (facts(RunnerState.DELETING, server_known=False), None),
        (facts(RunnerState.DELETING, registration_known=False), None),
        (facts(RunnerState.DELETING), RunnerState.DELETED),
        (facts(RunnerState.DELETED, job_status=JobState.COMPLETED), None),
        # What the job table says comes first: a webhook named the runner.
        (facts(RunnerState.BOOTING, job_status=JobState.IN_PROGRESS), RunnerState.BUSY),
        (facts(RunnerState.IDLE, registered=True, online=True, job_status=JobState.IN_PROGRESS), RunnerState.BUSY),
        (facts(RunnerState.BUSY, registered=True, busy=True, job_status=JobState.IN_PROGRESS, **ACTIVE), None),
        (
            facts(RunnerState.BUSY, registered=True, busy=True, job_status=JobState.COMPLETED, **ACTIVE),
            RunnerState.FINISHED,
        ),
        (facts(RunnerState.PENDING, in_flight=True, job_status=JobState.COMPLETED), None),
        # A timeout needs a look that could have seen the runner online: not without GitHub's listing.
        (facts(RunnerState.BOOTING, server_status="BUILD", observed_age_s=601, registration_known=False), None),
        (facts(RunnerState.DELETED), None),
    ],
)
def test_judge_runner(runner: RunnerFacts, expected: RunnerState | None) -> None:
    verdict = judge_runner(runner)
    assert (verdict.target if verdict else None) is expected
    if verdict is not None:
        runner.state.check_transition(verdict.target)


@pytest.mark.parametrize(
    ("fault", "reason", "message"),
    [
        (
            "Quota exceeded for cores, instances: Requested 1, 1, but already used 3, 3 of 3, 3 cores, instances",
            Reason.CLOUD_QUOTA,
            "quota exceeded: server in ERROR: Quota exceeded for cores, instances: Requested 1, 1, but already "
            "used 3, 3 of 3, 3 cores, instances",
        ),
        (
            "Build of instance x aborted: VolumeLimitExceeded: Maximum number of volumes allowed (10) exceeded for "
            "quota 'volumes'.",
            Reason.CLOUD_QUOTA,
            "quota exceeded: server in ERROR: Build of instance x aborted: VolumeLimitExceeded: Maximum number of "
            "volumes allowed (10) exceeded for quota 'volumes'.",
        ),
        ("No valid host was found. ", Reason.SERVER_ERROR, "server in ERROR: No valid host was found. "),
        (None, Reason.SERVER_ERROR, "server in ERROR: no fault given"),
    ],
    ids=["nova-recheck", "cinder-at-build", "no-valid-host", "no-fault"],
)
def test_a_server_in_error_for_quota_failed_for_quota_not_as_a_boot(
    fault: str | None, reason: Reason, message: str
) -> None:
    """Nova accepts creates that race past its quota check and puts the surplus in ERROR with a quota fault
    (seen on Nova 34): that is the quota, which the pool waits for, not the server (which would count against
    the pool's image in a rollout, and against its cloud)."""
    verdict = judge_runner(facts(RunnerState.BOOTING, server_status="ERROR", server_fault=fault))
    assert verdict == Verdict(RunnerState.FAILED, reason, message)


NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STALE = timedelta(seconds=60)


def demand_of(*jobs: QueuedJob, max_runners_per_job: int = 3) -> Demand:
    return judge_demand(
        jobs,
        now=NOW,
        stale_after=STALE,
        max_runners_per_job=max_runners_per_job,
        max_hold=timedelta(minutes=10),
        busy_covers_job=timedelta(seconds=30),
        confirm_after=timedelta(seconds=5),
    )


def test_fresh_jobs_are_demand_and_old_ones_only_once_github_confirmed_them() -> None:
    fresh = QueuedJob(1, received_at=NOW - timedelta(seconds=5), checked_at=None)
    stale = QueuedJob(2, received_at=NOW - timedelta(minutes=5), checked_at=None)
    confirmed = QueuedJob(3, received_at=NOW - timedelta(minutes=5), checked_at=NOW - timedelta(seconds=10))
    assert demand_of(fresh, stale, confirmed).wanted == [1, 3]


def test_a_job_whose_runner_just_took_an_unnamed_job_waits_for_its_webhook() -> None:
    presumed = QueuedJob(1, NOW, None, runners_diverted=1, diverted_at=NOW, maybe_taken_at=NOW - timedelta(seconds=5))
    long_ago = QueuedJob(2, NOW, None, runners_diverted=1, diverted_at=NOW, maybe_taken_at=NOW - timedelta(minutes=1))
    assert demand_of(presumed, long_ago).wanted == [2]


def test_a_job_past_max_runners_per_job_is_held_until_github_confirms_it_after_a_backoff() -> None:
    diverted_at = NOW - timedelta(seconds=90)
    unconfirmed = QueuedJob(1, NOW, None, runners_diverted=3, diverted_at=diverted_at)
    confirmed_before_backoff = QueuedJob(
        2, NOW, NOW - timedelta(seconds=40), runners_diverted=3, diverted_at=diverted_at
    )
    confirmed_after = QueuedJob(3, NOW, NOW - timedelta(seconds=10), runners_diverted=3, diverted_at=diverted_at)
    twice_more = QueuedJob(4, NOW, NOW - timedelta(seconds=10), runners_diverted=5, diverted_at=diverted_at)
    demand = demand_of(unconfirmed, confirmed_before_backoff, confirmed_after, twice_more)
    assert (demand.wanted, demand.held) == ([3], [1, 2, 4]), "the wait doubles: 60 s at 3 diversions, 240 s at 5"


@pytest.mark.parametrize("state", list(RunnerState))
@pytest.mark.parametrize("server_status", [None, "BUILD", "ACTIVE", "SHUTOFF", "ERROR"])
def test_every_verdict_is_a_move_the_state_machine_allows(state: RunnerState, server_status: str | None) -> None:
    """The engine asks again after each move, so a runner it just deleted is judged too: a verdict the state
    machine refuses (deleted -> failed, "its server disappeared") was logged for every deleted runner."""
    for registered in (False, True):
        for known in (False, True):
            runner = facts(
                state,
                server_status=server_status,
                server_known=known,
                registration_known=known,
                registered=registered,
                online=registered,
                had_registration=True,
            )
            verdict = judge_runner(runner)
            if verdict is not None:
                state.check_transition(verdict.target)


def test_a_presumed_taken_job_is_demand_again_once_github_says_it_is_still_queued_after_a_moment() -> None:
    taken_at = NOW - timedelta(seconds=10)
    asked_too_soon = QueuedJob(1, NOW, taken_at + timedelta(seconds=1), 1, taken_at, maybe_taken_at=taken_at)
    asked_after = QueuedJob(2, NOW, taken_at + timedelta(seconds=6), 1, taken_at, maybe_taken_at=taken_at)
    assert demand_of(asked_too_soon, asked_after).wanted == [2], "a still-queued answer counts after confirm_after"


def test_a_webhook_never_starts_runners_for_a_scale_set_pool() -> None:
    """GitHub gives a scale set's jobs to the scale set; a webhook for one matches no pool (no double runner)."""
    pools = {**POOLS, "ci": pool(["ci"], intake="scale_set")}
    assert match_pool(["ci"], "octo/app", pools, "small") is None
    assert match_pool(["self-hosted"], "octo/app", {"ci": pools["ci"]}, "ci") is None
