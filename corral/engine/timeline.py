"""A job's story: its timeline from the first word of it to its end, and while it waits, what holds it.

Told from what corral keeps anyway (the job row, the runner rows and their events) plus what this replica
knows now (the last look, the quota, GitHub's rate gate), so the hot path writes nothing for it. Any replica
can tell any job's story: a pool another replica holds is described from the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from corral.clock import SYSTEM_CLOCK, Clock
from corral.cloud.quota import servers_that_fit
from corral.engine.coordinator import Engine
from corral.explain import Wait, WaitFacts, explain, scale_set_of
from corral.model import FREE_STATES, Job, JobState, Reason, Runner, RunnerEvent, RunnerState
from corral.policy import DemandTuning
from corral.store import stories

RUNNER_STEPS = {
    RunnerState.PENDING: ("runner_requested", "runner {name} requested ({reason})"),
    RunnerState.CREATING: ("create_requested", "runner {name}: JIT config made, server create sent"),
    RunnerState.BOOTING: ("server_created", "runner {name}: server created{server}"),
    RunnerState.IDLE: ("runner_online", "runner {name} online"),
    RunnerState.BUSY: ("runner_busy", "runner {name} took a job"),
    RunnerState.FINISHED: ("runner_finished", "runner {name} done ({reason})"),
    RunnerState.FAILED: ("runner_failed", "runner {name} failed ({reason}){message}"),
    RunnerState.DELETING: ("runner_deleting", "runner {name}: deleting ({reason})"),
    RunnerState.DELETED: ("runner_deleted", "runner {name} deleted"),
}
"""Each runner move as a timeline step: its event name and what it says."""
SERVER_ACTIVE = ("server_active", "runner {name}: server ACTIVE, the runner starting in it")
GITHUB_SECOND = timedelta(seconds=1)
"""GitHub stamps a job's steps to the whole second (`started_at`, `completed_at`); corral's own, finer."""
_BOOT_STEPS = frozenset(
    {"received", "matched", "unmatched", "runner_requested", "create_requested", "server_created", "server_active"}
)
AFTER_WITHIN_ITS_SECOND = {
    "started": _BOOT_STEPS | {"runner_online"},
    "completed": _BOOT_STEPS | {"runner_online", "started", "runner_busy"},
}
"""For each step GitHub stamps, corral's steps that must come before it when both fall in its second: a job
starts on a runner that is online, so `started` at 12:00:07 follows a runner online at 12:00:07.6."""


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    event: str
    """`received`, `queued`, `matched`, `unmatched`, a runner's step (`RUNNER_STEPS`), `started`, `completed`, and
    for a job lost with its server `lost`, then `rerun` or `not_rerun`."""
    detail: str
    runner: str | None = None


@dataclass(frozen=True)
class JobStory:
    job: Job
    timeline: list[TimelineEntry]
    waiting: Wait | None
    """Its current blocking reason while queued; None otherwise."""


def timeline(job: Job, runners: list[Runner], events: list[RunnerEvent]) -> list[TimelineEntry]:
    """The job's steps and its runners' moves, in time order (the job's own steps first on a tie)."""
    entries = [TimelineEntry(job.received_at, "received", _received(job.source))]
    if job.queued_at is not None:
        entries.append(TimelineEntry(job.queued_at, "queued", "queued on GitHub"))
    if job.pool is not None:
        entries.append(TimelineEntry(job.received_at, "matched", f"matched pool {job.pool}"))
    else:
        entries.append(TimelineEntry(job.received_at, "unmatched", "no pool fits its labels and repository"))
    by_id = {runner.id: runner for runner in runners}
    for event in events:
        runner = by_id[event.runner_id]
        name, text = SERVER_ACTIVE if event.reason is Reason.SERVER_ACTIVE else RUNNER_STEPS[event.to_state]
        detail = text.format(
            name=runner.name,
            reason=event.reason.value,
            server=f" ({runner.server_id})" if runner.server_id else "",
            message=f": {event.message}" if event.message else "",
        )
        if runner.job_id is not None and runner.job_id != job.id:
            detail += " (started for another job; it ran this one)"
        entries.append(TimelineEntry(event.at, name, detail, runner.name))
    if job.started_at is not None:
        entries.append(TimelineEntry(job.started_at, "started", f"started on {job.runner_name or 'a runner'}"))
    if job.completed_at is not None:
        entries.append(TimelineEntry(job.completed_at, "completed", f"completed: {job.conclusion or 'unknown'}"))
    entries.extend(_lost(job))
    return _in_time_order(entries)


def _in_time_order(entries: list[TimelineEntry]) -> list[TimelineEntry]:
    """`entries` by time, the job's own steps first on a tie; a step GitHub stamped to the second is placed
    after the steps of that second which must precede it (`AFTER_WITHIN_ITS_SECOND`), not before them because
    its time lost its fraction."""

    def key(entry: TimelineEntry) -> tuple[datetime, int]:
        before = AFTER_WITHIN_ITS_SECOND.get(entry.event)
        if before is None:
            return entry.at, 0
        end = entry.at + GITHUB_SECOND
        latest = max(
            (other.at for other in entries if other.event in before and entry.at <= other.at < end), default=None
        )
        return (entry.at, 0) if latest is None else (latest, 1)

    return sorted(entries, key=key)


def _lost(job: Job) -> list[TimelineEntry]:
    """A job lost with its runner's server: when corral saw it, and whether it re-ran it (`rerun_lost_jobs`)."""
    if job.lost_at is None:
        return []
    steps = [TimelineEntry(job.lost_at, "lost", f"lost with its server ({job.lost_reason or 'no reason kept'})")]
    if job.rerun == "requested" and job.rerun_at is not None:
        steps.append(TimelineEntry(job.rerun_at, "rerun", "re-run: GitHub queues the job again in a new attempt"))
    elif job.rerun is not None and job.rerun != "requesting":
        steps.append(TimelineEntry(job.completed_at or job.lost_at, "not_rerun", f"not re-run: {job.rerun}"))
    return steps


def _received(source: str | None) -> str:
    if source is None:
        return "recorded"
    if source.startswith("webhook:"):
        return f"webhook delivery {source.removeprefix('webhook:')}"
    if source.startswith("scale_set:"):
        return f"scale-set message {source.removeprefix('scale_set:')}"
    return {"webhook": "webhook (no delivery id)", "poll": "found by polling GitHub's queued runs"}.get(source, source)


async def job_story(
    engine: Engine, job_id: int, *, scale_set: bool = False, clock: Clock = SYSTEM_CLOCK
) -> JobStory | None:
    """The story of a job (`scale_set`: of a scale-set job, by its runner request id); None if unknown. A job
    still queued is explained as of `clock`'s now."""
    record = await engine.store.run(stories.job_record, job_id, scale_set=scale_set)
    if record is None:
        return None
    job = record.job
    steps = timeline(job, record.runners, record.events)
    if job.status is not JobState.QUEUED:
        return JobStory(job, steps, None)
    name = job.pool or scale_set_of(job, engine.config.pools)
    pool_facts = await engine.store.run(stories.pool_facts, job, name) if name else stories.PoolFacts()
    return JobStory(job, steps, explain(_facts(engine, job, name, record.runners, pool_facts, clock.now())))


def _facts(
    engine: Engine, job: Job, name: str | None, runners: list[Runner], pool_facts: stories.PoolFacts, now: datetime
) -> WaitFacts:
    config = engine.config
    tuning = DemandTuning.of(config)
    pool = config.pools.get(name) if name else None
    if name is None or pool is None:
        return WaitFacts(job=job, now=now, pools=config.pools, tuning=tuning)
    status = pool_facts.status
    own = [runner for runner in runners if runner.job_id == job.id and runner.state in FREE_STATES]
    latest = engine.observer.latest
    servers = {runner.id: latest.server_for(runner.id) for runner in own} if latest is not None else {}
    if engine.leases.holds(name):
        ready, reason = engine.checker.readiness(name)
        quota_short: tuple[str, ...] | list[str] = engine.snapshot(name).quota_short
    else:
        ready, reason = (status.ready, status.reason) if status else (False, "not reconciled yet")
        cost, headroom = engine.checker.cost(name), latest.headroom if latest is not None else None
        fits, limited_by = servers_that_fit(headroom, cost) if headroom and cost else (None, [])
        quota_short = limited_by if fits == 0 else ()
    github_paused = engine.github.paused_for(pool.scope)
    forecast = engine.scaler.warmth.latest.get(name) if pool.auto_warm is not None else None
    auto_warm = f"auto keeps {forecast.wanted} warm: {forecast.reason}" if forecast is not None else None
    return WaitFacts(
        job=job,
        now=now,
        pools=config.pools,
        tuning=tuning,
        drained=name in engine.drained or bool(status and status.drained),
        ready=ready,
        not_ready_reason=reason,
        own_runners=own,
        pool_runners=pool_facts.runners,
        repository_runners=pool_facts.repository_runners,
        create_paused_until=status.create_paused_until if status else None,
        last_error=pool_facts.last_error,
        github_paused_until=now + timedelta(seconds=github_paused) if github_paused > 0 else None,
        quota_short=tuple(quota_short),
        older_queued=pool_facts.older_queued,
        server_status={runner_id: server.status for runner_id, server in servers.items() if server is not None},
        auto_warm=auto_warm,
    )
