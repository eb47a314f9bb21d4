"""The sandbox's control API under `/_sandbox/`: submit jobs and traces, read counters, switch faults.

This is how tests, the demo and benchmarks drive the world from outside, over HTTP, the same way whether
the sandbox runs in-process or as `corral sandbox` in another process. It is a test double's control
panel, served on loopback only, so it has no authentication.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, HTTPException, Response
from pydantic import BaseModel, Field

from corral.model import REPO_PATTERN
from corral_sandbox.control_accounts import register_account_routes
from corral_sandbox.control_scalesets import register_scaleset_routes
from corral_sandbox.faults import FaultSpecError

if TYPE_CHECKING:
    from corral_sandbox.cloud.state import CloudState
    from corral_sandbox.world import World

MAX_TRACE_JOBS = 100_000


class JobRequest(BaseModel):
    repo: str = Field(pattern=REPO_PATTERN, examples=["octo-org/app"])
    labels: list[str] = Field(default_factory=lambda: ["self-hosted"], min_length=1, max_length=100)
    duration: float = Field(default=1.0, ge=0, le=86_400)
    workflow_name: str | None = None
    conclusion: Literal["success", "failure"] = Field(
        default="success", description="how the job ends if its runner runs it to the end"
    )


class TraceJob(JobRequest):
    at: float = Field(default=0.0, ge=0, le=86_400, description="seconds after the trace is posted")


class TraceRequest(BaseModel):
    jobs: list[TraceJob] = Field(max_length=MAX_TRACE_JOBS)


class QuotaRequest(BaseModel):
    instances: int | None = Field(default=None, ge=-1)
    cores: int | None = Field(default=None, ge=-1)
    ram: int | None = Field(default=None, ge=-1)
    volumes: int | None = Field(default=None, ge=-1)
    gigabytes: int | None = Field(default=None, ge=-1)
    ports: int | None = Field(default=None, ge=-1)


class TimingsRequest(BaseModel):
    boot_delay: float | None = Field(default=None, ge=0)
    register_delay: float | None = Field(default=None, ge=0)
    delete_delay: float | None = Field(default=None, ge=0)
    schedule_delay: float | None = Field(default=None, ge=0)
    lost_contact_delay: float | None = Field(default=None, ge=0)


class WebhookRequest(BaseModel):
    """`url` is where deliveries go; `secret`, when given, what they are signed with (null: unsigned)."""

    url: str | None
    secret: str | None = None


class InstallationRequest(BaseModel):
    """What the account's owner accepted for the app; a key left out keeps its value."""

    permissions: dict[str, Literal["read", "write", "admin"]] | None = None
    events: list[str] | None = None


class ClockRequest(BaseModel):
    github_offset_s: float = Field(ge=-86_400, le=86_400, description="GitHub's clock minus this machine's")


class PatRequest(BaseModel):
    scopes: list[str] = Field(max_length=50, description="the classic PAT's scopes (`X-OAuth-Scopes`)")


class RateLimitRequest(BaseModel):
    remaining: int = Field(ge=0)
    reset_in: int = Field(default=3600, ge=0)


