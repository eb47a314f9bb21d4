"""Domain types with no I/O: runners and their state machine, jobs, why things happen.

These are what every other module passes around: the store maps its rows to and from them, the engine
and the API read them. They are frozen, so a runner read at the start of a pass cannot be half-updated by
the code that acts on it; a change of state is a `Transition` the store applies (or refuses, when someone
else moved the runner first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

MAX_WORKFLOW_NAME = 256
"""Workflow names are kept to this many characters (GitHub sets no documented bound)."""
REPO_PATTERN = r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"
"""A repository as `OWNER/REPO`: a pool's `scope.repo`, a job trace's `repo` and the sandbox's job requests."""


RUNNER_ID_LENGTH = 10
"""A runner's id: lowercase hex, the last part of its name (`<name_prefix>-<pool>-<id>`)."""


class InvalidTransition(ValueError):
    """A runner was asked to move to a state it cannot reach from where it is."""


class RunnerState(StrEnum):
    PENDING = "pending"
    """Row written, nothing asked of the cloud yet: intent recorded before acting."""
    CREATING = "creating"
    """Server create requested."""
    BOOTING = "booting"
    """Server exists; the runner has not registered with GitHub yet."""
    IDLE = "idle"
    """Registered and online, waiting for a job."""
    BUSY = "busy"
    """Running its one job."""
    FINISHED = "finished"
    """Its job is done or its registration is gone: the server is no longer needed."""
    FAILED = "failed"
    """Create error, ERROR server, bootstrap timeout: to be cleaned up, no longer counted as capacity."""
    DELETING = "deleting"
    """Server and registration deletion under way."""
    DELETED = "deleted"
    """Gone on both sides; the row stays as history."""

    def check_transition(self, target: RunnerState) -> None:
        if target not in _TRANSITIONS[self]:
            raise InvalidTransition(f"runner cannot go from {self.value} to {target.value}")

    def can_become(self, target: RunnerState) -> bool:
        return target in _TRANSITIONS[self]

    @property
    def counts_as_capacity(self) -> bool:
        """Whether a runner in this state counts against a pool's `max_runners`."""
        return self in CAPACITY_STATES

    @property
    def is_terminal(self) -> bool:
        return self is RunnerState.DELETED


_TRANSITIONS: dict[RunnerState, frozenset[RunnerState]] = {
    RunnerState.PENDING: frozenset({RunnerState.CREATING, RunnerState.FAILED, RunnerState.DELETING}),
    RunnerState.CREATING: frozenset({RunnerState.BOOTING, RunnerState.FAILED, RunnerState.DELETING}),
    RunnerState.BOOTING: frozenset(
        {RunnerState.IDLE, RunnerState.BUSY, RunnerState.FINISHED, RunnerState.FAILED, RunnerState.DELETING}
    ),
    RunnerState.IDLE: frozenset({RunnerState.BUSY, RunnerState.FINISHED, RunnerState.FAILED, RunnerState.DELETING}),
    RunnerState.BUSY: frozenset({RunnerState.FINISHED, RunnerState.FAILED, RunnerState.DELETING}),
    RunnerState.FINISHED: frozenset({RunnerState.DELETING}),
    RunnerState.FAILED: frozenset({RunnerState.DELETING}),
    RunnerState.DELETING: frozenset({RunnerState.DELETED}),
    RunnerState.DELETED: frozenset(),
}

STARTING_STATES = frozenset({RunnerState.PENDING, RunnerState.CREATING, RunnerState.BOOTING})
CAPACITY_STATES = STARTING_STATES | {RunnerState.IDLE, RunnerState.BUSY}
LIVE_STATES = frozenset(RunnerState) - {RunnerState.DELETED}
FREE_STATES = STARTING_STATES | {RunnerState.IDLE}
"""Runners that can still take a queued job: those starting, and those idle."""


