"""Response shapes of the REST API: what operators and scripts see. Never a secret in any of them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from corral.cloud.quota import servers_that_fit
from corral.config import CorralConfig
from corral.engine.operator import CacheSummary, JobStory, Operator, Rollout, ScaleSetStatus, SessionState
from corral.model import Job, Runner, RunnerEvent, RunnerState
from corral.policy import PoolCounts, plan_scale
from corral.schedules import InForce
from corral.store.leases import LeaseRow, ReplicaRow
from corral.usage import UsageRow


class RolloutView(BaseModel):
    """A pool's move to a new image, as its holder judges it (see docs/configuration.md, rollouts)."""

    from_image: str
    to_image: str
    online: int
    """Runners on the new image that came online..."""
    failed: int
    """...and that failed to (their server went to ERROR, vanished, or never registered)."""
    rolled_back: bool
    """Too many failed: new runners get `from_image` until the pool's image changes again."""
    phase: str
    """`canary` (a share of new runners on `to_image` until jobs succeed on it), `rolling` (every new runner
    on it, idle runners on `from_image` replaced) or `rolled_back`."""
    canaries: int
    """New runners given `to_image` while it was a canary."""
    jobs_succeeded: int
    """Jobs that succeeded on `to_image` since the rollout began, as last counted for its canary..."""
    canary_jobs: int | None
    """...and how many promote it (None: the pool has no canary)."""


class CacheVolumesView(BaseModel):
    """A pool's cache volumes (`cache_volumes`)."""

    max: int
    """Its `cache_volumes.max` (0: the setting is gone, and what is left is being deleted)."""
    creating: int
    held: int
    """Attached to (or about to be attached to) a runner's server."""
    free: int
    deleting: int
    started_warm: int
    """The pool's runners that started with a volume an earlier server used..."""
    started_cold: int
    """...with a volume new to them..."""
    started_without: int
    """...and without one (all `max` in use, or Cinder could not make one), over the history kept."""
    warm_share: float | None
    """`started_warm` over all three (None: no runner yet)."""

    @classmethod
    def of(cls, summary: CacheSummary) -> CacheVolumesView:
        return cls(
            max=summary.max,
            creating=summary.states["creating"],
            held=summary.states["held"],
            free=summary.states["free"],
            deleting=summary.states["deleting"],
            started_warm=summary.starts["warm"],
            started_cold=summary.starts["cold"],
            started_without=summary.starts["none"],
            warm_share=summary.warm_share,
        )


class PoolView(BaseModel):
    name: str
    default: bool
    removed: bool
    ready: bool
    reason: str | None
    applied_generation: int
    desired: int
    min_idle: int
    """Warm runners kept idle now (a schedule's value in force)."""
    min_idle_next_change: datetime | None = None
    """When a `min_idle` schedule changes it next (None: a plain number, or no change within a year)..."""
    min_idle_next: int | None = None
    """...and to what."""
    min_idle_auto: dict[str, Any] | None = None
    """`min_idle: {auto: ...}`'s last forecast: `wanted`, the `boot_s` and `window_s` it took, the
    `rate_per_minute` of the last 15 minutes, the `recent_need` (last 15 minutes) and `usual_need` (the day plan),
    and the `reason` in words."""
    max_runners: int
    queued_jobs: int
    held_jobs: int
    """Queued jobs held back for now: their runners went to other jobs `max_runners_per_job` times."""
    pending: int
    creating: int
    booting: int
    starting: int
    idle: int
    busy: int
    failed: int
    deleting: int
    held_by: str | None
    """The replica acting for the pool (with several on PostgreSQL; on SQLite, always the one answering)."""
    intake: str = "webhook"
    """`webhook` or `scale_set`: how the pool hears of its jobs."""
    scale_set_id: int | None = None
    session: str | None = None
    """A scale-set pool's session: starting, listening, conflict or failing. For a pool another replica holds,
    from the database: listening while its holder has a session open, starting otherwise (ask the holder for
    more)."""
    quota_fits: int | None = None
    """How many more of this pool's servers the project's quota has room for, as of the last look (None: no
    limit applies, or the quota or the pool's flavor is not known yet); the headroom is shared by every pool."""
    quota_limited_by: list[str] = []
    """The resources that make `quota_fits` what it is (`instances`, `cores`, `ram_mb`, `volumes`,
    `gigabytes`)."""
    quota_short: list[str] = []
    """Resources whose headroom held back runners the pool wanted on its last pass: it waits for the quota
    (a create the headroom shows refused is never sent)."""
    rollout: RolloutView | None = None
    """A change of image under way or rolled back in the pool's first placement, for a pool this replica
    holds (None otherwise)..."""
    placement_rollouts: dict[str, RolloutView] = {}
    """...and in its later placements, by placement (`pool@1`, ...), each of which may name its own image."""
    job_messages: int | None = None
    """Job messages a scale-set pool's listener handled since its replica took the pool (None elsewhere)."""
    recoveries: int | None = None
    """...and how often it recovered (a token renewed, a session opened anew, a scale set created again)."""
    listener_restarts: int | None = None
    """...and how often its listener stopped on an error it had no recovery for and was started again."""
    session_error: str | None = None
    """Why the listener last failed (kept once it listens again: `session` says whether it still fails)..."""
    session_error_since: datetime | None = None
    """...and since when it failed with that error."""
    cache_volumes: CacheVolumesView | None = None
    """Its cache volumes, for a pool with `cache_volumes` (or one whose volumes are still being deleted)."""


