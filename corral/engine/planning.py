"""A pool's scaling pass as a pure plan: one snapshot of what the pass knows in, typed actions out.

`Scaler.scale` gathers a `PoolContext` (the I/O: the store's queued jobs, the quota's and the rollouts'
readings, which runners the supervisor is busy with, the clock read once) and `plan_pool` decides from it
alone: how many runners to create and for which jobs, which idle runners to retire and why, how many outdated
runners a rollout replaces, and when to look again. Nothing here reads a clock, the configuration's live
callable, the store or the supervisor, so each decision is tested by building a context.

Placement and quota claims are not planned here: which placement has room is known only while claiming it,
and the claims are I/O on the quota budget. Replacements are planned here but sized by the creates that
actually happened (`PoolPlan.replacements`), since the quota or the database may write fewer than planned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from corral.config import CorralConfig, PoolConfig
from corral.engine.scalesets import jobs_awaiting_runners
from corral.github.scaleset import Statistics
from corral.model import CAPACITY_STATES, FREE_STATES, STARTING_STATES, QueuedJob, Reason, Runner, RunnerState
from corral.policy import (
    Outdated,
    PoolCounts,
    Replacement,
    plan_replacements,
    plan_scale,
    retirement_order,
)
from corral.schedules import InForce
from corral.warmth import WarmForecast

ENDED_BY_GITHUB = {
    Reason.ABANDONED_JOB: "GitHub ended the job it handed this runner, unstarted, and hands it no other",
    Reason.SCALE_SET_REPLACED: "its scale set is gone on GitHub: no job comes to it",
}

ROLLOUT_REASONS = frozenset({Reason.IMAGE_ROLLOUT, Reason.IMAGE_ROLLBACK, Reason.PLACEMENT_CHANGED})
"""Why a runner a rollout retired is deleting: such runners count against `rollout.max_surge`."""

SURPLUS_MESSAGE = "idle above what the pool wants"
PLACEMENT_MESSAGE = "its cloud is no longer one of the pool's"
IMAGE_MESSAGE = "its image is no longer the pool's"


def covered_jobs(current: Sequence[Runner]) -> set[int]:
    """Jobs a runner started for them can still take (it is starting or idle)."""
    return {runner.job_id for runner in current if runner.state in FREE_STATES and runner.job_id is not None}


def done_since_statistics(ctx: PoolContext) -> int:
    """A scale-set pool's runners that came online and then ended after its listener last heard GitHub's
    statistics: each one's job still counts there as assigned (`jobs_awaiting_runners`). A runner that never
    came online ran no job; one retired after the statistics may be counted too, which only holds a create
    back until the next message or until that runner is gone."""
    if ctx.statistics_at is None:
        return 0
    return sum(
        1
        for runner in ctx.runners
        if runner.state in (RunnerState.FINISHED, RunnerState.DELETING)
        and runner.registered_at is not None
        and runner.state_changed_at >= ctx.statistics_at
    )


def jobs_needed(pool: PoolConfig, current: Sequence[Runner], busy: int, *, drained: bool) -> int:
    """How many queued jobs could change a pass's plan: creates are capped by `max_runners` and runners go to
    the oldest uncovered jobs, so a backlog beyond that many need not be read."""
    if drained:
        return 0
    covering = sum(1 for runner in current if runner.state in FREE_STATES and runner.job_id is not None)
    return max(pool.max_runners - busy, 0) + covering


def live_replacements(replacing: Mapping[str, str], current: Sequence[Runner]) -> dict[str, str]:
    """The replacement pairs (new runner id -> the outdated one it replaces) still worth knowing: the replaced
    runner is still idle and its replacement still boots or waits idle (one that took a job or went leaves its
    runner needing another)."""
    state = {runner.id: runner.state for runner in current}
    return {
        new: old
        for new, old in replacing.items()
        if state.get(old) is RunnerState.IDLE
        and (state.get(new) in STARTING_STATES or state.get(new) is RunnerState.IDLE)
    }


@dataclass(frozen=True)
class PoolContext:
    """Everything one scaling pass of one pool decides from, read once at its start."""

    name: str
    config: CorralConfig
    """The configuration of this pass (one generation: a reload during the pass changes nothing here)."""
    now: datetime
    """The time `min_idle` schedules are read at (the scaler's clock)."""
    wall: datetime
    """The wall time idle runners' `idle_grace` is measured against."""
    runners: tuple[Runner, ...]
    states: Mapping[RunnerState, int]
    """The pool's runners by state, as the judge left them."""
    busy: frozenset[str] = frozenset()
    """The runners the supervisor has an action under way for (being created or retired)."""
    ready: bool = True
    reason: str | None = None
    """Why the pool is not ready (None when it is)."""
    drained: bool = False
    deleting_known: bool = True
    """`runners` holds those being deleted (a pass after a new look): only then does a rollout start
    replacements, since it counts those it retired against `max_surge`."""
    queued: tuple[QueuedJob, ...] = ()
    """The queued jobs read (oldest first; no more of a backlog than could change the plan)."""
    queued_count: int = 0
    """How many jobs the pool has queued in all (a webhook pool; a scale set's come from `statistics`)."""
    wanted: tuple[int, ...] = ()
    """The queued jobs that count as demand now (`policy.judge_demand`, capped per repository)."""
    held: tuple[int, ...] = ()
    """The queued jobs held back (their runners went to other jobs too often)."""
    statistics: Statistics | None = None
    """A scale-set pool's statistics as its listener last heard them..."""
    statistics_at: datetime | None = None
    """...and when it heard them."""
    ended: Mapping[str, Reason] = field(default_factory=dict)
    """A scale-set pool's runners GitHub will hand no (more) job, by name, and why."""
    replaced_at: datetime | None = None
    """When the pool's scale set was replaced by another: its older runners get no job."""
    outranked: int = 0
    """Runners for queued jobs that pools of higher priority wait for quota for, in the pool's first cloud."""
    kept_images: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per placement key, the images its idle runners may keep (empty: none known yet)."""
    rolling_back: bool = False
    """One of the pool's placements rolled back from a new image."""
    replacing: Mapping[str, str] = field(default_factory=dict)
    """Replacements this replica started and still pairs (`live_replacements`): new runner id -> replaced id."""
    usable_clouds: tuple[str, ...] = ()
    """The clouds of the pool's placements that may take runners now (checked, not paused)."""
    paused_s: float = 0.0
    """How long the pool's creates stay paused after failures (0: not paused)."""
    unconfirmed: int = 0
    """Queued jobs not counted as demand only for want of a recent confirmation from GitHub."""
    warm_forecast: WarmForecast | None = None
    """What `min_idle: {auto: ...}` wants now (None: the pool is not auto, or is drained)."""

    @property
    def pool(self) -> PoolConfig:
        return self.config.pools[self.name]

    def misplaced(self, runner: Runner) -> bool:
        """Whether the runner is in a cloud none of its pool's placements names any more."""
        return self.config.cloud_of(runner.cloud) not in self.config.clouds_of(self.name)


@dataclass(frozen=True)
class Create:
    """A new runner to write and create; its placement is chosen while claiming the quota's room."""

    job_id: int | None
    """The queued job it is started for (None: a warm runner, or one for a scale set's assigned jobs)."""
    reason: Reason
    scope: str
    """Where it registers: the pool's scope, or a job's repository under `max_runners_per_repo`."""


@dataclass(frozen=True)
class Retire:
    """An idle runner to retire."""

    runner_id: str
    reason: Reason
    message: str | None


@dataclass(frozen=True)
class RolloutPlan:
    """What a rollout may replace this pass, once the creates for demand are known (`replacements`)."""

    staying: tuple[Outdated, ...] = ()
    """The outdated runners this pass does not retire, in the order they go."""
    max_surge: int = 1
    in_flight: int = 0
    """Replacements booting, replaced runners being retired or deleted, and this pass's retirements."""
    min_idle: int = 0
    room: int = 0
    """What `max_runners` leaves now."""
    usable_clouds: tuple[str, ...] = ()
    allowed: bool = False
    """Ready, and the pass knows the runners being deleted."""
    reason: Reason | None = None
    """What the replacements are recorded as (None: nothing is outdated)."""


@dataclass(frozen=True)
class PoolPlan:
    """What one pass does for a pool, and the figures it publishes."""

    desired: int
    queued_total: int
    held_jobs: int
    min_idle: int
    """The warm runners the pool keeps now: a number's, a schedule's, or `auto`'s over its floor."""
    states: Mapping[RunnerState, int]
    """The pool's runners by state once the abandoned ones are retired (what the pass publishes)."""
    creating: bool
    """The pass starts runners for demand or warmth (False: the pool stops waiting for quota)."""
    creates: tuple[Create, ...] = ()
    unbound_demand: bool = False
    """The creates answer demand that names no job (a scale set's assigned jobs)."""
    retires: tuple[Retire, ...] = ()
    abandoned: tuple[Retire, ...] = ()
    """A scale set's idle runners GitHub will hand no job: retired before anything else."""
    settled: tuple[str, ...] = ()
    """The names of `PoolContext.ended` dealt with (retired, gone, or no longer idle): forgotten."""
    outdated: tuple[str, ...] = ()
    """The idle runners a rollout replaces, in the order surplus retires them."""
    rollout: RolloutPlan = RolloutPlan()
    requeue_after: float | None = None
    """When to look again (None: at the usual period): the pause left, an idle runner's grace, or the
    schedule's next change, whichever comes first."""
    at_once: bool = False
    """Surplus retires without `idle_grace` (a pool of higher priority waits for the room)."""
    confirm_now: bool = False
    """Ask GitHub now about the pool's unconfirmed jobs: the pool has room they could have, and they would
    otherwise wait for the job upkeep's next round (up to `reconcile_interval`)."""

    def replacements(self, created: int, *, quota_short: bool = False) -> list[Replacement]:
        """The outdated runners to replace now, after `created` runners were written for demand: none while
        the quota holds runners for jobs back (`quota_short`), which are served first."""
        rollout = self.rollout
        if not rollout.allowed or quota_short:
            return []
        return plan_replacements(
            rollout.staying,
            max_surge=rollout.max_surge,
            in_flight=rollout.in_flight,
            min_idle=rollout.min_idle,
            room=rollout.room,
            creating=created,
            usable=rollout.usable_clouds,
        )


def outdated_runners(ctx: PoolContext) -> list[Runner]:
    """The pool's idle runners to replace: those in a cloud that is no longer one of its placements, and those
    on an image their placement's runners may not keep (a runner whose image is not recorded is left alone)."""
    by_cloud: dict[str | None, tuple[bool, frozenset[str] | None]] = {}
    """Per cloud a runner records: whether it is misplaced, and the images its placement keeps (asked once
    per cloud, not per runner: at 10,000 runners that was a tenth of a pass)."""
    outdated = []
    for runner in ctx.runners:
        if runner.state is not RunnerState.IDLE or runner.id in ctx.busy:
            continue
        if runner.cloud not in by_cloud:
            placement = ctx.config.placement_of(ctx.name, runner.cloud)
            by_cloud[runner.cloud] = (
                ctx.misplaced(runner),
                ctx.kept_images.get(placement.key(ctx.name)) if placement is not None else None,
            )
        misplaced, images = by_cloud[runner.cloud]
        if misplaced or (images and runner.image_id is not None and runner.image_id not in images):
            outdated.append(runner)
    return outdated


def replacement_progress(ctx: PoolContext, outdated: Sequence[Runner]) -> list[Outdated]:
    """The outdated runners with how far the replacement this replica started for each got."""
    state = {runner.id: runner.state for runner in ctx.runners}
    outdated_ids = {runner.id for runner in outdated}
    progress: dict[str, Literal["booting", "online"]] = {
        old: "booting" if state[new] in STARTING_STATES else "online"
        for new, old in ctx.replacing.items()
        if old in outdated_ids and new in state
    }
    cloud_of = ctx.config.cloud_of
    return [Outdated(runner.id, cloud_of(runner.cloud), progress.get(runner.id)) for runner in outdated]


def planned_creates(ctx: PoolContext, count: int, *, unbound_demand: bool, warm: int) -> list[Create]:
    """`count` new runners, each for the oldest uncovered job, the rest warm. With `max_runners_per_repo`, no
    more than `warm` are for no job: each registers at the pool's scope, where any repository's job (the
    capped one's oldest first) could take it; a job's runner registers at its repository instead."""
    pool = ctx.pool
    covered = covered_jobs(ctx.runners)
    uncovered = [job_id for job_id in ctx.wanted if job_id not in covered][:count]
    spare = count - len(uncovered)
    if pool.max_runners_per_repo is not None:
        spare = min(spare, warm)
    repository = {job.id: job.repository for job in ctx.queued}

    def scope(job_id: int | None) -> str:
        if pool.max_runners_per_repo is None or job_id is None or not repository.get(job_id):
            return pool.scope.key
        return f"repo:{repository[job_id]}"

    def reason(job_id: int | None) -> Reason:
        return Reason.DEMAND if job_id is not None or unbound_demand else Reason.WARM

    return [Create(job_id, reason(job_id), scope(job_id)) for job_id in [*uncovered, *[None] * spare]]


def why_replaced(ctx: PoolContext, outdated: Sequence[Runner]) -> Reason:
    """What replacing these runners is called: a placement change when it is only that, else the image's."""
    if all(ctx.misplaced(runner) for runner in outdated):
        return Reason.PLACEMENT_CHANGED
    return Reason.IMAGE_ROLLBACK if ctx.rolling_back else Reason.IMAGE_ROLLOUT


def surplus_retirements(
    ctx: PoolContext, surplus: int, outdated: Sequence[Runner], *, at_once: bool
) -> tuple[list[Retire], float | None]:
    """The idle runners above what is wanted to retire: outdated ones at once (misplaced first), then the
    oldest once they have idled `idle_grace` (none with `at_once`); and the seconds until the next one has
    (None if none waits)."""
    retires: list[Retire] = []
    current = list(ctx.runners)
    if outdated and not ctx.drained:
        retiring = list(outdated[:surplus])
        image = Reason.IMAGE_ROLLBACK if ctx.rolling_back else Reason.IMAGE_ROLLOUT
        misplaced = [runner for runner in retiring if ctx.misplaced(runner)]
        retires += [Retire(runner.id, Reason.PLACEMENT_CHANGED, PLACEMENT_MESSAGE) for runner in misplaced]
        retires += [Retire(runner.id, image, IMAGE_MESSAGE) for runner in retiring if runner not in misplaced]
        surplus -= len(retiring)
        current = [runner for runner in current if runner not in retiring]
        if not surplus:
            return retires, None
    grace = 0.0 if at_once else ctx.pool.idle_grace
    idle = [runner for runner in current if runner.state is RunnerState.IDLE and runner.id not in ctx.busy]
    ripe = [runner for runner in idle if (ctx.wall - runner.state_changed_at).total_seconds() >= grace]
    reason = Reason.POOL_DRAINED if ctx.drained else Reason.SCALE_DOWN
    retires += [Retire(runner.id, reason, SURPLUS_MESSAGE) for runner in ripe[:surplus]]
    waiting = [grace - (ctx.wall - runner.state_changed_at).total_seconds() for runner in idle if runner not in ripe]
    return retires, (min(waiting) if waiting and len(ripe) < surplus else None)


def abandoned_runners(ctx: PoolContext) -> tuple[list[Retire], list[str]]:
    """A scale set's idle runners GitHub will hand no job, to retire, and the names in `ctx.ended` dealt with.

    GitHub hands a scale set's job to one of its idle runners. One that never picks it up (a hung VM, a
    runner that lost its network) stays registered and online, but GitHub ends that attempt (`JobCompleted`,
    `canceled`, naming the runner), hands it nothing more and assigns the job again. The runners of a scale
    set GitHub deleted are as useless once another replaces it. Counted idle, such a runner would stand in
    for a waiting job forever. A runner that ran its job is done too (ephemeral); the judge usually sees
    that first, and a name that is not idle by the time the pool looks is dropped, except while corral has
    not yet seen the runner register."""
    by_name = {runner.name: runner for runner in ctx.runners}
    abandoned: list[Retire] = []
    settled: list[str] = []
    for runner_name, reason in ctx.ended.items():
        runner = by_name.get(runner_name)
        if runner is not None and runner.state in STARTING_STATES:
            continue  # not seen registered yet: judged once it is
        settled.append(runner_name)
        if runner is not None and runner.state is RunnerState.IDLE and runner.id not in ctx.busy:
            abandoned.append(Retire(runner.id, reason, ENDED_BY_GITHUB.get(reason)))
    if ctx.replaced_at is not None:
        taken = {retire.runner_id for retire in abandoned}
        abandoned += [
            Retire(runner.id, Reason.SCALE_SET_REPLACED, ENDED_BY_GITHUB[Reason.SCALE_SET_REPLACED])
            for runner in ctx.runners
            if runner.state is RunnerState.IDLE
            and runner.created_at < ctx.replaced_at
            and runner.id not in taken
            and runner.id not in ctx.busy
        ]
    return abandoned, settled


def plan_pool(ctx: PoolContext) -> PoolPlan:
    """Create what demand and `min_idle` want, retire idle runners above it, replace outdated ones."""
    pool = ctx.pool
    abandoned: list[Retire] = []
    settled: list[str] = []
    if pool.intake == "scale_set":
        abandoned, settled = abandoned_runners(ctx)
    if abandoned:
        # The rest of the pass sees the pool as it is once they are retiring: deleting, and being retired.
        after = Counter(ctx.states)
        after[RunnerState.IDLE] -= len(abandoned)
        after[RunnerState.DELETING] += len(abandoned)
        ctx = replace(ctx, states=after, busy=ctx.busy | {retire.runner_id for retire in abandoned})
    states: Counter[RunnerState] = Counter(ctx.states)
    if pool.intake == "scale_set":
        # GitHub, not corral, gives the scale set's jobs to its idle runners: the pool wants a free runner
        # for each job assigned to the scale set and not yet running (`min_idle + assigned` in all).
        queued_total = jobs_awaiting_runners(ctx.statistics, states[RunnerState.BUSY], done_since_statistics(ctx))
        waiting = queued_total
    else:
        queued_total = ctx.queued_count
        waiting = len(ctx.wanted)
    # A replacement booting for an outdated runner still idle is that runner's successor, not one more free
    # runner: counted as free too, a job that takes it leaves the pool a runner short with no create.
    state_of = {runner.id: runner.state for runner in ctx.runners}
    successors = sum(
        1
        for new, old in ctx.replacing.items()
        if state_of.get(new) in STARTING_STATES and state_of.get(old) is RunnerState.IDLE
    )
    counts = PoolCounts(
        starting=sum(states[state] for state in STARTING_STATES) - successors,
        idle=states[RunnerState.IDLE],
        busy=states[RunnerState.BUSY],
        queued_jobs=waiting,
    )
    # Pools of higher priority waiting for quota to serve queued jobs take this pool's warm runners' room.
    warm: InForce = pool.min_idle_at(ctx.now)
    # `auto` keeps what its forecast wants; a schedule's value (or `default`) is the floor under it.
    kept = max(warm.min_idle, ctx.warm_forecast.wanted) if ctx.warm_forecast is not None else warm.min_idle
    min_idle, max_runners = (0, 0) if ctx.drained else (max(kept - ctx.outranked, 0), pool.max_runners)
    scale = plan_scale(counts, min_idle=min_idle, max_runners=max_runners)
    outdated = outdated_runners(ctx)
    # Idle runners an earlier pass is still retiring are surplus already dealt with, not more of it.
    in_retirement = sum(1 for r in ctx.runners if r.state is RunnerState.IDLE and r.id in ctx.busy)
    surplus_idle = max(scale.surplus_idle - in_retirement, 0)
    if outdated:
        # Replacements booting count as free in the plan; the runners they replace stay until they are
        # online, so that a rollout never leaves the pool with fewer warm runners than it keeps.
        settled_idle = counts.idle - in_retirement
        surplus_idle = min(
            surplus_idle, max(settled_idle - counts.queued_jobs - min_idle, counts.active - max_runners, 0)
        )
    # The runner each surplus retirement takes first is the one whose replacement is online.
    progress = retirement_order(replacement_progress(ctx, outdated))
    by_id = {runner.id: runner for runner in ctx.runners}
    outdated = [by_id[entry.runner_id] for entry in progress]
    retiring = min(surplus_idle, len(outdated)) if not ctx.drained else 0

    requeue_after: float | None = None
    creating = bool(scale.create) and ctx.ready
    creates: list[Create] = []
    unbound_demand = pool.intake == "scale_set" and waiting > 0
    if creating:
        warm_free = sum(1 for runner in ctx.runners if runner.state in FREE_STATES and runner.job_id is None)
        creates = planned_creates(ctx, scale.create, unbound_demand=unbound_demand, warm=max(min_idle - warm_free, 0))
    elif scale.create and ctx.paused_s > 0:
        requeue_after = ctx.paused_s

    in_flight = retiring + sum(
        1
        for runner in ctx.runners
        if (runner.state in STARTING_STATES and runner.job_id is None)
        or (runner.state is RunnerState.IDLE and runner.id in ctx.busy)
        or (runner.state is RunnerState.DELETING and runner.reason in ROLLOUT_REASONS)
    )
    rollout = RolloutPlan(
        staying=tuple(progress[retiring:]),
        max_surge=pool.rollout.max_surge,
        in_flight=in_flight,
        min_idle=min_idle,
        room=pool.max_runners - sum(1 for runner in ctx.runners if runner.state in CAPACITY_STATES),
        usable_clouds=ctx.usable_clouds,
        allowed=ctx.ready and ctx.deleting_known,
        reason=why_replaced(ctx, outdated) if outdated else None,
    )

    retires: list[Retire] = []
    at_once = ctx.outranked > 0
    if surplus_idle:
        retires, grace_left = surplus_retirements(ctx, surplus_idle, outdated, at_once=at_once)
        if grace_left is not None:
            requeue_after = min(requeue_after or grace_left, grace_left)
    if warm.next_change is not None:
        # Look again when the schedule changes what the pool keeps warm, not a period later.
        change_in = max((warm.next_change - ctx.now).total_seconds(), 0.1)
        requeue_after = change_in if requeue_after is None else min(requeue_after, change_in)
    return PoolPlan(
        desired=scale.desired,
        min_idle=0 if ctx.drained else kept,
        queued_total=queued_total,
        held_jobs=len(ctx.held),
        states=states,
        creating=creating,
        creates=tuple(creates),
        unbound_demand=unbound_demand,
        retires=tuple(retires),
        abandoned=tuple(abandoned),
        settled=tuple(settled),
        outdated=tuple(runner.id for runner in outdated),
        rollout=rollout,
        requeue_after=requeue_after,
        at_once=at_once,
        confirm_now=ctx.unconfirmed > 0 and ctx.ready and not ctx.drained and room_left(ctx, len(creates)) > 0,
    )


def room_left(ctx: PoolContext, creating: int) -> int:
    """How many more runners `max_runners` allows once `creating` more are started."""
    holding = sum(count for state, count in ctx.states.items() if state in CAPACITY_STATES)
    return ctx.config.pools[ctx.name].max_runners - holding - creating