class Reason(StrEnum):
    """Why a runner moved: recorded with every transition, and the label of the metrics that count them.

    A closed set, so a dashboard or an alert can group by it; the human message beside it says the rest.
    """

    # becoming a runner
    DEMAND = "demand"
    """Started for a queued job."""
    WARM = "warm"
    """Started to keep `min_idle` runners waiting."""
    CREATE_REQUESTED = "create_requested"
    SERVER_CREATED = "server_created"
    SERVER_ACTIVE = "server_active"
    """Its server was seen ACTIVE while the runner booted: a step within `booting`, recorded, not a move."""
    SERVER_FOUND = "server_found"
    """Its server exists though corral had not recorded it (a restart between asking and hearing back)."""
    CAME_ONLINE = "came_online"
    TOOK_JOB = "took_job"
    # done with its job
    JOB_DONE = "job_done"
    RUNNER_EXITED = "runner_exited"
    DEREGISTERED = "deregistered"
    # failures
    GITHUB_REFUSED = "github_refused"
    """GitHub refused or failed the JIT config (permissions, runner group, 5xx)."""
    GITHUB_RATE_LIMITED = "github_rate_limited"
    USER_DATA_INVALID = "user_data_invalid"
    CLOUD_QUOTA = "cloud_quota"
    CLOUD_REJECTED = "cloud_rejected"
    """The cloud refused the create as made (Nova's 400): retrying the same request will not help."""
    CLOUD_UNAVAILABLE = "cloud_unavailable"
    """A timeout, a dropped connection or a 5xx: worth retrying with backoff."""
    SERVER_ERROR = "server_error"
    SERVER_VANISHED = "server_vanished"
    BOOTSTRAP_TIMEOUT = "bootstrap_timeout"
    INTERRUPTED = "interrupted"
    """corral stopped between writing the intent and the cloud answering, and no server was made."""
    INTERNAL_ERROR = "internal_error"
    """An exception corral did not expect: a bug, logged with its traceback."""
    # going away
    CLEANUP = "cleanup"
    SCALE_DOWN = "scale_down"
    POOL_REMOVED = "pool_removed"
    POOL_DRAINED = "pool_drained"
    OPERATOR = "operator"
    ABANDONED_JOB = "abandoned_job"
    """A scale set's runner never picked up the job GitHub handed it; GitHub ended that attempt and handed
    the job on (a hung VM, a runner that lost its network)."""
    SCALE_SET_REPLACED = "scale_set_replaced"
    """A scale set's idle runner that no job comes to: its scale set was deleted on GitHub (or renamed) and
    another took its place, so GitHub hands it no job."""
    IMAGE_ROLLOUT = "image_rollout"
    """Started to replace an idle runner on an image the pool no longer uses, or retired as one replaced."""
    IMAGE_ROLLBACK = "image_rollback"
    """The same, as the pool rolled back from a new image whose runners failed to come online."""
    PLACEMENT_CHANGED = "placement_changed"
    """Started to replace an idle runner in a cloud that is no longer one of its pool's placements (a reload
    moved the pool, or removed the cloud), or retired as one replaced."""
    GONE = "gone"
    """Server and registration are both gone."""
    UNKNOWN = "unknown"
    """History written before corral recorded reason codes."""


