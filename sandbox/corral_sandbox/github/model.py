"""The GitHub world's records: accounts, repositories, installations, runners, workflow runs and jobs.

Plain dataclasses, no behaviour beyond small derived properties; `state.GitHubState` owns them and
`payloads` renders them the way the REST API and webhooks do.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

AccountType = Literal["Organization", "User", "Enterprise"]
ScopeKind = Literal["orgs", "repos", "enterprises"]
JobStatus = Literal["queued", "in_progress", "completed"]

READ_ONLY_LABELS = ("self-hosted", "Linux", "X64")
"""The labels GitHub gives every Linux x64 self-hosted runner; they cannot be removed."""

DEFAULT_GROUP_ID = 1
DEFAULT_GROUP_NAME = "Default"


@dataclass
class Account:
    """An organisation, user or enterprise; logins are case-insensitive, the first spelling is kept."""

    id: int
    login: str
    type: AccountType
    created_at: datetime

    @property
    def node_id(self) -> str:
        prefix = {"Organization": "O_kgDO", "User": "U_kgDO", "Enterprise": "E_kgDO"}[self.type]
        return f"{prefix}{self.id:08X}"


@dataclass
class Repository:
    id: int
    owner: Account
    name: str
    created_at: datetime

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"

    @property
    def node_id(self) -> str:
        return f"R_kgDO{self.id:08X}"


@dataclass
class Installation:
    """The app's installation on one organisation or user account.

    `permissions` and `events` are what the account's owner accepted: they start as the app's own and
    differ when the app asked for more and the owner has not approved the change yet.
    """

    id: int
    account: Account
    created_at: datetime
    permissions: dict[str, str] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return f"MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u{self.id}"


@dataclass(frozen=True)
class Scope:
    """Where a runner is registered: `("orgs", "octo-org")`, `("repos", "octo-org/app")`, ...

    `key` is lower-cased, since GitHub resolves owners and repositories case-insensitively.
    """

    kind: ScopeKind
    key: str

    def serves(self, repo: Repository) -> bool:
        """Whether a runner in this scope may take a job of `repo`."""
        if self.kind == "repos":
            return self.key == repo.full_name.lower()
        if self.kind == "orgs":
            return self.key == repo.owner.login.lower()
        return True


@dataclass
class RunnerLabel:
    id: int
    name: str
    type: Literal["read-only", "custom"]


@dataclass
class Runner:
    """A just-in-time (ephemeral) self-hosted runner.

    It is registered (listed `offline`) as soon as its JIT config is generated; `consumed` marks that a
    guest has read the config, which GitHub accepts only once. `scale_set_id` names the runner scale set
    whose JIT config made it: such a runner takes only the jobs GitHub assigns to its scale set.
    """

    id: int
    name: str
    scope: Scope
    group_id: int
    labels: list[RunnerLabel]
    work_folder: str
    secret: str
    created_at: datetime
    os: str = "unknown"
    status: Literal["online", "offline"] = "offline"
    busy: bool = False
    consumed: bool = False
    job_id: int | None = None
    scale_set_id: int | None = None

    def fits(self, job_labels: list[str]) -> bool:
        """GitHub's rule: every label the job asks for is one of the runner's, case-insensitively."""
        mine = {label.name.lower() for label in self.labels}
        return all(label.lower() in mine for label in job_labels)


@dataclass
class WorkflowRun:
    id: int
    repo: Repository
    name: str
    run_number: int
    head_sha: str
    created_at: datetime
    updated_at: datetime
    status: str = "queued"
    conclusion: str | None = None
    run_started_at: datetime | None = None
    job_ids: list[int] = field(default_factory=list)
    """Every attempt's jobs, the first attempt's first."""
    run_attempt: int = 1
    """The run's latest attempt: a re-run of one of its jobs starts the next."""


@dataclass
class Job:
    id: int
    run: WorkflowRun
    name: str
    labels: list[str]
    duration: float
    created_at: datetime
    status: JobStatus = "queued"
    conclusion: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    runner_id: int | None = None
    runner_name: str | None = None
    runner_group_id: int | None = None
    runner_group_name: str | None = None
    timer: asyncio.TimerHandle | None = None
    run_attempt: int = 1
    """The attempt of its run this job belongs to (a re-run is a new job, with a new id, in the next one)."""
    outcome: str = "success"
    """How the job ends when its runner runs it to the end: `success`, or `failure` (a job that fails on its
    own: a test that broke, not the machine)."""
    runner_lost: bool = False
    """The job failed because its runner lost its machine mid-job (sandbox-only: GitHub shows only the
    failure, and "The self-hosted runner lost communication with the server")."""

    @property
    def repo(self) -> Repository:
        return self.run.repo