def rollout_views(config: CorralConfig, operator: Operator, name: str) -> dict[str, RolloutView]:
    """The rollouts of a pool this replica holds, by placement key."""
    return {key: rollout_view(config, name, rollout) for key, rollout in operator.rollouts_of(name).items()}


def rollout_view(config: CorralConfig, name: str, rollout: Rollout) -> RolloutView:
    return RolloutView(
        from_image=rollout.from_image,
        to_image=rollout.to_image,
        online=rollout.online,
        failed=rollout.failed,
        rolled_back=rollout.rolled_back,
        phase=rollout.phase,
        canaries=rollout.canaries,
        jobs_succeeded=rollout.succeeded,
        canary_jobs=pool.rollout.canary_jobs if (pool := config.pools.get(name)) and pool.rollout.canary else None,
    )


async def pool_views(config: CorralConfig, operator: Operator) -> list[PoolView]:
    """Per pool (including removed pools still draining), as each pool's last pass left it: from this
    replica's memory for the pools it holds, from the database for those another replica holds."""
    held_by = await operator.holders()
    names = operator.pool_names()
    remote = await operator.remote_snapshots(name for name in names if not operator.holds(name))
    caches = await operator.cache_volumes(config)
    views = []
    for name in names:
        pool = config.pools.get(name)
        snapshot = remote.get(name) or operator.snapshot(name)
        states = snapshot.states
        warm = pool.min_idle_at(operator.schedule_now()) if pool else InForce(0)
        min_idle, max_runners = (warm.min_idle, pool.max_runners) if pool else (0, 0)
        auto = snapshot.warm_forecast if pool is not None and pool.auto_warm is not None else None
        if auto is not None and snapshot.min_idle is not None:
            min_idle = snapshot.min_idle  # what the last pass kept: the forecast's, over the schedule's floor
        starting = states[RunnerState.PENDING] + states[RunnerState.CREATING] + states[RunnerState.BOOTING]
        counts = PoolCounts(
            starting=starting,
            idle=states[RunnerState.IDLE],
            busy=states[RunnerState.BUSY],
            queued_jobs=snapshot.queued_jobs,
        )
        scale_set_id, session, job_messages, recoveries = None, None, None, None
        scale_set: ScaleSetStatus | None = None
        if name in remote:
            ready, reason = snapshot.ready, snapshot.reason
            if pool is not None and pool.intake == "scale_set":
                scale_set_id = snapshot.scale_set_id
                session = (SessionState.LISTENING if snapshot.session_open else SessionState.STARTING).value
        else:
            ready, reason = operator.pool_ready(name) if pool else (False, "removed from the configuration")
            scale_set = operator.scale_set_status(name)
            if scale_set is not None:
                scale_set_id, session = scale_set.scale_set_id, scale_set.state.value
                job_messages, recoveries = scale_set.job_messages, scale_set.recoveries
        cost = operator.server_cost(name)
        headroom = operator.headroom
        quota_fits, limited_by = servers_that_fit(headroom, cost) if headroom and cost else (None, [])
        rollouts = rollout_views(config, operator, name)
        views.append(
            PoolView(
                name=name,
                default=name == config.default_pool,
                removed=pool is None,
                ready=ready,
                reason=reason,
                applied_generation=operator.applied_generation(name),
                desired=plan_scale(counts, min_idle=min_idle, max_runners=max_runners).desired,
                min_idle=min_idle,
                min_idle_next_change=warm.next_change,
                min_idle_next=warm.next_min_idle,
                min_idle_auto=auto.as_dict() if auto is not None else None,
                max_runners=max_runners,
                queued_jobs=snapshot.queued_jobs,
                held_jobs=snapshot.held_jobs,
                pending=states[RunnerState.PENDING],
                creating=states[RunnerState.CREATING],
                booting=states[RunnerState.BOOTING],
                starting=starting,
                idle=states[RunnerState.IDLE],
                busy=states[RunnerState.BUSY],
                failed=states[RunnerState.FAILED],
                deleting=states[RunnerState.DELETING],
                held_by=held_by.get(name),
                intake=pool.intake if pool else "webhook",
                scale_set_id=scale_set_id,
                session=session,
                quota_fits=quota_fits,
                quota_limited_by=limited_by,
                quota_short=list(snapshot.quota_short),
                job_messages=job_messages,
                recoveries=recoveries,
                listener_restarts=scale_set.restarts if scale_set else None,
                session_error=scale_set.error if scale_set else None,
                session_error_since=scale_set.error_since if scale_set else None,
                rollout=rollouts.pop(name, None),
                placement_rollouts=rollouts,
                cache_volumes=CacheVolumesView.of(caches[name]) if name in caches else None,
            )
        )
    return views