FAILURE_REASONS = frozenset(
    {
        Reason.GITHUB_REFUSED,
        Reason.GITHUB_RATE_LIMITED,
        Reason.USER_DATA_INVALID,
        Reason.CLOUD_QUOTA,
        Reason.CLOUD_REJECTED,
        Reason.CLOUD_UNAVAILABLE,
        Reason.SERVER_ERROR,
        Reason.SERVER_VANISHED,
        Reason.BOOTSTRAP_TIMEOUT,
        Reason.INTERRUPTED,
        Reason.INTERNAL_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class Runner:
    """One ephemeral runner as the store knows it."""

    id: str
    pool: str
    scope: str
    """Where it registers (`org:octo`, `repo:octo/app`, `enterprise:acme`), kept so a runner of a pool that
    was removed from the config can still be deregistered."""
    state: RunnerState
    name: str
    labels: tuple[str, ...]
    reason: Reason
    """Why it is in its state."""
    message: str | None
    """The human side of `reason` for failures: what the cloud or GitHub said."""
    created_at: datetime
    state_changed_at: datetime
    server_id: str | None = None
    github_runner_id: int | None = None
    job_id: int | None = None
    """The job it was started for (None for a warm runner)."""
    registered_at: datetime | None = None
    image_id: str | None = None
    """The image its server was created from (None until it was, or for runners older than the record)."""
    cloud: str | None = None
    """Which of corral's clouds its server is made in (None: the first, for runners older than the record)."""
    cache: str | None = None
    """How it started in a pool with `cache_volumes`: `warm`, `cold` or `none` (see `CacheStart`)."""


class CacheStart(StrEnum):
    """How a runner of a pool with `cache_volumes` started."""

    WARM = "warm"
    """With a volume an earlier server of the pool used."""
    COLD = "cold"
    """With a volume no server had used yet."""
    NONE = "none"
    """Without one: none was free and the pool had `max` (or Cinder could not make one)."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One move of one runner, guarded by the state it was read in; the store applies it or refuses it.

    `server_id`, `github_runner_id` and `registered_at` are set with the move when given. `diverted_job`
    names the job the runner was started for when it took another one instead (see `Job.runners_diverted`);
    `presumed_taken` says the job it was started for has probably gone to another runner meanwhile: corral
    cannot tell which job it took, or the job it took had a runner of its own, which takes the next one.
    """

    runner: Runner
    target: RunnerState
    reason: Reason
    message: str | None = None
    server_id: str | None = None
    image_id: str | None = None
    github_runner_id: int | None = None
    registered_at: datetime | None = None
    cache: CacheStart | None = None
    diverted_job: int | None = None
    presumed_taken: bool = False
    lost_job: int | None = None
    """The job this runner was running when its server died under it (ERROR or vanished): marked lost with
    the move's message, so that it can be re-run once GitHub has failed it (`rerun_lost_jobs`)."""
    at: datetime | None = None
    """When the move happened, if before the pass that makes it (a job's start): None is now."""

    def __post_init__(self) -> None:
        self.runner.state.check_transition(self.target)


@dataclass(frozen=True, slots=True)
class RunnerEvent:
    """A runner's move, as history: the runner's events are its story for an operator."""

    runner_id: str
    from_state: RunnerState | None
    to_state: RunnerState
    reason: Reason
    message: str | None
    at: datetime


class JobState(StrEnum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"

    @property
    def rank(self) -> int:
        """Order of a job's life, so events arriving out of order never move a job backwards."""
        return _JOB_RANK[self]


_JOB_RANK = {JobState.QUEUED: 0, JobState.IN_PROGRESS: 1, JobState.COMPLETED: 2}


@dataclass(frozen=True, slots=True)
class Job:
    """A workflow job as corral knows it from webhooks, polling and GitHub's answers."""

    id: int
    repository: str
    labels: tuple[str, ...]
    status: JobState
    pool: str | None
    """The pool that fits it, or None when none does (unmatched)."""
    received_at: datetime
    """When corral first heard of it."""
    conclusion: str | None = None
    run_id: int | None = None
    runner_name: str | None = None
    queued_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    runners_started: int = 0
    runners_diverted: int = 0
    """Runners started for it that came online and took another job instead."""
    diverted_at: datetime | None = None
    checked_at: datetime | None = None
    """When GitHub was last asked about it directly."""
    maybe_taken_at: datetime | None = None
    """When a runner started for it took another job while this one probably went to another runner."""
    source: str | None = None
    """How corral first heard of it: `webhook:<delivery id>`, `webhook` or `poll`."""
    workflow: str | None = None
    name: str | None = None
    """The job's name in its workflow (`build (ubuntu, 3.12)`): with `run_id`, what its re-runs share."""
    run_attempt: int | None = None
    lost_at: datetime | None = None
    """When corral saw the server of the runner running it die (ERROR or vanished) while the job ran."""
    lost_reason: str | None = None
    rerun: str | None = None
    """What became of a lost job (None: undecided): `requested` (corral asked GitHub to re-run it), `not
    failed`, `off` (its pool does not re-run lost jobs), `limit` (re-run `rerun_lost_jobs` times already),
    `refused: ...` (GitHub's answer), or `requesting` while corral asks."""
    rerun_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A queued job with what decides whether it gets a runner now (see `policy.judge_demand`)."""

    id: int
    received_at: datetime
    checked_at: datetime | None
    runners_diverted: int = 0
    diverted_at: datetime | None = None
    maybe_taken_at: datetime | None = None
    repository: str = ""


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """What one webhook delivery or poll says about a job."""

    id: int
    repository: str
    labels: tuple[str, ...]
    status: JobState
    pool: str | None
    conclusion: str | None = None
    run_id: int | None = None
    runner_name: str | None = None
    queued_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    workflow: str | None = None
    name: str | None = None
    run_attempt: int | None = None


@dataclass(frozen=True)
class JobMessage:
    """One job's news in a scale set's queue message: `JobAvailable`, `JobAssigned`, `JobStarted` or
    `JobCompleted` (parsed by `corral.github.scaleset`; a plain value here so the store can record it without
    importing the GitHub client)."""

    kind: str
    runner_request_id: int
    job_id: str
    repository: str
    owner: str
    workflow_run_id: int
    labels: tuple[str, ...]
    runner_id: int | None = None
    runner_name: str | None = None
    result: str | None = None
    workflow_ref: str | None = None
    """`owner/repo/.github/workflows/ci.yml@refs/heads/main`."""
    display_name: str | None = None
    queue_time: datetime | None = None

    @property
    def full_repository(self) -> str:
        return f"{self.owner}/{self.repository}"

    @property
    def workflow(self) -> str | None:
        """The workflow's file, from `jobWorkflowRef` (the messages carry no workflow name)."""
        if not self.workflow_ref:
            return None
        path = self.workflow_ref.split("@", 1)[0]
        return path.rsplit("/", 1)[-1] or None


@dataclass(frozen=True, slots=True)
class Delivery:
    """A webhook delivery to record once (`id` is GitHub's delivery GUID; None for a poll's finding)."""

    id: str | None
    event: str
    action: str | None
    job: JobUpdate | None = None


class DeliveryOutcome(StrEnum):
    RECORDED = "recorded"
    DUPLICATE = "duplicate"


@dataclass(frozen=True, slots=True)
class IntakeResult:
    """What recording a group of deliveries did: each one's outcome, and the pools to wake.

    `demand` are pools with newly queued jobs (worth a pass at once); `news` are pools whose runners a job
    took or finished (their pass may wait a moment and take several such news at once).
    """

    outcomes: tuple[DeliveryOutcome, ...]
    demand: frozenset[str] = field(default_factory=frozenset)
    news: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """What the engine last published about a pool, whether an operator drained it, and its create backoff."""

    name: str
    applied_generation: int
    ready: bool
    reason: str | None
    removed: bool
    drained: bool
    updated_at: datetime
    create_failures: int = 0
    create_paused_until: datetime | None = None
    scale_set_id: int | None = None
    scale_set_session: str | None = None
    server_cost: dict[str, Any] | None = None
    """What one of its servers costs of the quota, as its holder found it (`ServerCost` fields)."""
    quota_waiting: int = 0
    """Runners for queued jobs the quota held back on its holder's last pass..."""
    quota_waiting_at: datetime | None = None
    """...as of then."""
    rollouts: dict[str, Any] | None = None
    """Per placement key: the image id its `image` resolved to at the holder's last check (`checked`), and
    its image rollout if one is under way or rolled back (`rollout`: `engine.rollouts.Rollout` fields)."""
    cloud_backoffs: dict[str, Any] | None = None
    """For a pool in several clouds, each cloud that failed it lately: `{failures, paused_until}`."""
    quota_waiting_cloud: str | None = None
    """The cloud whose quota `quota_waiting` waits for (None: the pool's first)."""
    warm: dict[str, Any] | None = None
    """An auto pool: `{min_idle, forecast}` as its holder's last pass had them (see the `pool_status` table)."""


class CacheVolumeState(StrEnum):
    """Where one of a pool's cache volumes is in its life (`store.cache_volumes`)."""

    CREATING = "creating"
    """Row written for the runner it is made for; Cinder asked (or about to be) for the volume."""
    HELD = "held"
    """Handed to a runner's server: not free again until that runner is gone and Cinder says `available`."""
    FREE = "free"
    """Available for the pool's next server."""
    DELETING = "deleting"
    """Its pool or its pool's `cache_volumes` went, or the pool keeps fewer: deleted once nothing holds it."""


@dataclass(frozen=True, slots=True)
class CacheVolume:
    """One of a pool's cache volumes as the store knows it."""

    id: str
    pool: str
    cloud: str
    state: CacheVolumeState
    volume_id: str | None
    """Cinder's id (None until Cinder answered the create)."""
    runner: str | None
    """The name of the runner holding it."""
    size_gb: int
    uses: int
    """Servers it was handed to, this one included."""
    created_at: datetime
    state_changed_at: datetime

    @property
    def name(self) -> str:
        """Its name in Cinder: `corral-cache-<pool>-<id>`, which says what it is to anyone listing volumes."""
        return f"corral-cache-{self.pool}-{self.id}"
