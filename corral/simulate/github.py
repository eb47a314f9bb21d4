"""A GitHub for `corral simulate`: the calls corral's engine makes of `GitHubClient`, answered from the
simulated world in process (no HTTP, no credentials, nothing contacted).

Scale-set pools are not simulated (`corral simulate` refuses a config with one); the calls only they make
say so if they are ever reached.
"""

from __future__ import annotations

from datetime import datetime

from corral.config import ScopeConfig
from corral.github.client import (
    FailedDelivery,
    GitHubClient,
    GitHubError,
    JitConfig,
    JobStatus,
    QueuedJob,
    RegisteredRunner,
)
from corral.simulate.world import World

RUNNER_GROUP_ID = 1


class SimulatedGitHub(GitHubClient):
    """GitHub's REST side as corral's engine uses it. Subclasses the real client (without its HTTP set-up)
    so that the engine, typed against `GitHubClient`, takes it as it is."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def aclose(self) -> None:
        """No connection to close."""

    def paused_for(self, scope: ScopeConfig) -> float:
        return 0.0

    @property
    def api_url(self) -> str:
        return "https://api.github.com"

    async def runner_group_id(self, scope: ScopeConfig, name: str) -> int:
        return RUNNER_GROUP_ID

    async def generate_jit_config(
        self, scope: ScopeConfig, name: str, labels: list[str], runner_group: str
    ) -> JitConfig:
        runner = self.world.register(scope, name, labels)
        return JitConfig(runner_id=runner.id, runner_name=runner.name, encoded=runner.encoded)

    async def registration_token(self, scope: ScopeConfig) -> str:
        raise GitHubError("corral simulate does not simulate runner scale sets")

    async def list_runners(self, scope: ScopeConfig) -> list[RegisteredRunner]:
        return [
            RegisteredRunner(
                id=runner.id,
                name=runner.name,
                status=runner.status,
                busy=runner.job is not None and runner.job.status == "in_progress",
                labels=("self-hosted", "Linux", "X64", *runner.labels),
            )
            for runner in self.world.runners_at(scope)
        ]

    async def delete_runner(self, scope: ScopeConfig, runner_id: int) -> bool:
        return self.world.deregister(runner_id)

    async def get_job(self, scope: ScopeConfig, repository: str, job_id: int) -> JobStatus:
        job = self.world.jobs.get(job_id)
        if job is None or job.repository.lower() != repository.lower():
            raise GitHubError(f"GET /repos/{repository}/actions/jobs/{job_id}: Not Found", status=404)
        return JobStatus(
            id=job.id,
            status=job.status,
            conclusion=job.conclusion,
            runner_name=job.runner.name if job.runner is not None else None,
            completed_at=self.world.wall(job.completed_at) if job.completed_at is not None else None,
        )

    async def queued_jobs(
        self, scope: ScopeConfig, repository: str, *, created_before: datetime, concurrency: int = 8
    ) -> list[QueuedJob]:
        return [
            QueuedJob(
                id=job.id,
                run_id=job.run_id,
                repository=job.repository,
                labels=list(job.labels),
                created_at=self.world.wall(job.queued_at),
                workflow=job.workflow,
            )
            for job in self.world.queued_of(repository)
            if self.world.wall(job.queued_at) < created_before
        ]

    async def failed_deliveries(self, newer_than: datetime) -> list[FailedDelivery]:
        return []  # the simulated webhooks are never lost

    async def redeliver(self, delivery_id: int) -> None:
        """Nothing is ever to redeliver."""
