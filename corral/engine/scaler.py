"""Scaling a pool: gather what a pass decides from, plan it (`engine.planning`), and carry the plan out.

The gathering is the I/O: the queued jobs (no more of a backlog than could change the plan) or, for a
scale-set pool, the scale set's statistics; the quota's and the rollouts' readings; which runners the
supervisor is busy with. `planning.plan_pool` decides from that snapshot alone. Carrying it out writes the
intents for as many new runners as the quota's headroom holds (`engine.quota`), in the first of the pool's
placements with room (the rest spill over to the next), hands them to the creator, starts a rollout's
replacements, and retires the runners the plan names; a scale set's runners GitHub gave up on are retired
while gathering, so the plan already counts them gone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from string import Template
from typing import Protocol

from corral.clock import utcnow
from corral.cloud.quota import ServerCost
from corral.config import CorralConfig, Placement
from corral.engine.backoff import LogOnce
from corral.engine.cleaner import Cleaner
from corral.engine.creator import Creator
from corral.engine.planning import (
    Create,
    PoolContext,
    PoolPlan,
    covered_jobs,
    jobs_needed,
    live_replacements,
    plan_pool,
)
from corral.engine.quota import QuotaBudget, SharedRoom
from corral.engine.rollouts import Rollouts
from corral.engine.running import Running, RunningView
from corral.engine.status import PoolSnapshot, StatusPublisher
from corral.engine.supervisor import ActionKind, Supervisor
from corral.engine.transitions import log_new_runners
from corral.engine.warmth import WarmForecaster
from corral.github.scaleset import Statistics
from corral.metrics import CAPACITY_REFUSALS, QUOTA_DEFERRALS
from corral.model import CAPACITY_STATES, STARTING_STATES, QueuedJob, Reason, Runner, RunnerState
from corral.policy import Demand, DemandTuning, Replacement, cap_per_repository
from corral.store import Store, jobs, runners
from corral.store.leases import Fence
from corral.store.runners import NewRunner

ASK_AGAIN_S = 5.0
"""How soon a pool with room may have GitHub asked about its unconfirmed jobs again."""


class ScaleSetNews(Protocol):
    """What a scale-set pool's listener heard from GitHub (`engine.scalesets.ScaleSetIntake`)."""

    def statistics(self, name: str) -> Statistics | None: ...

    def statistics_at(self, name: str) -> datetime | None:
        """When the listener heard those statistics."""
        ...

    def ended_runners(self, name: str) -> dict[str, Reason]:
        """The pool's runners GitHub will hand no (more) job, by name, and why; the scaler removes those it
        has dealt with."""
        ...

    def replaced_at(self, name: str) -> datetime | None:
        """When the pool's scale set was replaced by another: older runners get no job."""
        ...


class NoScaleSets:
    def statistics(self, name: str) -> Statistics | None:
        return None

    def statistics_at(self, name: str) -> datetime | None:
        return None

    def ended_runners(self, name: str) -> dict[str, Reason]:
        return {}

    def replaced_at(self, name: str) -> datetime | None:
        return None


@dataclass(frozen=True)
class _Placed:
    """Claims for a pass's new runners in one of the pool's placements."""

    placement: Placement
    budget: QuotaBudget
    """Its cloud's quota budget, which holds the claims."""
    cost: ServerCost | None
    claims: list[str]


