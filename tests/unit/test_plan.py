"""A pool's scaling plan (`engine.planning.plan_pool`), decided from contexts built here: no store, no
supervisor, no clock, no socket. Each test states what a pass with these facts does to the pool."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corral.config import CorralConfig, parse_config
from corral.engine.planning import (
    ENDED_BY_GITHUB,
    IMAGE_MESSAGE,
    PLACEMENT_MESSAGE,
    SURPLUS_MESSAGE,
    Create,
    PoolContext,
    PoolPlan,
    jobs_needed,
    live_replacements,
    plan_pool,
)
from corral.github.scaleset import Statistics
from corral.model import QueuedJob, Reason, Runner, RunnerState
from corral.policy import Replacement

NOW = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)
SCOPE = "org:octo"
OLD, NEW = "img-old", "img-new"

IDLE, BUSY, BOOTING = RunnerState.IDLE, RunnerState.BUSY, RunnerState.BOOTING
PENDING, DELETING = RunnerState.PENDING, RunnerState.DELETING


def config(**pool: Any) -> CorralConfig:
    """One pool `small` (min_idle 0, max_runners 5, idle_grace 60 s) in clouds east and west (east first)."""
    spec: dict[str, Any] = {
        "scope": {"org": "octo"},
        "labels": ["small"],
        "image": "ubuntu",
        "flavor": "m1.small",
        "networks": ["private"],
        "min_idle": 0,
        "max_runners": 5,
        "idle_grace": "60s",
        **pool,
    }
    clouds = {"east": {"cloud": "east"}, "west": {"cloud": "west"}}
    return parse_config({"github": {"token": "ghp_x"}, "clouds": clouds, "pools": {"small": spec}})


def runner(
    runner_id: str,
    state: RunnerState = IDLE,
    *,
    job_id: int | None = None,
    idle_for: float = 600.0,
    image: str | None = None,
    cloud: str | None = None,
    reason: Reason = Reason.WARM,
) -> Runner:
    """A runner of `small` in `state` for `idle_for` seconds before the pass."""
    changed = NOW - timedelta(seconds=idle_for)
    return Runner(
        id=runner_id,
        pool="small",
        scope=SCOPE,
        state=state,
        name=f"corral-{runner_id}",
        labels=("small",),
        reason=reason,
        message=None,
        created_at=changed - timedelta(minutes=2),
        state_changed_at=changed,
        job_id=job_id,
        image_id=image,
        cloud=cloud,
    )


def job(job_id: int, repository: str = "octo/app") -> QueuedJob:
    return QueuedJob(id=job_id, received_at=NOW - timedelta(seconds=5), checked_at=None, repository=repository)


def context(runners: Sequence[Runner] = (), *, cfg: CorralConfig | None = None, **fields: Any) -> PoolContext:
    """A ready pool's pass at NOW with `runners`, counted by state, and no queued job unless given. `jobs`:
    queued jobs that all count as demand."""
    jobs: list[QueuedJob] = fields.pop("jobs", [])
    states: dict[RunnerState, int] = {}
    for each in runners:
        states[each.state] = states.get(each.state, 0) + 1
    defaults: dict[str, Any] = {
        "now": NOW,
        "wall": NOW,
        "queued": tuple(jobs),
        "queued_count": len(jobs),
        "wanted": tuple(j.id for j in jobs),
        "usable_clouds": ("east", "west"),
    }
    return PoolContext(
        name="small", config=cfg or config(), runners=tuple(runners), states=states, **{**defaults, **fields}
    )


def warm(count: int) -> list[Create]:
    return [Create(None, Reason.WARM, SCOPE)] * count


def for_jobs(*job_ids: int) -> list[Create]:
    return [Create(job_id, Reason.DEMAND, SCOPE) for job_id in job_ids]


def retired(plan: PoolPlan) -> list[tuple[str, Reason]]:
    return [(retire.runner_id, retire.reason) for retire in plan.retires]


# --- how many runners, for which jobs ---------------------------------------------------------------------


def test_two_queued_jobs_one_idle_min_idle_two_creates_two_for_the_jobs_and_one_warm() -> None:
    plan = plan_pool(context([runner("a")], cfg=config(min_idle=2), jobs=[job(1), job(2)]))
    assert list(plan.creates) == [*for_jobs(1, 2), *warm(1)]
    assert (plan.desired, plan.retires, plan.requeue_after) == (4, (), None)


@pytest.mark.parametrize(
    ("states", "queued", "min_idle", "max_runners", "creates", "desired", "retires"),
    [
        # nothing wanted, nothing there
        ({}, 0, 0, 5, 0, 0, 0),
        # min_idle alone
        ({}, 0, 2, 5, 2, 2, 0),
        # booting runners count as free: no second runner for the same need
        ({BOOTING: 2}, 0, 2, 5, 0, 2, 0),
        ({PENDING: 1, BOOTING: 1}, 3, 0, 5, 1, 3, 0),
        # busy runners are not free, and count against max_runners
        ({BUSY: 3}, 0, 1, 5, 1, 4, 0),
        ({BUSY: 4}, 3, 1, 5, 1, 5, 0),
        ({BUSY: 5}, 3, 1, 5, 0, 5, 0),
        # idle above what is wanted is surplus; booting runners never are
        ({IDLE: 3}, 0, 1, 5, 0, 1, 2),
        ({IDLE: 2, BOOTING: 2}, 0, 1, 5, 0, 1, 2),
        ({IDLE: 1, BOOTING: 3}, 0, 0, 5, 0, 0, 1),
        # above max_runners (a reload lowered it): idle runners go down to it
        ({IDLE: 3, BUSY: 3}, 0, 3, 4, 0, 4, 2),
        # a burst: one runner per job, capped by max_runners
        ({}, 8, 0, 5, 5, 5, 0),
        ({IDLE: 1}, 8, 0, 5, 4, 5, 0),
    ],
)
def test_creates_and_retirements_follow_demand_min_idle_and_max_runners(
    states: dict[RunnerState, int],
    queued: int,
    min_idle: int,
    max_runners: int,
    creates: int,
    desired: int,
    retires: int,
) -> None:
    runners = [runner(f"{state.value}-{index}", state) for state, count in states.items() for index in range(count)]
    jobs = [job(100 + index) for index in range(queued)]
    plan = plan_pool(context(runners, cfg=config(min_idle=min_idle, max_runners=max_runners), jobs=jobs))
    assert (len(plan.creates), plan.desired, len(plan.retires)) == (creates, desired, retires)
    assert all(retire.reason is Reason.SCALE_DOWN for retire in plan.retires)


def test_runners_go_to_the_oldest_jobs_no_runner_already_covers() -> None:
    """Job 1 has a runner booting for it: the two creates go to jobs 2 and 3, oldest first."""
    runners = [runner("a", BOOTING, job_id=1)]
    plan = plan_pool(context(runners, cfg=config(max_runners=3), jobs=[job(1), job(2), job(3), job(4)]))
    assert list(plan.creates) == for_jobs(2, 3)


def test_a_job_whose_runner_is_busy_elsewhere_is_not_covered() -> None:
    """A busy runner started for job 1 took another job: job 1 gets a runner of its own."""
    plan = plan_pool(context([runner("a", BUSY, job_id=1)], jobs=[job(1)]))
    assert list(plan.creates) == for_jobs(1)


def test_only_wanted_jobs_get_runners_and_held_ones_are_published() -> None:
    """Jobs 1 and 3 are held (their runners went elsewhere too often): only job 2 gets a runner."""
    jobs = [job(1), job(2), job(3)]
    plan = plan_pool(context(jobs=jobs, wanted=(2,), held=(1, 3), queued_count=7))
    assert list(plan.creates) == for_jobs(2)
    assert (plan.queued_total, plan.held_jobs, plan.desired) == (7, 2, 1)


def test_a_pool_that_is_not_ready_creates_nothing_and_stops_waiting_for_quota() -> None:
    plan = plan_pool(context(cfg=config(min_idle=2), jobs=[job(1)], ready=False, reason="image missing"))
    assert (plan.creating, plan.creates, plan.desired, plan.requeue_after) == (False, (), 3, None)


def test_a_paused_pool_looks_again_when_its_backoff_runs_out() -> None:
    plan = plan_pool(context(cfg=config(min_idle=2), ready=False, paused_s=42.5))
    assert plan.requeue_after == 42.5


def test_a_paused_pool_with_nothing_to_create_looks_again_at_the_usual_period() -> None:
    plan = plan_pool(context([runner("a")], cfg=config(min_idle=1), ready=False, paused_s=42.5))
    assert plan.requeue_after is None


# --- drained pools --------------------------------------------------------------------------------------


def test_a_drained_pool_creates_nothing_for_its_jobs_and_wants_no_runner() -> None:
    plan = plan_pool(context([runner("b", BUSY)], cfg=config(min_idle=3), jobs=[job(1), job(2)], drained=True))
    assert (plan.creates, plan.desired, plan.creating) == ((), 0, False)


def test_a_drained_pool_retires_its_idle_runners_once_they_idled_their_grace() -> None:
    """Two runners idle for 10 minutes go now; the one idle for 20 s goes in 40 s, when the pass looks again."""
    runners = [runner("a"), runner("b", idle_for=20.0), runner("c"), runner("d", BUSY)]
    plan = plan_pool(context(runners, cfg=config(min_idle=3), drained=True))
    assert retired(plan) == [("a", Reason.POOL_DRAINED), ("c", Reason.POOL_DRAINED)]
    assert plan.requeue_after == 40.0


def test_a_drained_pool_retires_outdated_runners_as_drained_not_as_a_rollout() -> None:
    runners = [runner("a", image=OLD)]
    plan = plan_pool(context(runners, drained=True, kept_images={"small": frozenset({NEW})}))
    assert retired(plan) == [("a", Reason.POOL_DRAINED)]
    assert plan.replacements(0) == []


# --- idle grace and runners already being retired --------------------------------------------------------


def test_surplus_retires_only_runners_past_their_grace_and_looks_again_when_the_next_is() -> None:
    runners = [runner("a", idle_for=50.0), runner("b", idle_for=61.0), runner("c", idle_for=15.0)]
    plan = plan_pool(context(runners))
    assert retired(plan) == [("b", Reason.SCALE_DOWN)]
    assert plan.requeue_after == 10.0
    assert [retire.message for retire in plan.retires] == [SURPLUS_MESSAGE]


def test_grace_is_measured_on_the_wall_clock_not_the_schedule_clock() -> None:
    """The scaler's clock (schedules) may be moved by a test; idle_grace runs on the wall's."""
    runners = [runner("a", idle_for=30.0)]
    plan = plan_pool(context(runners, now=NOW + timedelta(hours=5), wall=NOW + timedelta(seconds=31)))
    assert retired(plan) == [("a", Reason.SCALE_DOWN)]


def test_when_enough_runners_are_ripe_the_pass_waits_for_no_other() -> None:
    runners = [runner("a"), runner("b", idle_for=5.0)]
    plan = plan_pool(context(runners, cfg=config(min_idle=1)))
    assert (retired(plan), plan.requeue_after) == ([("a", Reason.SCALE_DOWN)], None)


def test_a_runner_an_earlier_pass_is_retiring_counts_as_surplus_dealt_with() -> None:
    """Three idle, one wanted: two are surplus, one of them already being retired, so one more goes."""
    runners = [runner("a"), runner("b"), runner("c")]
    plan = plan_pool(context(runners, cfg=config(min_idle=1), busy=frozenset({"a"})))
    assert retired(plan) == [("b", Reason.SCALE_DOWN)]


def test_runners_being_retired_are_not_retired_twice() -> None:
    runners = [runner("a"), runner("b")]
    plan = plan_pool(context(runners, busy=frozenset({"a", "b"})))
    assert plan.retires == ()


# --- min_idle schedules ------------------------------------------------------------------------------------

NINE_TO_TEN = {"default": 0, "timezone": "UTC", "schedules": [{"cron": "0 9 * * *", "duration": "1h", "min_idle": 2}]}


@pytest.mark.parametrize(
    ("at", "creates", "requeue_after"),
    [
        (datetime(2026, 12, 4, 8, 59, 59, tzinfo=UTC), 0, 1.0),
        (datetime(2026, 12, 4, 9, 0, 0, tzinfo=UTC), 2, 3600.0),
        (datetime(2026, 12, 4, 9, 59, 59, tzinfo=UTC), 2, 1.0),
        (datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC), 0, 23 * 3600.0),
    ],
)
def test_a_schedule_window_is_read_at_the_pass_time_and_the_pass_looks_again_when_it_changes(
    at: datetime, creates: int, requeue_after: float
) -> None:
    plan = plan_pool(context(cfg=config(min_idle=NINE_TO_TEN), now=at))
    assert (list(plan.creates), plan.requeue_after) == (warm(creates), requeue_after)


def test_the_window_closing_retires_its_warm_runners_after_their_grace() -> None:
    at = datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC)
    runners = [runner("a"), runner("b", idle_for=0.0)]
    plan = plan_pool(context(runners, cfg=config(min_idle=NINE_TO_TEN), now=at, wall=NOW))
    assert retired(plan) == [("a", Reason.SCALE_DOWN)]
    assert plan.requeue_after == 60.0


def test_the_nearer_of_a_grace_and_a_schedule_change_decides_when_to_look_again() -> None:
    at = datetime(2026, 12, 4, 9, 59, 30, tzinfo=UTC)
    runners = [runner(name, idle_for=10.0) for name in "abc"]
    plan = plan_pool(context(runners, cfg=config(min_idle=NINE_TO_TEN), now=at, wall=NOW))
    assert (plan.retires, plan.requeue_after) == ((), 30.0)


# --- outranked pools -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("min_idle", "outranked", "creates"), [(3, 0, 3), (3, 1, 2), (3, 3, 0), (3, 7, 0)])
def test_pools_of_higher_priority_waiting_for_quota_take_warm_runners_room(
    min_idle: int, outranked: int, creates: int
) -> None:
    plan = plan_pool(context(cfg=config(min_idle=min_idle), outranked=outranked))
    assert list(plan.creates) == warm(creates)


def test_an_outranked_pool_still_starts_runners_for_its_queued_jobs() -> None:
    plan = plan_pool(context(cfg=config(min_idle=2), jobs=[job(1), job(2)], outranked=5))
    assert list(plan.creates) == for_jobs(1, 2)


def test_an_outranked_pool_retires_its_warm_runners_without_waiting_for_their_grace() -> None:
    runners = [runner(name, idle_for=1.0) for name in "abc"]
    plan = plan_pool(context(runners, cfg=config(min_idle=3), outranked=2))
    assert retired(plan) == [("a", Reason.SCALE_DOWN), ("b", Reason.SCALE_DOWN)]
    assert (plan.at_once, plan.requeue_after) == (True, None)


# --- scale sets ---------------------------------------------------------------------------------------------


def test_a_scale_set_wants_a_runner_per_assigned_job_not_yet_running() -> None:
    statistics = Statistics(assigned=4, running=1)
    plan = plan_pool(context([runner("b", BUSY)], cfg=config(intake="scale_set"), statistics=statistics))
    assert list(plan.creates) == [Create(None, Reason.DEMAND, SCOPE)] * 3
    assert (plan.queued_total, plan.unbound_demand, plan.desired) == (3, True, 4)


def test_a_scale_set_without_statistics_keeps_only_its_warm_runners() -> None:
    plan = plan_pool(context(cfg=config(intake="scale_set", min_idle=1)))
    assert (list(plan.creates), plan.queued_total, plan.unbound_demand) == (warm(1), 0, False)


@pytest.mark.parametrize(("ended_s_before_pass", "creates"), [(2.0, 0), (20.0, 1)], ids=["after", "before"])
def test_a_short_job_seen_done_before_the_statistics_say_it_started_costs_no_runner(
    ended_s_before_pass: float, creates: int
) -> None:
    """Six jobs assigned, none running, as GitHub's statistics said 10 s ago; six runners were started. One
    took its job and ended since (its registration gone): the statistics count that job assigned and not
    running until the next message, so it is not a seventh job wanting a runner (seen in CI: 7 runners for
    6 jobs). Had the runner ended before those statistics, they would have counted its job done already."""
    ended = dataclasses.replace(
        runner("f", RunnerState.FINISHED, idle_for=ended_s_before_pass, reason=Reason.DEREGISTERED),
        registered_at=NOW - timedelta(seconds=30),
    )
    booting = [runner(name, BOOTING, idle_for=30.0) for name in "abcde"]
    statistics = Statistics(assigned=6, running=0)
    heard = NOW - timedelta(seconds=10)
    plan = plan_pool(
        context(
            [*booting, ended],
            cfg=config(intake="scale_set", max_runners=10),
            statistics=statistics,
            statistics_at=heard,
        )
    )
    assert list(plan.creates) == [Create(None, Reason.DEMAND, SCOPE)] * creates
    assert plan.queued_total == 5 + creates


def scale_set(runners: list[Runner], **fields: Any) -> PoolContext:
    return context(runners, cfg=config(intake="scale_set"), statistics=Statistics(assigned=2, running=1), **fields)


def test_a_scale_set_runner_github_gave_up_on_is_retired_and_replaced_in_the_same_pass() -> None:
    """GitHub handed a job to idle runner a, ended the attempt and assigned the job again: a is retired, and
    the pass already starts a runner for the job (a no longer stands in for it)."""
    plan = plan_pool(scale_set([runner("a"), runner("b", BUSY)], ended={"corral-a": Reason.ABANDONED_JOB}))
    assert [(retire.runner_id, retire.reason, retire.message) for retire in plan.abandoned] == [
        ("a", Reason.ABANDONED_JOB, ENDED_BY_GITHUB[Reason.ABANDONED_JOB])
    ]
    assert (plan.settled, list(plan.creates), plan.retires) == (("corral-a",), [Create(None, Reason.DEMAND, SCOPE)], ())
    assert dict(plan.states) == {IDLE: 0, BUSY: 1, DELETING: 1}


@pytest.mark.parametrize(
    ("each", "busy", "settled"),
    [
        (runner("a", BOOTING), frozenset(), ()),  # not seen registered yet: judged once it is
        (runner("a", BUSY), frozenset(), ("corral-a",)),  # it took a job after all
        (runner("a"), frozenset({"a"}), ("corral-a",)),  # already being retired
        (runner("z", DELETING), frozenset(), ("corral-a",)),  # gone from the pool
    ],
)
def test_an_ended_runner_that_is_not_idle_is_not_retired_for_it(
    each: Runner, busy: frozenset[str], settled: tuple[str, ...]
) -> None:
    plan = plan_pool(scale_set([each], ended={"corral-a": Reason.ABANDONED_JOB}, busy=busy))
    assert (plan.abandoned, plan.settled) == ((), settled)


def test_a_replaced_scale_sets_older_idle_runners_are_retired() -> None:
    """The scale set was replaced 5 minutes ago: idle runners created before get no job, newer ones do."""
    runners = [runner("old", idle_for=600.0), runner("new", idle_for=60.0), runner("busy", BUSY, idle_for=600.0)]
    plan = plan_pool(scale_set(runners, replaced_at=NOW - timedelta(minutes=5)))
    assert [(retire.runner_id, retire.reason) for retire in plan.abandoned] == [("old", Reason.SCALE_SET_REPLACED)]


def test_a_webhook_pool_takes_no_notice_of_ended_runners() -> None:
    plan = plan_pool(context([runner("a")], cfg=config(min_idle=1), ended={"corral-a": Reason.ABANDONED_JOB}))
    assert (plan.abandoned, plan.settled, plan.retires) == ((), (), ())


# --- max_runners_per_repo ---------------------------------------------------------------------------------


def test_with_a_per_repository_cap_a_jobs_runner_registers_at_its_repository() -> None:
    jobs = [job(1, "octo/app"), job(2, "octo/lib")]
    plan = plan_pool(context(cfg=config(max_runners_per_repo=2, min_idle=1), jobs=jobs))
    assert list(plan.creates) == [
        Create(1, Reason.DEMAND, "repo:octo/app"),
        Create(2, Reason.DEMAND, "repo:octo/lib"),
        Create(None, Reason.WARM, SCOPE),
    ]


@pytest.mark.parametrize(
    ("cap", "creates"), [(None, [*for_jobs(7), *warm(1)]), (2, [Create(7, Reason.DEMAND, "repo:octo/app")])]
)
def test_with_a_per_repository_cap_no_runner_registers_at_the_pool_scope_beyond_what_it_keeps_warm(
    cap: int | None, creates: list[Create]
) -> None:
    """min_idle 2: o0 (old image) and its replacement n0, booting, are both warm. The plan counts n0 as o0's
    successor, not a free runner, so it creates two: one for job 7, one more. Under a per-repository cap that
    one more would register at the pool's scope, where a capped repository's job could take it, and the pool
    already has its two warm runners: it is not started."""
    booting = runner("n0", BOOTING, image=NEW, cloud="east")
    cfg = config(min_idle=2, max_runners=10, max_runners_per_repo=cap)
    plan = plan_pool(outdated_pool(1, cfg=cfg, extra=[booting], replacing={"n0": "o0"}, jobs=[job(7)]))
    assert list(plan.creates) == creates


# --- rollouts ----------------------------------------------------------------------------------------------

KEEP_NEW = {"small": frozenset({NEW})}


def outdated_pool(count: int, **fields: Any) -> PoolContext:
    cfg = fields.pop("cfg", config(min_idle=count, max_runners=10, rollout={"max_surge": 2}))
    runners = [runner(f"o{index}", image=OLD, cloud="east") for index in range(count)]
    runners += fields.pop("extra", [])
    return context(runners, cfg=cfg, kept_images=KEEP_NEW, **fields)


def test_a_rollout_replaces_max_surge_runners_at_a_time() -> None:
    plan = plan_pool(outdated_pool(4))
    assert plan.replacements(0) == [Replacement("o0", "east"), Replacement("o1", "east")]
    assert (plan.creates, plan.retires, plan.rollout.reason) == ((), (), Reason.IMAGE_ROLLOUT)


def test_a_rollout_in_flight_counts_against_max_surge() -> None:
    """One replacement boots (a warm runner), one replaced runner is deleting: max_surge 2 is used up."""
    booting = runner("n0", BOOTING, image=NEW, cloud="east")
    deleting = runner("d0", DELETING, reason=Reason.IMAGE_ROLLOUT)
    plan = plan_pool(outdated_pool(4, extra=[booting, deleting], replacing={"n0": "o0"}))
    assert plan.replacements(0) == []


def test_a_runner_deleting_for_scale_down_is_not_a_rollout_in_flight() -> None:
    deleting = runner("d0", DELETING, reason=Reason.SCALE_DOWN)
    plan = plan_pool(outdated_pool(4, extra=[deleting]))
    assert [replacement.runner_id for replacement in plan.replacements(0)] == ["o0", "o1"]


def test_a_runner_whose_replacement_boots_gets_no_second_one_nor_is_retired() -> None:
    booting = runner("n0", BOOTING, image=NEW, cloud="east")
    plan = plan_pool(outdated_pool(2, extra=[booting], replacing={"n0": "o0"}))
    assert (plan.creates, plan.retires) == ((), ())
    assert plan.replacements(0) == [Replacement("o1", "east")]


def test_a_runner_whose_replacement_is_online_is_retired_first() -> None:
    online = runner("n1", image=NEW, cloud="east")
    plan = plan_pool(outdated_pool(2, extra=[online], replacing={"n1": "o1"}))
    assert retired(plan) == [("o1", Reason.IMAGE_ROLLOUT)]
    assert [retire.message for retire in plan.retires] == [IMAGE_MESSAGE]
    assert plan.outdated == ("o1", "o0")


def test_a_rollout_never_takes_the_pool_below_min_idle() -> None:
    """Two warm runners on the old image and a third booting for no job: the plan's surplus would retire one
    of them, but until replacements are online the rollout keeps both."""
    booting = runner("w", BOOTING, image=NEW, cloud="east")
    plan = plan_pool(outdated_pool(2, extra=[booting]))
    assert plan.retires == ()


def test_outdated_runners_above_min_idle_are_retired_not_replaced() -> None:
    cfg = config(min_idle=1, max_runners=10, rollout={"max_surge": 5})
    plan = plan_pool(outdated_pool(3, cfg=cfg))
    assert retired(plan) == [("o0", Reason.IMAGE_ROLLOUT), ("o1", Reason.IMAGE_ROLLOUT)]
    assert plan.replacements(0) == [Replacement("o2", "east")]


@pytest.mark.parametrize(("max_runners", "created", "replaced"), [(10, 0, 2), (4, 0, 0), (6, 0, 2), (6, 1, 1)])
def test_replacements_fit_in_what_max_runners_leaves_after_this_pass_creates(
    max_runners: int, created: int, replaced: int
) -> None:
    cfg = config(min_idle=4, max_runners=max_runners, rollout={"max_surge": 2})
    plan = plan_pool(outdated_pool(4, cfg=cfg))
    assert len(plan.replacements(created)) == replaced


@pytest.mark.parametrize(
    ("fields", "quota_short"),
    [({"deleting_known": False}, False), ({"ready": False}, False), ({}, True)],
)
def test_no_replacement_on_a_pass_that_cannot_count_them_or_while_the_quota_holds_jobs_back(
    fields: dict[str, Any], quota_short: bool
) -> None:
    plan = plan_pool(outdated_pool(2, **fields))
    assert plan.replacements(0, quota_short=quota_short) == []


def test_a_replacement_goes_where_any_runner_goes_when_its_cloud_is_not_usable() -> None:
    plan = plan_pool(outdated_pool(2, usable_clouds=("west",)))
    assert plan.replacements(0) == [Replacement("o0", None), Replacement("o1", None)]


def test_a_rolled_back_placement_names_its_retirements_a_rollback() -> None:
    cfg = config(min_idle=0, max_runners=10)
    plan = plan_pool(outdated_pool(1, cfg=cfg, rolling_back=True))
    assert retired(plan) == [("o0", Reason.IMAGE_ROLLBACK)]
    assert plan.rollout.reason is Reason.IMAGE_ROLLBACK


def test_runners_in_a_cloud_the_pool_left_are_replaced_as_a_placement_change() -> None:
    cfg = config(min_idle=2, max_runners=10, placements=[{"cloud": "west"}])
    runners = [runner("e0", cloud="east"), runner("e1", cloud="east")]
    plan = plan_pool(context(runners, cfg=cfg, usable_clouds=("west",)))
    assert plan.rollout.reason is Reason.PLACEMENT_CHANGED
    assert plan.replacements(0) == [Replacement("e0", None)]  # rollout.max_surge is 1 by default


def test_misplaced_runners_retire_before_those_on_an_old_image() -> None:
    cfg = config(min_idle=0, max_runners=10, placements=[{"cloud": "west"}])
    runners = [runner("w0", image=OLD, cloud="west"), runner("e0", cloud="east")]
    plan = plan_pool(context(runners, cfg=cfg, kept_images=KEEP_NEW))
    assert retired(plan) == [("e0", Reason.PLACEMENT_CHANGED), ("w0", Reason.IMAGE_ROLLOUT)]
    assert [retire.message for retire in plan.retires] == [PLACEMENT_MESSAGE, IMAGE_MESSAGE]
    assert plan.rollout.reason is Reason.IMAGE_ROLLOUT


@pytest.mark.parametrize(
    ("each", "kept", "outdated"),
    [
        (runner("a", image=OLD), KEEP_NEW, ("a",)),
        (runner("a", image=NEW), KEEP_NEW, ()),
        (runner("a", image=OLD), {"small": frozenset({NEW, OLD})}, ()),  # a canary keeps both
        (runner("a", image=None), KEEP_NEW, ()),  # image not recorded: left alone
        (runner("a", image=OLD), {}, ()),  # no image known yet
        (runner("a", BUSY, image=OLD), KEEP_NEW, ()),  # only idle runners are replaced
    ],
)
def test_which_runners_a_rollout_calls_outdated(
    each: Runner, kept: dict[str, frozenset[str]], outdated: tuple[str, ...]
) -> None:
    plan = plan_pool(context([each], cfg=config(min_idle=1), kept_images=kept))
    assert plan.outdated == outdated


def test_an_outdated_runner_being_retired_is_not_outdated_again() -> None:
    plan = plan_pool(context([runner("a", image=OLD)], kept_images=KEEP_NEW, busy=frozenset({"a"})))
    assert (plan.outdated, plan.retires) == ((), ())


# --- successors ---------------------------------------------------------------------------------------------


def test_a_booting_replacement_does_not_count_as_one_more_free_runner() -> None:
    """A job arrives while o0's replacement boots: the job gets a runner of its own, as it would without
    a rollout, instead of the replacement (which would leave the pool one warm runner short)."""
    booting = runner("n0", BOOTING, image=NEW, cloud="east")
    plan = plan_pool(outdated_pool(1, extra=[booting], replacing={"n0": "o0"}, jobs=[job(7)]))
    assert list(plan.creates) == for_jobs(7)


# --- the gathering helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runners", "drained", "needed"),
    [
        ([], False, 5),
        ([runner("b", BUSY), runner("c", BUSY)], False, 3),
        ([runner("a", BOOTING, job_id=1), runner("b", BUSY)], False, 5),
        ([runner("b", BUSY)] * 7, False, 0),
        ([runner("a", BOOTING, job_id=1)], True, 0),
    ],
)
def test_a_pass_reads_no_more_queued_jobs_than_could_change_its_plan(
    runners: list[Runner], drained: bool, needed: int
) -> None:
    busy = sum(1 for each in runners if each.state is BUSY)
    assert jobs_needed(config().pools["small"], runners, busy, drained=drained) == needed


def test_replacement_pairs_are_forgotten_once_the_replacement_took_a_job_or_either_is_gone() -> None:
    runners = [runner("o0"), runner("n0", BOOTING), runner("o1"), runner("n1", BUSY), runner("o2")]
    pairs = {"n0": "o0", "n1": "o1", "n2": "o2", "n3": "gone"}
    assert live_replacements(pairs, runners) == {"n0": "o0"}


def test_a_context_cannot_be_changed_once_taken() -> None:
    ctx = context()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.drained = True  # type: ignore[misc]
