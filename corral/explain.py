"""Why a queued job has no runner yet: one blocking reason, as a code and a sentence an operator can act on.

The question users ask most of a runner manager ("my job has waited 40 minutes: why?") is answered here, from
facts the engine already keeps (the job row, the pool's runners and status, the quota, GitHub's rate gate),
not from logs. Pure: `engine.timeline` gathers the facts; this only decides which reason comes first. The
order follows the path from a job to its runner: a job that fits no pool waits for nothing else; a job whose
runner is booting waits for the boot, whatever the quota says; only a job that should get a runner now and
does not is blocked by the pool's limits, and then the first limit that holds it is named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from corral.config import PoolConfig
from corral.model import STARTING_STATES, Job, JobState, QueuedJob, Runner, RunnerState
from corral.policy import IMPLICIT_LABELS, DemandTuning, in_scope


class WaitCode(StrEnum):
    """A closed set, so scripts and dashboards can group waiting jobs by what holds them."""

    NO_POOL = "no_pool"
    POOL_REMOVED = "pool_removed"
    POOL_DRAINED = "pool_drained"
    POOL_NOT_READY = "pool_not_ready"
    RUNNER_BOOTING = "runner_booting"
    RUNNER_ONLINE = "runner_online"
    PRESUMED_TAKEN = "presumed_taken"
    UNCONFIRMED = "unconfirmed"
    HELD = "held"
    REPOSITORY_CAP = "repository_cap"
    POOL_FULL = "pool_full"
    GITHUB_RATE_LIMIT = "github_rate_limit"
    CLOUD_BACKOFF = "cloud_backoff"
    QUOTA = "quota"
    SCALE_SET = "scale_set"
    NEXT_PASS = "next_pass"  # noqa: S105 (a reason code, not a password)


@dataclass(frozen=True)
class Wait:
    code: WaitCode
    sentence: str
    until: datetime | None = None
    """When the block lifts by itself, where that is known (a backoff, a rate limit)."""


@dataclass(frozen=True)
class WaitFacts:
    """What is known about a queued job and its pool at one moment."""

    job: Job
    now: datetime
    pools: Mapping[str, PoolConfig]
    tuning: DemandTuning
    drained: bool = False
    ready: bool = True
    not_ready_reason: str | None = None
    own_runners: Sequence[Runner] = ()
    """The job's own runners still free (starting or idle)."""
    pool_runners: int = 0
    """The pool's runners that count against `max_runners`."""
    repository_runners: int = 0
    """The pool's runners registered at the job's repository (`max_runners_per_repo`)."""
    create_paused_until: datetime | None = None
    last_error: str | None = None
    github_paused_until: datetime | None = None
    quota_short: Sequence[str] = ()
    older_queued: int = 0
    """Queued jobs of the pool ahead of this one."""
    server_status: Mapping[str, str] = field(default_factory=dict)
    """The cloud's status of each own runner's server, by runner id, as of the last look."""
    auto_warm: str | None = None
    """For a pool with `min_idle: {auto: ...}`: how many it keeps warm and why (its last forecast)."""


def explain(facts: WaitFacts) -> Wait | None:
    """The job's current blocking reason; None once it is not queued."""
    job = facts.job
    if job.status is not JobState.QUEUED:
        return None
    name = job.pool or scale_set_of(job, facts.pools)
    if name is None:
        return _no_pool(job, facts.pools)
    pool = facts.pools.get(name)
    if pool is None:
        return Wait(WaitCode.POOL_REMOVED, f"its pool {name} was removed from the configuration")
    if facts.drained:
        return Wait(WaitCode.POOL_DRAINED, f"pool {name} is drained: it starts no runner until undrained")
    if pool.intake == "scale_set":
        # No runner is the job's own, and GitHub, not corral, judges demand: only the pool's limits apply.
        return _limit(facts, name, pool) or _scale_set_wait(name)
    own = _own_runner(facts)
    if own is not None:
        return own
    demand = _demand(facts)
    if demand is not None:
        return demand
    return _limit(facts, name, pool) or _next_pass(facts)


def scale_set_of(job: Job, pools: Mapping[str, PoolConfig]) -> str | None:
    """The scale-set pool a job asks for by name (`runs-on: <scale set name>`), if any: such a job has no pool
    in the job table (GitHub routes it to the scale set), yet it is corral's to serve."""
    asked = {label.lower() for label in job.labels} - IMPLICIT_LABELS
    for name, pool in sorted(pools.items()):
        names = {(pool.scale_set_name or name).lower()} | pool.label_set()
        if pool.intake == "scale_set" and in_scope(pool.scope, job.repository) and asked and asked <= names:
            return name
    return None


def _scale_set_wait(name: str) -> Wait:
    return Wait(
        WaitCode.SCALE_SET,
        f"pool {name} is a scale set: GitHub assigns its jobs to the scale set's idle runners, and the pool "
        "keeps a free runner for each job assigned and not yet running",
    )


