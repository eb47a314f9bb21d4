"""Response shapes of the REST API: what operators and scripts see. Never a secret in any of them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from corral.store.schema import Job, Runner, RunnerEvent


class PoolView(BaseModel):
    name: str
    default: bool
    removed: bool
    ready: bool
    reason: str | None
    applied_generation: int
    desired: int
    min_idle: int
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


class RunnerView(BaseModel):
    id: str
    name: str
    pool: str
    scope: str
    state: str
    server_id: str | None
    github_runner_id: int | None
    labels: list[str]
    failure_reason: str | None
    created_at: datetime
    state_changed_at: datetime
    registered_at: datetime | None

    @classmethod
    def of(cls, runner: Runner) -> RunnerView:
        return cls.model_validate(runner, from_attributes=True)


class RunnerEventView(BaseModel):
    from_state: str | None
    to_state: str
    reason: str
    at: datetime

    @classmethod
    def of(cls, event: RunnerEvent) -> RunnerEventView:
        return cls.model_validate(event, from_attributes=True)


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

    @classmethod
    def of(cls, job: Job) -> JobView:
        return cls.model_validate(job, from_attributes=True)


class ReloadResult(BaseModel):
    reloaded: bool
    generation: int
    problems: list[str] = []
