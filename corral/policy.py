"""Pure decisions: which pool a job belongs to, and how many runners a pool should create or delete.

Nothing here performs I/O or reads a clock; the engine gathers the facts, asks, and acts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from corral.config import PoolConfig, ScopeConfig
from corral.model import RunnerState

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
    """
    wanted = frozenset(label.lower() for label in labels)
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
class RunnerFacts:
    """What one pass knows about one runner, joined from the store, the cloud and GitHub.

    `server_known`/`registration_known` are False when that side could not be listed this pass: a
    missing server or registration then means nothing, and no verdict may rest on it.
    """

    state: RunnerState
    in_flight: bool
    age_s: float
    bootstrap_timeout_s: float
    server_known: bool = True
    server_status: str | None = None
    server_fault: str | None = None
    registration_known: bool = True
    registered: bool = False
    online: bool = False
    busy: bool = False
    had_registration: bool = False


@dataclass(frozen=True)
class Verdict:
    target: RunnerState
    reason: str


STOPPED_SERVER_STATES = frozenset({"SHUTOFF", "STOPPED", "DELETED", "SOFT_DELETED"})


def judge_runner(facts: RunnerFacts) -> Verdict | None:
    """The next state a runner should move to given both views, or None to leave it as it is.

    One step at a time: the caller applies the verdict and asks again, so each transition is logged
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
        return Verdict(RunnerState.DELETING, "cleaning up server and registration")
    if state is RunnerState.DELETING:
        if server_gone and registration_gone:
            return Verdict(RunnerState.DELETED, "server and registration are gone")
        return None
    if state in (RunnerState.PENDING, RunnerState.CREATING):
        if facts.in_flight or not facts.server_known:
            return None
        if facts.server_status is not None:
            if state is RunnerState.PENDING:
                return Verdict(RunnerState.CREATING, "found its server after a restart")
            return Verdict(RunnerState.BOOTING, "server exists")
        return Verdict(RunnerState.FAILED, "creation was interrupted before a server existed")

    if server_gone:
        return Verdict(RunnerState.FAILED, "its server disappeared")
    if server_error:
        return Verdict(RunnerState.FAILED, f"server in ERROR: {facts.server_fault or 'no fault given'}")

    if state is RunnerState.BOOTING:
        if facts.registered and facts.online:
            return Verdict(RunnerState.BUSY if facts.busy else RunnerState.IDLE, "runner came online")
        if server_stopped:
            return Verdict(RunnerState.FINISHED, "server shut down (runner exited)")
        if facts.had_registration and registration_gone:
            return Verdict(RunnerState.FINISHED, "registration is gone (job done or registration removed)")
        if facts.age_s > facts.bootstrap_timeout_s:
            return Verdict(
                RunnerState.FAILED, f"no runner came online within bootstrap_timeout ({facts.bootstrap_timeout_s:.0f}s)"
            )
        return None

    # IDLE or BUSY
    if registration_gone:
        return Verdict(RunnerState.FINISHED, "runner deregistered (its job is done)")
    if server_stopped:
        return Verdict(RunnerState.FINISHED, "server shut down (runner exited)")
    if state is RunnerState.IDLE and facts.registered and facts.busy:
        return Verdict(RunnerState.BUSY, "runner took a job")
    return None
