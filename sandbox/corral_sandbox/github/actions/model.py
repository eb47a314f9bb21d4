"""The scale-set side's records: runner groups, scale sets, message sessions and the jobs routed to sets.

Plain dataclasses; `registry`, `sessions` and `jobs` own them, `views` renders them as the Actions service does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from corral_sandbox.github.model import Job, Repository, Scope


@dataclass(frozen=True)
class Tenant:
    """The Actions service's view of one scope: its URL segment and the scope it stands for."""

    id: str
    scope: Scope
    owner_path: str
    """How the scope appears after GitHub's URL: `octo-org`, `octo-org/app`, `enterprises/octo-ent`."""


@dataclass(frozen=True)
class RunnerGroup:
    id: int
    name: str
    is_default: bool


@dataclass
class ScaleSet:
    id: int
    name: str
    tenant: Tenant
    group_id: int
    labels: list[str]
    created_on: datetime
    ephemeral: bool = False
    is_elastic: bool = False
    disable_update: bool = False
    capacity: int | None = None
    """The `X-ScaleSetMaxCapacity` its listener last advertised; None until one does (no limit)."""

    @property
    def scope(self) -> Scope:
        return self.tenant.scope

    def serves(self, repo: Repository, job_labels: list[str]) -> bool:
        """GitHub's routing: the set's scope covers the repository and every label the job asks for is one
        of the set's labels, case-insensitively. Its name is one only when registered among them (or when the
        set was created with no label): that is why GitHub's own listener registers the name beside its other
        labels, so that `runs-on: <name>` reaches the set."""
        if not job_labels or not self.scope.serves(repo):
            return False
        mine = {label.lower() for label in self.labels}
        return all(label.lower() in mine for label in job_labels)


@dataclass
class Delivery:
    """A message handed to the listener and not yet acknowledged: delivered again as it is."""

    message_id: int
    body: str
    statistics: dict[str, int]


@dataclass
class Session:
    id: str
    owner: str
    scale_set_id: int
    last_seen: float
    pending: list[dict[str, Any]] = field(default_factory=list)
    inflight: Delivery | None = None
    polls: int = 0
    """Long polls in progress: a session being polled is never idle."""
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)


JobState = Literal["pending", "available", "assigned", "runner_assigned", "running"]
"""pending: waiting for a scale set with room; available: announced, waiting to be acquired (Enterprise
Server); assigned: the set's, waiting for an idle runner; runner_assigned: handed to a runner that has not
picked it up; running: a runner runs it."""


@dataclass
class ScaleSetJob:
    """A job routed to scale sets, for one attempt at a time (a requeue starts a new runner request)."""

    job: Job
    job_guid: str
    request_id: int
    state: JobState = "pending"
    scale_set_id: int | None = None
    acquired: bool = False
    announced: set[int] = field(default_factory=set)
    runner_id: int | None = None
    runner_name: str | None = None
    requeues: int = 0
    scale_set_assign_time: datetime | None = None
    runner_assign_time: datetime | None = None
