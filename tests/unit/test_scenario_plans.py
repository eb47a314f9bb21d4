"""Scenarios the end-to-end suite once ran a whole corral and sandbox for, only to see a decision: each is
stated here as the passes it takes, every pass a `PoolContext`, and the exact plan `plan_pool` answers.

What a pass reads through I/O is built here from the same pure functions the scaler calls: the demand of a
webhook pool (`DemandTuning.judge`, then `cap_per_repository` under `max_runners_per_repo`) and the quota's
claims (`QuotaBudget.claim`, a claim per planned create)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from corral.cloud.quota import Headroom, ServerCost
from corral.config import CorralConfig, parse_config
from corral.engine.planning import Create, PoolContext, PoolPlan, covered_jobs, plan_pool
from corral.engine.quota import QuotaBudget
from corral.model import CAPACITY_STATES, QueuedJob, Reason, Runner, RunnerState
from corral.policy import DemandTuning, Replacement, cap_per_repository

NOW = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)
ORG_SCOPE = "org:octo-org"
MATRIX = "octo-org/matrix"
OLD, NEW = "img-old", "img-new"

IDLE, BUSY, BOOTING = RunnerState.IDLE, RunnerState.BUSY, RunnerState.BOOTING


def config(pools: dict[str, dict[str, Any]]) -> CorralConfig:
    specs = {
        name: {
            "scope": {"org": "octo-org"},
            "labels": [name],
            "image": "ubuntu",
            "flavor": "m1.small",
            "networks": ["private"],
            "idle_grace": "60s",
            **spec,
        }
        for name, spec in pools.items()
    }
    return parse_config({"github": {"token": "ghp_x"}, "pools": specs, "default_pool": next(iter(pools))})


def runner(
    runner_id: str,
    state: RunnerState,
    *,
    pool: str = "shared",
    job_id: int | None = None,
    scope: str = ORG_SCOPE,
    image: str | None = None,
) -> Runner:
    """A runner of `pool` in `state` since a minute before the pass (created two minutes before that)."""
    changed = NOW - timedelta(minutes=1)
    return Runner(
        id=runner_id,
        pool=pool,
        scope=scope,
        state=state,
        name=f"corral-{pool}-{runner_id}",
        labels=(pool,),
        reason=Reason.DEMAND if job_id is not None else Reason.WARM,
        message=None,
        created_at=changed - timedelta(minutes=2),
        state_changed_at=changed,
        job_id=job_id,
        image_id=image,
        cloud="default",
    )


def queued(first_id: int, repositories: Sequence[str]) -> list[QueuedJob]:
    """Jobs `first_id`, `first_id + 1`, ... of these repositories, queued a second apart in that order."""
    start = NOW - timedelta(seconds=30)
    return [
        QueuedJob(
            id=first_id + index,
            received_at=start + timedelta(seconds=first_id + index),
            checked_at=None,
            repository=repository,
        )
        for index, repository in enumerate(repositories)
    ]


def context(
    cfg: CorralConfig, pool: str, runners: Sequence[Runner], jobs: Sequence[QueuedJob], **fields: Any
) -> PoolContext:
    """A ready webhook pool's pass at NOW, its demand judged as the scaler judges it: every queued job read
    (oldest first), those whose repository holds `max_runners_per_repo` runners already capped."""
    demand = DemandTuning.of(cfg).judge(jobs, NOW)
    cap = cfg.pools[pool].max_runners_per_repo
    if cap is not None:
        holdings = Counter(
            each.scope.removeprefix("repo:")
            for each in runners
            if each.scope.startswith("repo:") and each.state in CAPACITY_STATES
        )
        demand = cap_per_repository(demand, jobs, covered=covered_jobs(runners), holdings=holdings, cap=cap)
    return PoolContext(
        name=pool,
        config=cfg,
        now=NOW,
        wall=NOW,
        runners=tuple(runners),
        states=Counter(each.state for each in runners),
        queued=tuple(jobs),
        queued_count=len(jobs),
        wanted=tuple(demand.wanted),
        held=tuple(demand.held),
        usable_clouds=("default",),
        **fields,
    )


def for_jobs(jobs: Sequence[QueuedJob], *, per_repo: bool = True) -> list[Create]:
    return [Create(job.id, Reason.DEMAND, f"repo:{job.repository}" if per_repo else ORG_SCOPE) for job in jobs]


def busy_for(jobs: Sequence[QueuedJob], *, pool: str = "shared", per_repo: bool = True) -> list[Runner]:
    """A busy runner for each job, registered at its repository (`per_repo`) or at the organisation."""
    return [
        runner(f"r{job.id}", BUSY, pool=pool, job_id=job.id, scope=f"repo:{job.repository}" if per_repo else ORG_SCOPE)
        for job in jobs
    ]


# --- max_runners_per_repo: a matrix holds at most its cap, others are served beside it -----------------------
# Was tests/test_fair_share.py (a 40-job matrix and 8 other jobs through a corral and the sandbox).

FAIR = config({"shared": {"max_runners": 8, "max_runners_per_repo": 3}})
MATRIX_JOBS = queued(1, [MATRIX] * 40)
OTHER_JOBS = queued(41, [f"octo-org/app-{index % 4}" for index in range(8)])


def test_a_matrix_queued_first_gets_its_cap_and_the_jobs_queued_after_it_the_rest_of_the_pool() -> None:
    plan = plan_pool(context(FAIR, "shared", [], [*MATRIX_JOBS, *OTHER_JOBS]))
    assert list(plan.creates) == for_jobs([*MATRIX_JOBS[:3], *OTHER_JOBS[:5]])
    assert (plan.desired, plan.queued_total, plan.held_jobs, plan.retires) == (8, 48, 0, ())


def test_a_matrix_at_its_cap_gets_no_runner_while_the_pool_has_room_for_others() -> None:
    """The matrix runs 3 jobs and 4 other jobs run: the one free place goes to the oldest other job (46), not
    to the matrix's older job 4."""
    running = busy_for([*MATRIX_JOBS[:3], *OTHER_JOBS[:4]])
    plan = plan_pool(context(FAIR, "shared", running, [*MATRIX_JOBS[3:], *OTHER_JOBS[5:]]))
    assert list(plan.creates) == for_jobs([OTHER_JOBS[5]])
    assert plan.desired == 8