class ReplicaView(BaseModel):
    name: str
    version: str
    pid: int
    started_at: datetime
    last_seen: datetime
    live: bool
    """Seen within the lease time; a replica that is not loses its pools once their leases expire."""
    pools: list[str]
    """The pools whose leases it holds now (`~housekeeping`: job upkeep, pruning and orphans for all)."""
    answering: bool
    """Whether it is the replica that answered this request."""


def replica_views(
    replicas: list[ReplicaRow], leases: list[LeaseRow], *, this: str, lease_s: float, now: datetime
) -> list[ReplicaView]:
    held: dict[str, list[str]] = {}
    for lease in leases:
        if lease.valid:
            held.setdefault(lease.holder, []).append(lease.pool)
    return [
        ReplicaView(
            name=row.id,
            version=row.version,
            pid=row.pid,
            started_at=row.started_at,
            last_seen=row.last_seen,
            live=(now - row.last_seen).total_seconds() < lease_s,
            pools=sorted(held.get(row.id, [])),
            answering=row.id == this,
        )
        for row in replicas
    ]


class RunnerView(BaseModel):
    id: str
    name: str
    pool: str
    scope: str
    state: str
    reason: str
    """Why it is in its state (a reason code, also the label of the runner metrics)."""
    message: str | None
    """What the cloud or GitHub said, when it failed."""
    server_id: str | None
    image_id: str | None
    """The image its server was made from (a rollout replaces idle runners on one the pool no longer uses)."""
    cloud: str | None
    """Which of corral's clouds its server is made in (null: the first, for runners older than the record)."""
    github_runner_id: int | None
    job_id: int | None
    labels: list[str]
    created_at: datetime
    state_changed_at: datetime
    registered_at: datetime | None

    @classmethod
    def of(cls, runner: Runner) -> RunnerView:
        return cls(
            id=runner.id,
            name=runner.name,
            pool=runner.pool,
            scope=runner.scope,
            state=runner.state.value,
            reason=runner.reason.value,
            message=runner.message,
            server_id=runner.server_id,
            image_id=runner.image_id,
            cloud=runner.cloud,
            github_runner_id=runner.github_runner_id,
            job_id=runner.job_id,
            labels=list(runner.labels),
            created_at=runner.created_at,
            state_changed_at=runner.state_changed_at,
            registered_at=runner.registered_at,
        )


class RunnerEventView(BaseModel):
    from_state: str | None
    to_state: str
    reason: str
    message: str | None
    at: datetime

    @classmethod
    def of(cls, event: RunnerEvent) -> RunnerEventView:
        return cls(
            from_state=event.from_state.value if event.from_state else None,
            to_state=event.to_state.value,
            reason=event.reason.value,
            message=event.message,
            at=event.at,
        )