class Scaler:
    def __init__(
        self,
        *,
        running: Running,
        readiness: Callable[[str], tuple[bool, str | None]],
        store: Store,
        supervisor: Supervisor,
        creator: Creator,
        cleaner: Cleaner,
        status: StatusPublisher,
        log_once: LogOnce,
        fence: Callable[[str], Fence | None] = lambda _: None,
        scale_sets: ScaleSetNews | None = None,
        quotas: Callable[[str], QuotaBudget] | None = None,
        placement_ready: Callable[[str], bool] = lambda _: True,
        server_cost: Callable[[str], ServerCost | None] = lambda _: None,
        rollouts: Rollouts | None = None,
        checked_image: Callable[[str], str | None] = lambda _: None,
        others: Callable[[str], Collection[str]] = lambda _: (),
        clock: Callable[[], datetime] = utcnow,
        wall: Callable[[], datetime] = utcnow,
        ask_github: Callable[[float], None] = lambda _: None,
        warmth: WarmForecaster | None = None,
    ) -> None:
        """`running` is the configuration a reload replaces (each pass reads it once); the callables read the
        engine's other parts' current state; `fence` gives the pool's lease (None on SQLite), so that its intents
        are written only while it is held."""
        self._running = running
        self._readiness = readiness
        self.store = store
        self.supervisor = supervisor
        self.creator = creator
        self.cleaner = cleaner
        self.status = status
        self.log_once = log_once
        self._fence = fence
        self._scale_sets = scale_sets or NoScaleSets()
        budget = QuotaBudget()
        self._quota_of = quotas or (lambda _: budget)
        """Each cloud's quota budget, by cloud name."""
        self._placement_ready = placement_ready
        """Whether a placement (by `Placement.key`) passed its check against its cloud."""
        self._server_cost = server_cost
        self._rollouts = rollouts or Rollouts(running)
        """Which image is in service per pool (idle runners on another are replaced), and its canaries."""
        self._checked_image = checked_image
        """The image a pool's `image` resolved to at its last check."""
        self._others = others
        """The pools whose creates since a reading share the project's quota with this replica's own: every
        pool when replicas share the database (a pool may have another replica's creates under way, even one
        this replica took over), none on SQLite."""
        self.clock = clock
        """What time `min_idle` schedules are read at (a test moves it to a window's edge)."""
        self._wall = wall
        """The engine's clock: what idle grace and the demand's waits are measured by."""
        self._ask_github = ask_github
        """Has the job upkeep ask GitHub about uncertain jobs in so many seconds (`Housekeeper.ask_github_in`)."""
        self.warmth = warmth or WarmForecaster(store)
        """The warm runners `min_idle: {auto: ...}` pools want, from their history."""
        self._asked_at: dict[str, datetime] = {}
        """When each pool last had GitHub asked early about its unconfirmed jobs (`_may_ask`)."""
        self._replacing: dict[str, dict[str, str]] = {}
        """Per pool, the replacements this replica started and not yet seen take a job or go, by id, with the
        outdated runner each replaces: retired first once its replacement is online, and given no second one
        while it boots. Lost with a restart, which only loses that pairing (`max_surge` still holds)."""

    async def scale(
        self, name: str, current: list[Runner], states: Counter[RunnerState], *, deleting_known: bool = True
    ) -> float | None:
        """Create what demand and `min_idle` want, retire idle runners above it; returns when to look again.

        `deleting_known`: `current` holds the runners being deleted (a pass after a new look does); a rollout
        counts those it retired against `max_surge`, so it starts replacements only on such passes.

        Gathers one `PoolContext`, asks `planning.plan_pool`, and carries the plan out."""
        # One configuration for the whole pass (config, template, generation and drained pools, read at once):
        # a reload while the pass awaits the store or the quota changes nothing of it.
        view = self._running.read()
        ctx = await self._context(name, view, current, states, deleting_known)
        plan = plan_pool(ctx)
        if plan.confirm_now and self._may_ask(name, ctx.wall):
            self._ask_github(0.0)
        await self._execute(ctx, plan, view.template, view.generation)
        return plan.requeue_after

    def _may_ask(self, name: str, now: datetime) -> bool:
        """At most one early ask a pool per `ASK_AGAIN_S`: a job GitHub cannot answer about (an outage) stays
        unconfirmed, and every pass would otherwise ask again."""
        last = self._asked_at.get(name)
        if last is not None and (now - last).total_seconds() < ASK_AGAIN_S:
            return False
        self._asked_at[name] = now
        return True

    async def _context(
        self, name: str, view: RunningView, current: list[Runner], states: Counter[RunnerState], deleting_known: bool
    ) -> PoolContext:
        """What the pass decides from, read once: the store's queued jobs, or a scale set's statistics and
        the runners GitHub gave up on; the quota's and the rollouts' readings; which runners the supervisor is
        busy with; the clock."""
        config = view.config
        pool = config.pools[name]
        ready, reason = self._readiness(name)
        drained = name in view.drained
        queued: list[QueuedJob] = []
        demand = Demand()
        queued_count = 0
        statistics: Statistics | None = None
        statistics_at: datetime | None = None
        ended: dict[str, Reason] = {}
        replaced_at: datetime | None = None
        if pool.intake == "scale_set":
            statistics = self._scale_sets.statistics(name)
            statistics_at = self._scale_sets.statistics_at(name)
            ended = dict(self._scale_sets.ended_runners(name))
            replaced_at = self._scale_sets.replaced_at(name)
        else:
            needed = jobs_needed(pool, current, states[RunnerState.BUSY], drained=drained)
            queued, demand, exhausted = await self._demand(name, config, needed, current)
            queued_count = len(queued) if exhausted else await self.store.run(jobs.queued_count, name)
        kept = await self._images_kept(name, config)
        replacing = live_replacements(self._replacing.get(name, {}), current)
        self._replacing[name] = replacing
        now = self.clock()
        auto = pool.auto_warm
        warm_forecast = await self.warmth.forecast(name, auto, now) if auto is not None and not drained else None
        if auto is None:
            self.warmth.forget(name)
        return PoolContext(
            name=name,
            config=config,
            now=now,
            warm_forecast=warm_forecast,
            wall=self._wall(),
            runners=tuple(current),
            states=Counter(states),
            busy=frozenset(runner.id for runner in current if self.supervisor.busy(runner.id)),
            ready=ready,
            reason=reason,
            drained=drained,
            deleting_known=deleting_known,
            queued=tuple(queued),
            queued_count=queued_count,
            wanted=tuple(demand.wanted),
            held=tuple(demand.held),
            statistics=statistics,
            statistics_at=statistics_at,
            ended=ended,
            replaced_at=replaced_at,
            outranked=self._quota_of(config.clouds_of(name)[0]).outranked(name, pool.priority),
            kept_images={key: frozenset(images) for key, images in kept.items()},
            rolling_back=any(rollout.rolled_back for rollout in self._rollouts.rollouts_of(name).values()),
            replacing=dict(replacing),
            usable_clouds=tuple(placement.cloud for placement in self._placements(name, config)),
            paused_s=self.creator.paused_s(name),
            unconfirmed=len(demand.unconfirmed),
        )

    async def _execute(self, ctx: PoolContext, plan: PoolPlan, template: Template, generation: int) -> None:
        """Carry the plan out through the supervisor: creates for demand (placed where the quota has room),
        then the rollout's replacements (sized by what was written), then retirements; publish the figures."""
        name, pool, current = ctx.name, ctx.pool, list(ctx.runners)
        clouds = ctx.config.clouds_of(name)
        by_id = {runner.id: runner for runner in current}
        ended = self._scale_sets.ended_runners(name)
        for runner_name in plan.settled:  # dealt with (unless news came for it meanwhile)
            if ended.get(runner_name) == ctx.ended[runner_name]:
                del ended[runner_name]
        for retire in plan.abandoned:
            self.retire([by_id[retire.runner_id]], [RunnerState.IDLE], retire.reason, retire.message)
        if ctx.held:
            self.log_once.warning(
                f"held:{name}",
                f"pool {name}: {len(ctx.held)} queued job(s) held back: their runners went to other jobs "
                f"{ctx.config.max_runners_per_job} times (max_runners_per_job); each gets another once GitHub "
                "confirms it still queued",
            )
        quota_short: list[str] = []
        started: list[Runner] = []
        if plan.creating:
            if plan.creates:
                quota_short, started = await self._start(
                    name, ctx.config, template, current, ctx.queued, plan.creates, unbound_demand=plan.unbound_demand
                )
        else:
            for cloud in clouds:
                self._quota_of(cloud).not_waiting(name)
        # Replacements come after this pass's creates for demand (which take the room first), and not while
        # the quota holds runners for jobs back: those are served first, and a replacement's claim would
        # forget that the pool waits for them.
        replacements = plan.replacements(len(started), quota_short=bool(quota_short))
        if replacements and plan.rollout.reason is not None:
            what = (
                "in a cloud that is no longer one of its placements"
                if plan.rollout.reason is Reason.PLACEMENT_CHANGED
                else "on an image the pool no longer uses"
            )
            self.log_once.warning(
                f"rollout:{name}",
                f"pool {name}: replacing idle runners {what}, {pool.rollout.max_surge} at a time (rollout.max_surge)",
            )
            quota_short = await self._replace(
                name, ctx.config, template, [*current, *started], replacements, plan.rollout.reason
            )
        elif not plan.outdated:
            self.log_once.clear(f"rollout:{name}")
        for retire in plan.retires:
            self.retire([by_id[retire.runner_id]], [RunnerState.IDLE], retire.reason, retire.message)
        waiting_in = {cloud: self._quota_of(cloud).waiting(name) for cloud in dict.fromkeys(clouds)}
        snapshot = PoolSnapshot(
            name,
            Counter(plan.states),
            queued_jobs=plan.queued_total,
            held_jobs=plan.held_jobs,
            desired=plan.desired,
            min_idle=plan.min_idle,
            warm_forecast=ctx.warm_forecast,
            ready=ctx.ready,
            reason=ctx.reason,
            quota_short=tuple(quota_short),
            server_cost=self._server_cost(name),
            quota_waiting=sum(waiting_in.values()),
            quota_waiting_cloud=next((cloud for cloud, count in waiting_in.items() if count), None),
        )
        await self.status.publish(snapshot, generation)
        await self._rollouts.save(self.store, name)

    async def _images_kept(self, name: str, config: CorralConfig) -> dict[str, set[str]]:
        """Per placement of the pool (by key), the images its idle runners may keep: the one in service, and
        a canary's new one (none known yet: no set). A canary whose jobs succeeded enough is promoted here."""
        kept: dict[str, set[str]] = {}
        for placement in config.placements(name):
            key = placement.key(name)
            checked = self._checked_image(key)
            if (canary := self._rollouts.canary(key)) is not None:
                since = canary.started_at
                succeeded = await self.store.run(runners.jobs_succeeded_on, name, canary.to_image, since)
                self._rollouts.jobs_succeeded(key, succeeded)
            image = self._rollouts.image(key, checked)
            canary = self._rollouts.canary(key)
            images = {image} if image is not None else set()
            kept[key] = (images | {canary.to_image}) if canary is not None else images
        return kept

    async def _replace(
        self,
        name: str,
        config: CorralConfig,
        template: Template,
        current: list[Runner],
        replacements: list[Replacement],
        why: Reason,
    ) -> list[str]:
        """Start the replacements, each in the cloud it was planned for (first, spilling over to the pool's
        other placements as any new runner when that one has no room); returns what held some back. `current`
        holds the runners this pass already started, so that a cloud on trial still gets one at a time."""
        short: list[str] = []
        by_cloud: dict[str | None, list[str]] = {}
        for replacement in replacements:
            by_cloud.setdefault(replacement.cloud, []).append(replacement.runner_id)
        usable = self._placements(name, config)
        for cloud, replaced in by_cloud.items():
            # The first usable placement in that cloud: the pool's first there may be paused or failing its check.
            home = next((placement for placement in usable if placement.cloud == cloud), None)
            creates = [Create(None, why, config.pools[name].scope.key)] * len(replaced)
            group_short, created = await self._start(name, config, template, current, [], creates, first=home)
            short = short or group_short
            current = [*current, *created]
            self._replacing.setdefault(name, {}).update(zip((runner.id for runner in created), replaced, strict=False))
        return short

    async def _demand(
        self, name: str, config: CorralConfig, needed: int, current: list[Runner]
    ) -> tuple[list[QueuedJob], Demand, bool]:
        """The pool's queued jobs judged (`policy.judge_demand`) and, with `max_runners_per_repo`, capped per
        repository (`policy.cap_per_repository`), read a page at a time until `needed` of them count as demand
        or none are left (then the third value is True: every queued job was read)."""
        tuning = DemandTuning.of(config)
        cap = config.pools[name].max_runners_per_repo
        covered = covered_jobs(current)
        holdings = Counter(
            runner.scope.removeprefix("repo:")
            for runner in current
            if runner.scope.startswith("repo:") and runner.state in CAPACITY_STATES
        )
        now = self._wall()
        queued: list[QueuedJob] = []
        demand = Demand()
        page = needed * 2 + 20
        while len(demand.wanted) < needed:
            batch = await self.store.run(jobs.queued_of_pool, name, limit=page, offset=len(queued))
            queued += batch
            judged = tuning.judge(batch, now)
            if cap is not None:
                judged = cap_per_repository(judged, batch, covered=covered, holdings=holdings, cap=cap)
            demand.wanted += judged.wanted
            demand.held += judged.held
            demand.capped += judged.capped
            demand.unconfirmed += judged.unconfirmed
            if len(batch) < page:
                return queued, demand, True
        return queued, demand, False

    async def _start(
        self,
        name: str,
        config: CorralConfig,
        template: Template,
        current: list[Runner],
        queued: Sequence[QueuedJob],
        creates: Sequence[Create],
        *,
        unbound_demand: bool = False,
        first: Placement | None = None,
    ) -> tuple[list[str], list[Runner]]:
        """Write the intents for the planned runners and start creating them. `unbound_demand`: the runners
        answer demand that names no job (a scale set's assigned jobs). No more are started than the quota's
        headroom has room for; returns the resources that held some back (empty if none did), and the runners
        written. `first`: the placement tried before the pool's others (when usable)."""
        pool = config.pools[name]
        count = len(creates)
        job_runners = count if unbound_demand else sum(1 for create in creates if create.job_id is not None)
        groups, short = self._place(name, config, current, count, job_runners, first)
        self._note_quota(name, count - sum(len(group.claims) for group in groups), short)
        received = {job.id: job.received_at for job in queued}
        written: list[Runner] = []
        left = list(creates)
        for group in groups:
            # The oldest jobs first, then warm runners: the first placement with room takes the first of them.
            taken, left = left[: len(group.claims)], left[len(group.claims) :]
            intents = [
                NewRunner(
                    pool=name,
                    scope=create.scope,
                    labels=tuple(pool.labels),
                    reason=create.reason,
                    job_id=create.job_id,
                    cloud=group.placement.cloud,
                )
                for create in taken
            ]
            created, group_short = await self._write(name, config, group, intents, unbound_demand)
            written += created
            short = group_short or short
            for runner in created:
                job_received_at = received.get(runner.job_id) if runner.job_id is not None else None
                create = self.creator.create(runner, config, template, job_received_at, group.placement)
                self.supervisor.start(
                    ActionKind.CREATE,
                    runner.id,
                    self._create(runner, group.budget, create),
                    on_error=self.creator.on_error(runner),
                    group=name,
                )
        return short, written

    def _placements(self, name: str, config: CorralConfig) -> list[Placement]:
        """The pool's placements that may take runners now, in order: their check found nothing wrong and
        their cloud has not failed the pool lately."""
        return [
            placement
            for placement in config.placements(name)
            if self._placement_ready(placement.key(name)) and not self.creator.cloud_paused_s(name, placement.cloud)
        ]

    def _place(
        self,
        name: str,
        config: CorralConfig,
        current: list[Runner],
        count: int,
        job_runners: int,
        first: Placement | None = None,
    ) -> tuple[list[_Placed], list[str]]:
        """Claim room for `count` runners (the first `job_runners` for queued jobs) in the pool's placements
        (`first` before the others, when usable): each takes what its cloud's quota headroom has room for (a
        cloud on trial after failing the pool: one runner at a time), the rest spill over to the next. Runners
        for jobs no placement has room for make the pool wait in its last placement's cloud (lower-priority
        pools there make room). Returns the claims by placement and what held the rest back."""
        pool = config.pools[name]
        usable = self._placements(name, config)
        if first is not None and first in usable:
            usable = [first, *(placement for placement in usable if placement != first)]
        if not all(self._quota_of(placement.cloud).looked for placement in usable):
            return [], []  # the first look wakes the pool again, with the quota read
        groups: list[_Placed] = []
        short: list[str] = []
        left, jobs_left = count, job_runners
        for index, placement in enumerate(usable):
            if not left:
                break
            budget, cost = self._quota_of(placement.cloud), self._server_cost(placement.key(name))
            last = index == len(usable) - 1
            wanted = left
            if self.creator.cloud_on_trial(name, placement.cloud):
                cloud_of = config.cloud_of
                trying = any(r.state in STARTING_STATES and cloud_of(r.cloud) == placement.cloud for r in current)
                wanted = 0 if trying else 1
            claims, short = budget.claim(
                cost, wanted, pool=name, priority=pool.priority, for_jobs=jobs_left if last else 0
            )
            if claims:
                groups.append(_Placed(placement, budget, cost, claims))
            left -= len(claims)
            jobs_left = max(jobs_left - len(claims), 0)
        return groups, short

    async def _write(
        self, name: str, config: CorralConfig, group: _Placed, intents: list[NewRunner], unbound_demand: bool
    ) -> tuple[list[Runner], list[str]]:
        """Write one placement's intents (within `max_runners`, and with replicas within what the others'
        creates left of its cloud's quota); returns the runners written and the quota resources that held
        some back."""
        pool = config.pools[name]
        room = self._shared_room(name, config, group)
        if (cost := self._server_cost(name)) is not None:
            await self.status.cost_before_creates(name, cost)
        try:
            created = await self.store.run(
                runners.add,
                config.name_prefix,
                intents,
                max_runners=pool.max_runners,
                fence=self._fence(name),
                room=room,
                now=self._wall(),
            )
        except BaseException:
            for claim in group.claims:  # no runner was written: the room they held is free again
                group.budget.release(claim)
            raise
        short: list[str] = []
        if room is not None and room.held_back and group.cost is not None:
            # Other replicas' creates since the reading took the room: those runners wait like the rest.
            cut = intents[len(created) : len(created) + room.held_back]
            for_jobs_cut = len(cut) if unbound_demand else sum(1 for intent in cut if intent.job_id is not None)
            group.budget.held_back(name, pool.priority, group.cost, for_jobs_cut)
            short = room.short
            self._note_quota(name, len(cut), short)
        elif len(created) < len(intents):
            CAPACITY_REFUSALS.labels(name).inc(len(intents) - len(created))
            self.log_once.warning(
                f"capacity:{name}",
                f"pool {name}: {len(intents) - len(created)} runner(s) not started: the database found the pool "
                f"already at max_runners ({pool.max_runners}); another writer filled it first",
            )
        for claim, runner in zip(group.claims, created, strict=False):
            group.budget.bind(claim, runner.id)
        for claim in group.claims[len(created) :]:
            group.budget.release(claim)
        log_new_runners(created)
        return created, short

    def _note_quota(self, name: str, held_back: int, short: list[str]) -> None:
        """Count runners the quota held back, and say so at most once a minute per pool and resource: under
        a tight quota a pool's passes are short one moment and not the next, and each count differs, so a
        line per change would flood the log (the count is in `corral_quota_deferrals_total`)."""
        if short:
            QUOTA_DEFERRALS.labels(name).inc(held_back)
            self.log_once.warning(
                f"quota:{name}",
                f"pool {name}: runners wait for quota headroom ({', '.join(short)}): the project's quota has "
                "no room for them until servers are deleted or the quota is raised",
            )

    def _shared_room(self, name: str, config: CorralConfig, group: _Placed) -> SharedRoom | None:
        """With replicas sharing the cloud's project, what the add should check of the others' creates since
        the reading (None: no other replica holds a pool, or nothing is known of the quota or the cost)."""
        others = self._others(name)
        began = group.budget.read_began_wall
        left = group.budget.left(below=config.pools[name].priority, excluding=group.claims)
        if not others or group.cost is None or began is None or left is None:
            return None
        first = group.placement.cloud == config.default_cloud
        own = group.budget.reserved_runners()
        return SharedRoom(left, group.cost, others, began, cloud=group.placement.cloud, or_unrecorded=first, own=own)

    async def _create(self, runner: Runner, budget: QuotaBudget, create: Awaitable[None]) -> None:
        """The create, then its quota reservation marked finished (the next reading counts the server)."""
        try:
            await create
        finally:
            budget.finished(runner.id)

    def retire(self, candidates: list[Runner], states: list[RunnerState], reason: Reason, message: str | None) -> None:
        for runner in candidates:
            if runner.state in states and not self.supervisor.busy(runner.id):
                self.supervisor.start(
                    ActionKind.RETIRE, runner.id, self.cleaner.retire(runner, reason, message), group=runner.pool
                )