def test_once_every_other_job_has_its_runner_the_matrix_waits_for_its_own_runners_not_for_room() -> None:
    """The pool has room for two more, but the matrix holds its 3: nothing is created for it."""
    running = busy_for([*MATRIX_JOBS[:3], *OTHER_JOBS[:3]])
    plan = plan_pool(context(FAIR, "shared", running, MATRIX_JOBS[3:]))
    assert (plan.creates, plan.desired) == ((), 6)


def test_a_matrix_job_ending_makes_room_for_the_matrixs_oldest_waiting_job() -> None:
    running = busy_for([*MATRIX_JOBS[1:3], *OTHER_JOBS[:5]])
    plan = plan_pool(context(FAIR, "shared", running, [*MATRIX_JOBS[3:], *OTHER_JOBS[5:]]))
    assert list(plan.creates) == for_jobs([MATRIX_JOBS[3]])


# --- max_runners caps a burst --------------------------------------------------------------------------------
# Was tests/test_lifecycle.py::test_max_runners_caps_a_burst (ten jobs, max_runners 4: four busy, four servers).

CAPPED = config({"small": {"max_runners": 4}})
BURST = queued(1, ["octo-org/app"] * 10)


def test_a_burst_of_ten_jobs_in_a_pool_of_four_starts_four_runners_for_the_oldest_jobs() -> None:
    plan = plan_pool(context(CAPPED, "small", [], BURST))
    assert list(plan.creates) == for_jobs(BURST[:4], per_repo=False)
    assert (plan.desired, plan.queued_total) == (4, 10)


def test_with_four_runners_busy_the_other_six_jobs_wait_for_them() -> None:
    running = busy_for(BURST[:4], pool="small", per_repo=False)
    plan = plan_pool(context(CAPPED, "small", running, BURST[4:]))
    assert (plan.creates, plan.retires, plan.desired, plan.queued_total) == ((), (), 4, 6)


# --- two pools sharing a quota of ten ------------------------------------------------------------------------
# Was tests/test_quota.py::test_two_pools_sharing_a_quota_of_ten_serve_a_hundred_jobs_with_no_create_refused.

SHARING = config({"small": {"max_runners": 10}, "large": {"max_runners": 10}})
SERVER = ServerCost(cores=1, ram_mb=1024)


def claimed(quota: QuotaBudget, plan: PoolPlan, pool: str) -> int:
    """The creates of a pass the quota lets through, as the scaler claims them (each bound to its runner)."""
    keys, _ = quota.claim(
        SERVER, len(plan.creates), pool=pool, for_jobs=sum(1 for create in plan.creates if create.job_id)
    )
    for index, key in enumerate(keys):
        quota.bind(key, f"{pool}-{index}")
    return len(keys)


def test_two_pools_sharing_a_quota_of_ten_never_create_more_than_it_holds_and_the_second_waits_for_the_room() -> None:
    now = [0.0]
    quota = QuotaBudget(lambda: now[0])
    quota.refresh(Headroom(instances=10), read_began_at=0.0)
    small_jobs, large_jobs = queued(1, ["octo-org/app"] * 7), queued(8, ["octo-org/app"] * 6)

    small = plan_pool(context(SHARING, "small", [], small_jobs))
    assert list(small.creates) == for_jobs(small_jobs, per_repo=False)
    assert claimed(quota, small, "small") == 7
    large = plan_pool(context(SHARING, "large", [], large_jobs))
    assert list(large.creates) == for_jobs(large_jobs, per_repo=False)
    assert claimed(quota, large, "large") == 3, "the ten instances hold the small pool's seven and three more"
    assert quota.waiting("large") == 3

    # The creates answered; a reading begun after them counts their ten servers: nothing is left.
    now[0] = 1.0
    for index in range(7):
        quota.finished(f"small-{index}")
    for index in range(3):
        quota.finished(f"large-{index}")
    quota.refresh(Headroom(instances=0), read_began_at=2.0)
    booting = [runner(f"l{job.id}", BOOTING, pool="large", job_id=job.id) for job in large_jobs[:3]]
    large = plan_pool(context(SHARING, "large", booting, large_jobs))
    assert list(large.creates) == for_jobs(large_jobs[3:], per_repo=False)
    assert claimed(quota, large, "large") == 0, "no create the quota would refuse is sent"
    assert quota.waiting("large") == 3

    # The small pool's jobs are done and its servers deleted: the next reading has their room.
    quota.refresh(Headroom(instances=7), read_began_at=3.0)
    assert claimed(quota, large, "large") == 3
    assert quota.left() == Headroom(instances=4)