def build_control_router(world: World) -> APIRouter:
    """Routes that act on `world`; every call runs on the world's loop, so state needs no locks."""
    router = APIRouter(prefix="/_sandbox", tags=["sandbox control"])
    register_account_routes(router, world)
    register_scaleset_routes(router, world)

    def job_or_404(view: dict[str, Any] | None, job_id: int) -> dict[str, Any]:
        if view is None:
            raise HTTPException(status_code=404, detail=f"no job {job_id}")
        return view

    @router.post("/jobs", status_code=201)
    async def submit_job(body: JobRequest) -> dict[str, Any]:
        return world.github.submit_job(body.repo, body.labels, body.duration, body.workflow_name, body.conclusion)

    @router.get("/jobs")
    async def list_jobs(status: str | None = None) -> list[dict[str, Any]]:
        return [job for job in world.github.jobs_view() if status is None or job["status"] == status]

    @router.get("/jobs/{job_id}")
    async def get_job(job_id: int) -> dict[str, Any]:
        return job_or_404(world.github.job_view(job_id), job_id)

    @router.post("/jobs/{job_id}/cancel")
    async def cancel_job(job_id: int) -> dict[str, Any]:
        return job_or_404(world.github.cancel_job(job_id), job_id)

    @router.post("/trace", status_code=202)
    async def submit_trace(body: TraceRequest) -> dict[str, Any]:
        """Schedule every job of the trace at its arrival offset from now."""
        for job in body.jobs:
            world.call_later(
                job.at, world.github.submit_job, job.repo, job.labels, job.duration, job.workflow_name, job.conclusion
            )
        last = max((job.at for job in body.jobs), default=0.0)
        return {"scheduled": len(body.jobs), "last_arrival_s": last}

    @router.get("/stats")
    async def stats() -> dict[str, Any]:
        return world.snapshot()

    def cloud_named(name: str) -> CloudState:
        cloud = world.clouds.get(name)
        if cloud is None:
            raise HTTPException(status_code=404, detail=f"no cloud {name!r}; the sandbox has {sorted(world.clouds)}")
        return cloud

    @router.get("/servers")
    async def servers(cloud: str = "one") -> list[dict[str, Any]]:
        """Every server's lifetime in one cloud (`?cloud=two`: the second), deleted ones included (oldest
        first), with its metadata: how a benchmark counts exactly how many servers an owner had at each moment."""
        return cloud_named(cloud).history()

    @router.get("/faults")
    async def get_faults() -> dict[str, Any]:
        return world.faults.describe()

    @router.put("/faults")
    async def put_faults(spec: dict[str, Any]) -> dict[str, Any]:
        try:
            world.faults.configure(spec)
        except FaultSpecError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        return world.faults.describe()

    @router.put("/quota")
    async def put_quota(body: QuotaRequest, cloud: str = "one") -> dict[str, Any]:
        """One cloud's quota (`?cloud=two`: the second's)."""
        target = cloud_named(cloud)
        target.set_quota(**body.model_dump(exclude_none=True))
        return {"quota": target.quota_view()}

    @router.put("/timings")
    async def put_timings(body: TimingsRequest) -> dict[str, Any]:
        for name, value in body.model_dump(exclude_none=True).items():
            setattr(world.timings, name, value)
        return vars(world.timings)

    @router.post("/runners/start")
    async def start_runners() -> dict[str, Any]:
        """Guests within `register_delay` start their runners now (ends a window a test held open)."""
        return {"started": world.start_runners_now()}

    @router.put("/webhook")
    async def put_webhook(body: WebhookRequest) -> dict[str, Any]:
        if "secret" in body.model_fields_set:
            world.github.webhooks.secret = body.secret or None
        world.github.webhook_url = body.url
        return {"url": body.url, "secret_set": world.github.webhooks.secret is not None}

    @router.put("/installations/{login}")
    async def put_installation(login: str, body: InstallationRequest) -> dict[str, Any]:
        """The app's installation on organisation `login` (made if new), as its owner accepted it: a
        permission left out is one the installation lacks, as when the owner has not approved it yet."""
        installation = world.github.directory.installation_of(world.github.directory.account(login))
        if installation is None:
            raise HTTPException(status_code=404, detail=f"{login} has no installation")
        if body.permissions is not None:
            installation.permissions = dict(body.permissions)
        if body.events is not None:
            installation.events = list(body.events)
        return {"id": installation.id, "permissions": installation.permissions, "events": installation.events}

    @router.put("/clock")
    async def put_clock(body: ClockRequest) -> dict[str, Any]:
        """Skew GitHub's clock: its `Date` header and its checks of app JWTs and token expiry follow it."""
        world.github.clock_offset_s = body.github_offset_s
        return body.model_dump()

    @router.put("/pat")
    async def put_pat(body: PatRequest) -> dict[str, Any]:
        world.github.pat_scopes = list(body.scopes)
        return body.model_dump()

    @router.get("/deliveries")
    async def deliveries() -> list[dict[str, Any]]:
        return world.github.deliveries_view()

    @router.get("/deliveries/lost")
    async def lost_deliveries() -> list[dict[str, Any]]:
        """Events `webhook_lose_rate` swallowed (GitHub's own log has no trace of them), oldest first."""
        return world.github.lost_view()

    @router.put("/rate-limit")
    async def put_rate_limit(body: RateLimitRequest) -> dict[str, Any]:
        world.github.set_rate_limit(remaining=body.remaining, reset_in=body.reset_in)
        return body.model_dump()

    @router.post("/reset", status_code=204)
    async def reset() -> Response:
        """Back to a fresh world (same ports and credentials): no servers, runners, jobs or faults."""
        world.reset()
        return Response(status_code=204)

    return router
