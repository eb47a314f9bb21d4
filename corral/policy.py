"""Pure decisions: which pool a job belongs to, and how many runners a pool should create or delete.

Nothing here performs I/O or reads a clock; the engine gathers the facts, asks, and acts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from corral.config import CorralConfig, PoolConfig, ScopeConfig
from corral.model import JobState, QueuedJob, Reason, RunnerState

IMPLICIT_LABELS = frozenset({"self-hosted", "linux", "x64"})
"""Labels every corral runner has without a pool declaring them (GitHub adds them as read-only labels)."""


def in_scope(scope: ScopeConfig, repository: str) -> bool:
    """Whether runners registered at `scope` can take jobs of `repository` (`owner/name`)."""
    owner = repository.split("/", 1)[0].lower()
    if scope.repo:
        return scope.repo.lower() == repository.lower()
    if scope.org:
        return scope.org.lower() == owner
    return True


def match_pool(
    labels: Iterable[str], repository: str, pools: Mapping[str, PoolConfig], default_pool: str | None
) -> str | None:
    """The pool that should serve a job, or None when no pool fits (the job is unmatched).

    A job with only generic labels (`self-hosted`, OS, arch) goes to the default pool. Otherwise a pool
    fits when it has every label of the job, GitHub's rule; among several, the most specific (fewest
    labels beyond the job's) wins, then the higher `priority`, then the name, so the answer is stable.
    Scale-set pools never match: GitHub hands their jobs to their scale set, and their runners come from
    its statistics, not from the job table.
    """
    wanted = frozenset(label.lower() for label in labels)
    pools = {name: pool for name, pool in pools.items() if pool.intake == "webhook"}
    default = pools.get(default_pool) if default_pool is not None else None
    if wanted <= IMPLICIT_LABELS and default is not None and in_scope(default.scope, repository):
        return default_pool
    candidates = [
        (len(pool.label_set() - wanted), -pool.priority, name)
        for name, pool in pools.items()
        if wanted <= pool.label_set() | IMPLICIT_LABELS and in_scope(pool.scope, repository)
    ]
    return min(candidates)[2] if candidates else None


@dataclass(frozen=True)
class PoolCounts:
    """What a pool has now (runners by state) and what waits for it (queued jobs not yet taken)."""

    starting: int = 0
    idle: int = 0
    busy: int = 0
    queued_jobs: int = 0

    @property
    def active(self) -> int:
        return self.starting + self.idle + self.busy


@dataclass(frozen=True)
class ScalePlan:
    """How many runners to create, and how many idle runners are surplus (deleted oldest first)."""

    desired: int
    create: int
    surplus_idle: int


def plan_scale(counts: PoolCounts, *, min_idle: int, max_runners: int) -> ScalePlan:
    """Desired = one free runner per queued job plus `min_idle` warm ones, capped by `max_runners`.

    Starting runners count as free: they will take the queued jobs when they come online, so a burst
    of N jobs starts N runners, not N plus those already booting. Starting runners are never surplus
    (they are cheaper to finish than to waste); only idle ones are, and only down to what is wanted.
    """
    wanted_free = counts.queued_jobs + min_idle
    desired = min(counts.busy + wanted_free, max_runners)
    room = max(max_runners - counts.active, 0)
    create = min(max(wanted_free - (counts.starting + counts.idle), 0), room)
    over_max = max(counts.active - max_runners, 0)
    over_want = max(counts.starting + counts.idle - wanted_free, 0)
    surplus_idle = min(counts.idle, max(over_max, over_want))
    return ScalePlan(desired=desired, create=create, surplus_idle=surplus_idle)


@dataclass(frozen=True)
class Outdated:
    """An idle runner a rollout replaces (on an image its placement no longer keeps, or in a cloud the pool
    left), and how far its replacement got."""

    runner_id: str
    cloud: str
    """The cloud it is in: its replacement goes there while the pool still places runners there."""
    replacement: Literal["booting", "online"] | None = None
    """`booting`: a replacement started for it is not online yet; `online`: its replacement is idle, so this
    runner is the one to retire; None: no replacement is known (none started, it took a job, or it was started
    before a restart)."""


@dataclass(frozen=True)
class Replacement:
    """A runner to start in place of an outdated one."""

    runner_id: str
    """The outdated runner it replaces."""
    cloud: str | None
    """Where it is made: the replaced runner's own cloud, when one of the pool's usable placements is there
    (None: where any new runner of the pool goes, the first usable placement with room)."""


def retirement_order(outdated: Sequence[Outdated]) -> list[Outdated]:
    """The order surplus retires outdated runners in: first those whose replacement is online (the surplus is
    that replacement, and retiring its own runner keeps each cloud's share of the pool), then those without
    one, last those whose replacement still boots (they stay until it is online). Otherwise as given."""
    rank = {"online": 0, None: 1, "booting": 2}
    return sorted(outdated, key=lambda runner: rank.get(runner.replacement, 1))


def plan_replacements(
    outdated: Sequence[Outdated],
    *,
    max_surge: int,
    in_flight: int,
    min_idle: int,
    room: int,
    creating: int,
    usable: Iterable[str],
) -> list[Replacement]:
    """Which outdated idle runners get a replacement this pass, and in which cloud.

    `outdated` are those that stay this pass (not retired as surplus), in the order they go. No more than
    `max_surge` replacements in flight (`in_flight`: replacements booting, replaced runners still being retired
    or deleted), no more than the pool keeps warm (`min_idle`: outdated runners above it are surplus, retired
    as such), within what `max_runners` leaves (`room`) after the `creating` runners this pass starts for
    demand. A pass that creates for demand replaces too: under a steady stream of jobs nearly every pass
    does, and a rollout that waited for one that does not would wait as long as the stream lasts. A runner
    whose replacement boots or is online gets no second one. Each replacement goes to the cloud of the runner
    it replaces while one of `usable` (the clouds of the pool's usable placements) is that cloud, so a
    rollout moves no runner between clouds.
    """
    count = max(min(len(outdated), min_idle, max_surge - in_flight, room - creating), 0)
    chosen = [runner for runner in outdated if runner.replacement is None][:count]
    clouds = set(usable)
    return [Replacement(runner.runner_id, runner.cloud if runner.cloud in clouds else None) for runner in chosen]


@dataclass
class Demand:
    """A pool's queued jobs split into those that get runners now and those held back for now."""

    wanted: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    capped: list[int] = field(default_factory=list)
    """Jobs whose repository already holds `max_runners_per_repo` of the pool's runners."""
    unconfirmed: list[int] = field(default_factory=list)
    """Jobs left out only for being older than `stale_job_check` with no recent word from GitHub that they
    still wait (a job held back by `max_runners` ages so): a pass with room has GitHub asked at once."""


@dataclass(frozen=True)
class DemandTuning:
    """The settings `judge_demand` weighs queued jobs by, as the configuration gives them."""

    stale_after: timedelta
    max_runners_per_job: int
    max_hold: timedelta
    busy_covers_job: timedelta
    confirm_after: timedelta

    @classmethod
    def of(cls, config: CorralConfig) -> DemandTuning:
        return cls(
            stale_after=timedelta(seconds=config.stale_job_check),
            max_runners_per_job=config.max_runners_per_job,
            max_hold=timedelta(seconds=config.tuning.max_hold),
            busy_covers_job=timedelta(seconds=config.tuning.busy_covers_job),
            confirm_after=timedelta(seconds=config.tuning.confirm_after),
        )

    def judge(self, queued: Sequence[QueuedJob], now: datetime) -> Demand:
        return judge_demand(
            queued,
            now=now,
            stale_after=self.stale_after,
            max_runners_per_job=self.max_runners_per_job,
            max_hold=self.max_hold,
            busy_covers_job=self.busy_covers_job,
            confirm_after=self.confirm_after,
        )


def judge_demand(
    queued: Sequence[QueuedJob],
    *,
    now: datetime,
    stale_after: timedelta,
    max_runners_per_job: int,
    max_hold: timedelta,
    busy_covers_job: timedelta,
    confirm_after: timedelta,
) -> Demand:
    """Which queued jobs count as demand now (oldest first), and which are held back.

    A fresh job is demand; an old one only once GitHub recently confirmed it still queued, so a cancelled
    or already-taken job whose webhook was lost does not get a runner.

    A job is presumed taken for `busy_covers_job` after its own runner took a job corral cannot name (it
    finished before corral saw it busy), or took a job that had a runner of its own (a swap: runners take
    the oldest fitting job, so that other runner most likely takes this one). The webhook saying so is
    usually on its way; the engine also asks GitHub after `confirm_after` (time for the runner that took it
    to say so), and a confirmation then that the job is still queued makes it demand again.

    A job whose runners went to other jobs `max_runners_per_job` times is held: each further runner is a
    likely duplicate, so it gets another only once GitHub confirms it still queued after a wait that
    doubles with every further diversion (at most `max_hold`).
    """
    demand = Demand()
    for job in queued:
        taken_at = job.maybe_taken_at
        presumed = taken_at is not None and taken_at >= now - busy_covers_job
        if presumed and taken_at is not None and (job.checked_at is None or job.checked_at < taken_at + confirm_after):
            continue
        confirmed = job.checked_at is not None and job.checked_at >= now - stale_after
        if job.received_at < now - stale_after and not confirmed:
            demand.unconfirmed.append(job.id)
            continue
        if job.runners_diverted >= max_runners_per_job:
            hold = min(stale_after * 2 ** (job.runners_diverted - max_runners_per_job), max_hold)
            due = (job.diverted_at or now) + hold
            if job.checked_at is None or job.checked_at < due:
                demand.held.append(job.id)
                continue
        demand.wanted.append(job.id)
    return demand


def cap_per_repository(
    demand: Demand,
    queued: Sequence[QueuedJob],
    *,
    covered: set[int],
    holdings: Counter[str],
    cap: int,
) -> Demand:
    """The demand with each repository's uncovered jobs beyond `cap` runners moved to `capped`.

    `holdings` counts the runners each repository already holds (started for its jobs, not yet gone) and is
    updated with the runners this demand will start. A covered job already has its runner, counted there.
    Jobs stay oldest first, so once a repository is below its cap again, its oldest job is served first,
    and other repositories' jobs are served in order of queue time meanwhile.
    """
    repository = {job.id: job.repository for job in queued}
    kept = Demand(held=list(demand.held), capped=list(demand.capped), unconfirmed=list(demand.unconfirmed))
    for job_id in demand.wanted:
        if job_id not in covered:
            owner = repository.get(job_id, "")
            if holdings[owner] >= cap:
                kept.capped.append(job_id)
                continue
            holdings[owner] += 1
        kept.wanted.append(job_id)
    return kept


@dataclass(frozen=True)
class RunnerFacts:
    """What one pass knows about one runner, joined from the store, the cloud, GitHub and the job table.

    `server_known`/`registration_known` are False when that side could not be listed, or was listed before
    the runner entered its state: a missing server or registration then means nothing, and no verdict may
    rest on it. `observed_age_s` is the runner's age when the last look at both sides began, so a timeout
    is only called on a look that could have seen the runner come online.
    """

    state: RunnerState
    in_flight: bool
    observed_age_s: float
    bootstrap_timeout_s: float
    server_known: bool = True
    server_status: str | None = None
    server_fault: str | None = None
    registration_known: bool = True
    registered: bool = False
    online: bool = False
    busy: bool = False
    had_registration: bool = False
    job_status: JobState | None = None
    """The status of the job a webhook or GitHub said this runner took, if any."""


@dataclass(frozen=True)
class Verdict:
    target: RunnerState
    reason: Reason
    message: str | None = None


STOPPED_SERVER_STATES = frozenset({"SHUTOFF", "STOPPED", "DELETED", "SOFT_DELETED"})


def is_quota_fault(fault: str | None) -> bool:
    """Whether a server's ERROR fault says a quota ran out, not that the server failed to build.

    Nova checks the quota when it accepts a create and again once the server is scheduled; creates that
    race past the first check (several at once, none counted yet) are accepted (202) and the recheck then
    puts the surplus in ERROR with a 413 fault: "Quota exceeded for cores, instances: Requested 1, 1, but
    already used 3, 3 of 3, 3 cores, instances" (seen on Nova 34). Cinder's quota at build says
    "VolumeLimitExceeded: Maximum number of volumes allowed (10) exceeded for quota 'volumes'" or
    "VolumeSizeExceedsAvailableQuota". Either means "wait", like a create refused for quota. A judgement of
    the fault's text, so it lives with the judge rather than in the cloud layer."""
    text = (fault or "").lower()
    return "quota" in text and "exceed" in text


def judge_runner(facts: RunnerFacts) -> Verdict | None:
    """The next state a runner should move to given what is known, or None to leave it as it is.

    One step at a time: the caller applies the verdict and asks again, so each transition is recorded
    with its own reason.
    """
    state = facts.state
    if state is RunnerState.DELETED:
        return None  # terminal: the row is history, whatever the far ends say
    server_gone = facts.server_known and facts.server_status is None
    server_stopped = facts.server_status in STOPPED_SERVER_STATES
    server_error = facts.server_status == "ERROR"
    registration_gone = facts.registration_known and not facts.registered

    if state in (RunnerState.FINISHED, RunnerState.FAILED):
        return Verdict(RunnerState.DELETING, Reason.CLEANUP)
    if state is RunnerState.DELETING:
        if server_gone and registration_gone:
            return Verdict(RunnerState.DELETED, Reason.GONE)
        return None
    if state in (RunnerState.PENDING, RunnerState.CREATING):
        if facts.in_flight or not facts.server_known:
            return None
        if facts.server_status is not None:
            if state is RunnerState.PENDING:
                return Verdict(RunnerState.CREATING, Reason.SERVER_FOUND, "found its server after a restart")
            return Verdict(RunnerState.BOOTING, Reason.SERVER_FOUND, "found its server after a restart")
        return Verdict(RunnerState.FAILED, Reason.INTERRUPTED, "creation was interrupted before a server existed")

    # BOOTING, IDLE or BUSY: what the job table says is the freshest news there is. A runner whose job both
    # started and ended before a pass saw it busy is busy first (from the job's start), then finished: its
    # history, and the usage and metrics read from it, hold the time it ran the job.
    if facts.job_status is JobState.COMPLETED:
        if state is RunnerState.BUSY:
            return Verdict(RunnerState.FINISHED, Reason.JOB_DONE)
        return Verdict(RunnerState.BUSY, Reason.TOOK_JOB)
    if facts.job_status is JobState.IN_PROGRESS and state is not RunnerState.BUSY:
        return Verdict(RunnerState.BUSY, Reason.TOOK_JOB)

    if server_gone:
        return Verdict(RunnerState.FAILED, Reason.SERVER_VANISHED, "its server disappeared")
    if server_error:
        fault = facts.server_fault or "no fault given"
        if is_quota_fault(facts.server_fault):  # creates raced past the quota: the quota failed, not the server
            return Verdict(RunnerState.FAILED, Reason.CLOUD_QUOTA, f"quota exceeded: server in ERROR: {fault}")
        return Verdict(RunnerState.FAILED, Reason.SERVER_ERROR, f"server in ERROR: {fault}")

    if state is RunnerState.BOOTING:
        if facts.registered and facts.online:
            return Verdict(RunnerState.BUSY if facts.busy else RunnerState.IDLE, Reason.CAME_ONLINE)
        if server_stopped:
            return Verdict(RunnerState.FINISHED, Reason.RUNNER_EXITED, "server shut down (runner exited)")
        if facts.had_registration and registration_gone:
            return Verdict(RunnerState.FINISHED, Reason.DEREGISTERED, "registration is gone")
        if facts.registration_known and facts.observed_age_s > facts.bootstrap_timeout_s:
            return Verdict(
                RunnerState.FAILED,
                Reason.BOOTSTRAP_TIMEOUT,
                f"no runner came online within bootstrap_timeout ({facts.bootstrap_timeout_s:.0f}s)",
            )
        return None

    # IDLE or BUSY
    if registration_gone:
        return Verdict(RunnerState.FINISHED, Reason.DEREGISTERED, "runner deregistered (its job is done)")
    if server_stopped:
        return Verdict(RunnerState.FINISHED, Reason.RUNNER_EXITED, "server shut down (runner exited)")
    if state is RunnerState.IDLE and facts.registered and facts.busy:
        return Verdict(RunnerState.BUSY, Reason.TOOK_JOB)
    return None