# --- a rollout under a steady stream of jobs -----------------------------------------------------------------
# Was tests/test_images.py::test_a_rollout_finishes_under_a_steady_stream_of_a_job_a_second (with GitHub
# handing each job to the newest idle runner, the rollout once never ended while jobs came).

ROLLING = config({"linux": {"min_idle": 10, "max_runners": 20, "rollout": {"max_surge": 2}}})


def rolling(runners: Sequence[Runner], jobs: Sequence[QueuedJob], replacing: dict[str, str]) -> PoolContext:
    return context(ROLLING, "linux", runners, jobs, kept_images={"linux": frozenset({NEW})}, replacing=replacing)


def old_idle(count: int) -> list[Runner]:
    return [runner(f"o{index}", IDLE, pool="linux", image=OLD) for index in range(count)]


def test_a_pass_that_creates_for_the_streams_job_still_replaces_max_surge_outdated_runners() -> None:
    job = queued(1, ["octo-org/app"])
    plan = plan_pool(rolling(old_idle(10), job, {}))
    assert list(plan.creates) == for_jobs(job, per_repo=False)
    assert plan.replacements(len(plan.creates)) == [Replacement("o0", "default"), Replacement("o1", "default")]
    assert (plan.retires, plan.rollout.reason) == ((), Reason.IMAGE_ROLLOUT)


def test_a_job_arriving_while_replacements_boot_gets_a_runner_of_its_own_and_no_replacement_is_doubled() -> None:
    """The replacements n0 and n1 of o0 and o1 boot: each is its runner's successor, not one more free runner,
    so the job gets a runner of its own (counted free, a replacement taken by the job would leave its old runner
    idle for ever), and max_surge is spent."""
    booting = [runner(f"n{index}", BOOTING, pool="linux", image=NEW) for index in range(2)]
    job = queued(1, ["octo-org/app"])
    plan = plan_pool(rolling([*old_idle(10), *booting], job, {"n0": "o0", "n1": "o1"}))
    assert list(plan.creates) == for_jobs(job, per_repo=False)
    assert (plan.replacements(len(plan.creates)), plan.retires) == ([], ())


def test_a_replacement_online_retires_its_old_runner_which_with_the_one_booting_spends_max_surge() -> None:
    """n0 came online while o0 idles: o0 is the surplus and goes now. Its retirement and n1, still booting
    for o1, are the two in flight max_surge allows: no third replacement starts this pass."""
    new = [runner("n0", IDLE, pool="linux", image=NEW), runner("n1", BOOTING, pool="linux", image=NEW)]
    plan = plan_pool(rolling([*old_idle(10), *new], [], {"n0": "o0", "n1": "o1"}))
    assert [(retire.runner_id, retire.reason) for retire in plan.retires] == [("o0", Reason.IMAGE_ROLLOUT)]
    assert (plan.creates, plan.rollout.in_flight, plan.replacements(0)) == ((), 2, [])


def test_once_the_replaced_runner_is_gone_the_next_outdated_one_is_replaced() -> None:
    """o0 is gone and n0 is the pool's warm runner; n1 still boots for o1: one more replacement fits."""
    runners = [*old_idle(10)[1:], runner("n0", IDLE, pool="linux", image=NEW)]
    runners.append(runner("n1", BOOTING, pool="linux", image=NEW))
    plan = plan_pool(rolling(runners, [], {"n1": "o1"}))
    assert (plan.creates, plan.retires) == ((), ())
    assert plan.replacements(0) == [Replacement("o2", "default")]


# --- jobs aged past stale_job_check behind max_runners: GitHub is asked as soon as there is room ------------------


def test_a_pass_with_room_for_unconfirmed_jobs_asks_github_at_once_and_creates_nothing_for_them_yet() -> None:
    plan = plan_pool(context(CAPPED, "small", [], [], unconfirmed=3))
    assert (plan.creates, plan.confirm_now) == ((), True)


def test_a_pool_at_max_runners_does_not_ask_about_jobs_it_has_no_room_for() -> None:
    running = busy_for(BURST[:4], pool="small", per_repo=False)
    assert plan_pool(context(CAPPED, "small", running, [], unconfirmed=6)).confirm_now is False


def test_a_drained_pool_asks_about_nothing() -> None:
    assert plan_pool(context(CAPPED, "small", [], [], unconfirmed=3, drained=True)).confirm_now is False