class JobView(BaseModel):
    id: int
    repository: str
    labels: list[str]
    status: str
    conclusion: str | None
    pool: str | None
    runner_name: str | None
    queued_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    received_at: datetime
    runners_started: int
    runners_diverted: int
    run_id: int | None = None
    workflow: str | None = None
    name: str | None = None
    run_attempt: int | None = None
    lost_at: datetime | None = None
    """When corral saw the server of the runner running it die under it (see `rerun_lost_jobs`)."""
    lost_reason: str | None = None
    rerun: str | None = None
    """What corral did about it: `requested` (re-run), `not failed`, `off`, `limit`, `refused: ...`."""

    @classmethod
    def of(cls, job: Job) -> JobView:
        return cls(
            id=job.id,
            run_id=job.run_id,
            workflow=job.workflow,
            name=job.name,
            run_attempt=job.run_attempt,
            lost_at=job.lost_at,
            lost_reason=job.lost_reason,
            rerun=job.rerun,
            repository=job.repository,
            labels=list(job.labels),
            status=job.status.value,
            conclusion=job.conclusion,
            pool=job.pool,
            runner_name=job.runner_name,
            queued_at=job.queued_at,
            started_at=job.started_at,
            completed_at=job.completed_at,
            received_at=job.received_at,
            runners_started=job.runners_started,
            runners_diverted=job.runners_diverted,
        )


class ReloadResult(BaseModel):
    reloaded: bool
    """Whether this replica took the file (`problems` says why not)."""
    generation: int
    problems: list[str] = []
    replicas: dict[str, str] = {}
    """The other live replicas (PostgreSQL), each asked to reload its own file: `reloaded`, `refused` (its log
    says why) or `no answer`."""


class WaitView(BaseModel):
    code: str
    """A `corral.explain.WaitCode`: `no_pool`, `pool_full`, `quota`, `repository_cap`, `runner_booting`..."""
    sentence: str
    until: datetime | None = None
    """When it lifts by itself, where known (a backoff, a rate limit)."""


class TimelineEntryView(BaseModel):
    at: datetime
    event: str
    detail: str
    runner: str | None = None


class JobStoryView(JobView):
    source: str | None = None
    """How corral first heard of it: `webhook:<delivery id>`, `webhook` or `poll`."""
    waiting: WaitView | None = None
    """While it is queued: what holds it now."""
    timeline: list[TimelineEntryView] = []

    @classmethod
    def of_story(cls, story: JobStory) -> JobStoryView:
        waiting = story.waiting
        return cls(
            **JobView.of(story.job).model_dump(),
            source=story.job.source,
            waiting=WaitView(code=waiting.code.value, sentence=waiting.sentence, until=waiting.until)
            if waiting
            else None,
            timeline=[
                TimelineEntryView(at=entry.at, event=entry.event, detail=entry.detail, runner=entry.runner)
                for entry in story.timeline
            ],
        )


class UsageRowView(BaseModel):
    pool: str | None = None
    repository: str | None = None
    """Of the job the runners ran (else were started for); empty for warm runners that ran none."""
    workflow: str | None = None
    boot_s: float
    idle_s: float
    busy_s: float
    runner_s: float
    """boot + idle + busy."""
    runners: int
    jobs: int
    """Jobs that started in the window (by the pool they matched)."""
    mean_queue_s: float | None
    """Their mean wait from queued to started."""
    lost: int = 0
    """Jobs lost with their runner's server in the window."""
    reruns: int = 0
    """Jobs corral re-ran in the window (`rerun_lost_jobs`)."""


class UsageView(BaseModel):
    since: datetime
    until: datetime
    group_by: list[str]
    rows: list[UsageRowView]

    @classmethod
    def of(cls, rows: list[UsageRow], since: datetime, until: datetime, group_by: list[str]) -> UsageView:
        return cls(
            since=since,
            until=until,
            group_by=group_by,
            rows=[
                UsageRowView(
                    **row.key,
                    boot_s=round(row.boot_s, 3),
                    idle_s=round(row.idle_s, 3),
                    busy_s=round(row.busy_s, 3),
                    runner_s=round(row.runner_s, 3),
                    runners=row.runners,
                    jobs=row.jobs,
                    mean_queue_s=None if row.mean_queue_s is None else round(row.mean_queue_s, 3),
                    lost=row.lost,
                    reruns=row.reruns,
                )
                for row in rows
            ],
        )