def _no_pool(job: Job, pools: Mapping[str, PoolConfig]) -> Wait:
    asked = sorted({label.lower() for label in job.labels} - IMPLICIT_LABELS)
    candidates = [
        (len(set(asked) - pool.label_set()), name, sorted(set(asked) - pool.label_set()))
        for name, pool in sorted(pools.items())
        if pool.intake == "webhook" and in_scope(pool.scope, job.repository)
    ]
    if not candidates:
        return Wait(WaitCode.NO_POOL, f"no pool's scope covers repository {job.repository}")
    _, nearest, missing = min(candidates)
    return Wait(
        WaitCode.NO_POOL,
        f"no pool has every label it asks for ({', '.join(asked) or 'none beyond the implicit ones'}); the "
        f"nearest, pool {nearest}, lacks {', '.join(missing)}",
    )


def _own_runner(facts: WaitFacts) -> Wait | None:
    for runner in facts.own_runners:
        if runner.state in STARTING_STATES:
            server = facts.server_status.get(runner.id)
            on = f", server {server}" if server else ""
            since = int((facts.now - runner.created_at).total_seconds())
            # A job booting its own runner found no warm one: in an auto pool, say what auto expected.
            warm = f"; {facts.auto_warm}" if facts.auto_warm else ""
            return Wait(
                WaitCode.RUNNER_BOOTING,
                f"waiting for its runner {runner.name} to boot ({runner.state.value}{on}, started {since} s ago){warm}",
            )
    for runner in facts.own_runners:
        if runner.state is RunnerState.IDLE:
            return Wait(
                WaitCode.RUNNER_ONLINE,
                f"its runner {runner.name} is online; GitHub hands it the oldest job it fits",
            )
    return None


def _demand(facts: WaitFacts) -> Wait | None:
    """What the scaler's judgement (`policy.judge_demand`) says of this one job: wanted (None here), or why not."""
    job, tuning = facts.job, facts.tuning
    queued = QueuedJob(
        job.id, job.received_at, job.checked_at, job.runners_diverted, job.diverted_at, job.maybe_taken_at
    )
    demand = tuning.judge([queued], facts.now)
    if demand.wanted:
        return None
    if demand.held:
        return Wait(
            WaitCode.HELD,
            f"its runners went to other jobs {job.runners_diverted} times (max_runners_per_job "
            f"{tuning.max_runners_per_job}): it gets another once GitHub confirms it still queued",
        )
    taken = job.maybe_taken_at
    if taken is not None and taken >= facts.now - tuning.busy_covers_job:
        return Wait(
            WaitCode.PRESUMED_TAKEN,
            "probably taken by another of the pool's runners (its own took another job); corral asks GitHub "
            "to confirm before starting another",
            until=taken + tuning.confirm_after,
        )
    return Wait(
        WaitCode.UNCONFIRMED,
        "queued longer than stale_job_check: corral asks GitHub whether it is still queued before starting a "
        "runner (a cancelled job's webhook may have been lost)",
    )


def _limit(facts: WaitFacts, name: str, pool: PoolConfig) -> Wait | None:
    job = facts.job
    if not facts.ready:
        return Wait(WaitCode.POOL_NOT_READY, f"pool {name} is not ready: {facts.not_ready_reason or 'unknown'}")
    cap = pool.max_runners_per_repo
    if cap is not None and facts.repository_runners >= cap:
        return Wait(
            WaitCode.REPOSITORY_CAP,
            f"repository {job.repository} holds {facts.repository_runners} of pool {name}'s runners, its "
            f"cap (max_runners_per_repo {cap})",
        )
    if facts.pool_runners >= pool.max_runners:
        return Wait(
            WaitCode.POOL_FULL,
            f"pool {name} is at max_runners ({pool.max_runners}); a runner starts when one finishes",
        )
    paused = facts.github_paused_until
    if paused is not None and paused > facts.now:
        return Wait(
            WaitCode.GITHUB_RATE_LIMIT,
            f"GitHub's rate limit for the pool's credentials is spent until {paused:%H:%M:%S} UTC",
            until=paused,
        )
    backoff = facts.create_paused_until
    if backoff is not None and backoff > facts.now:
        error = f": {facts.last_error}" if facts.last_error else ""
        return Wait(
            WaitCode.CLOUD_BACKOFF,
            f"pool {name} backs off after failed creates until {backoff:%H:%M:%S} UTC{error}",
            until=backoff,
        )
    if facts.quota_short:
        return Wait(
            WaitCode.QUOTA,
            f"the project's quota has no room for another of pool {name}'s servers ({', '.join(facts.quota_short)})",
        )
    return None


def _next_pass(facts: WaitFacts) -> Wait:
    ahead = f"; {facts.older_queued} older queued job(s) of the pool come first" if facts.older_queued else ""
    return Wait(WaitCode.NEXT_PASS, f"a runner is requested on the pool's next pass{ahead}")
