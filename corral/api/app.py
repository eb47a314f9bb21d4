"""The FastAPI application: REST API under /api/v1, health, metrics, the dashboard and the webhook.

The OpenAPI description is served at `/api/v1/openapi.json` to a `read` token, and FastAPI's `/docs` and
`/redoc` pages are off: they load Swagger UI and ReDoc from a CDN, which the dashboard's Content-Security-
Policy exists to forbid (corral often runs where the internet is not reachable, and a page must not send
its URL elsewhere), and they describe the API to anyone who asks. Any OpenAPI viewer can read the JSON.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from corral import __version__
from corral.api.auth import requires
from corral.api.dashboard import build_dashboard_router
from corral.api.headers import DefaultHeaders
from corral.api.views import (
    JobStoryView,
    JobView,
    PoolView,
    ReloadResult,
    ReplicaView,
    RunnerEventView,
    RunnerView,
    UsageView,
    pool_views,
    replica_views,
)
from corral.api.webhook import build_webhook_router
from corral.clock import utcnow
from corral.config import POOL_NAME_PATTERN
from corral.engine.operator import DeleteFailed, DeleteOutcome, KeyStopped
from corral.github.webhooks import MAX_ID
from corral.metrics import REGISTRY
from corral.model import JobState, RunnerState
from corral.outages import DependencyUnavailable
from corral.service import Service
from corral.store import jobs as store_jobs
from corral.store import runners as store_runners
from corral.store import scaleset_jobs as store_scaleset_jobs
from corral.store import usage as store_usage
from corral.usage import DIMENSIONS, Dimension, account

logger = logging.getLogger("corral.api")

MAX_USAGE_WINDOW = timedelta(days=31)
MAX_JOBS = 1000
RETRY_AFTER_OUTAGE_S = 5
"""What a request that met an outage is told to wait (`Retry-After`) before asking again."""
"""The most jobs one request lists; enough for an operator, bounded for the database."""
RUNNER_ID_PATTERN = r"^[0-9a-z]{1,32}$"
"""corral's runner ids (`runners.id`, at most 32 characters); anything else cannot name a runner."""

PoolFilter = Annotated[
    str | None, Query(pattern=POOL_NAME_PATTERN.pattern, description="only this pool (a pool name from the config)")
]
PoolName = Annotated[str, Path(pattern=POOL_NAME_PATTERN.pattern, description="a pool name from the config")]
RunnerId = Annotated[str, Path(pattern=RUNNER_ID_PATTERN, description="a runner id, as listed by /api/v1/runners")]


def build_app(service: Service) -> FastAPI:
    app = FastAPI(
        title="corral",
        version=__version__,
        description="Ephemeral GitHub Actions runners on OpenStack",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(DefaultHeaders)

    @app.exception_handler(DependencyUnavailable)
    async def unavailable(_request: Request, exc: DependencyUnavailable) -> JSONResponse:
        """A request that met an outage (logged once, when it began): 503 and when to ask again, rather than
        a 500 and a traceback for every request while it lasts."""
        detail = f"corral's {exc.dependency} is unreachable now; try again shortly"
        return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_OUTAGE_S)})

    secret = service.config.github.webhook_secret
    if secret is None:
        logger.warning("no webhook secret configured: /webhook is disabled (jobs are found by polling only)")
    else:
        app.include_router(build_webhook_router(service, secret.get_secret_value().encode()))

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz(response: Response) -> dict[str, object]:
        """Ready once the engine has completed a pass and every pool can serve jobs (a pool an operator
        drained does not count against it, nor one another replica holds: it answers for that one). The body
        names each pool's readiness and why not."""
        pools = {}
        operator = service.operator
        for name in service.config.pools:
            held = operator.holds(name)
            pool_ready, reason = operator.pool_ready(name) if held else (True, "held by another replica")
            pools[name] = {"ready": pool_ready, "reason": reason}
        serving = [name for name in service.config.pools if name not in operator.drained and operator.holds(name)]
        ready = operator.passes > 0 and all(pools[name]["ready"] for name in serving)
        response.status_code = 200 if ready else 503
        return {"ready": ready, "passes": operator.passes, "pools": pools}

    read = [Depends(requires(service.store, "read"))]
    admin = [Depends(requires(service.store, "admin"))]

    @app.get("/api/v1/openapi.json", include_in_schema=False, dependencies=read)
    async def openapi() -> dict[str, Any]:
        return app.openapi()

    @app.get("/metrics", tags=["health"], dependencies=[Depends(requires(service.store, "metrics"))])
    async def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/replicas", tags=["replicas"], dependencies=read)
    async def replicas() -> list[ReplicaView]:
        """Every replica on this database with its last heartbeat, version and the pools it holds."""
        rows, leases = await service.operator.membership()
        return replica_views(rows, leases, this=service.replica, lease_s=service.config.lease_time, now=utcnow())

    @app.get("/api/v1/pools", tags=["pools"], dependencies=read)
    async def pools() -> list[PoolView]:
        return await pool_views(service.config, service.operator)

    @app.get("/api/v1/runners", tags=["runners"], dependencies=read)
    async def runners(
        pool: PoolFilter = None,
        state: Annotated[list[RunnerState] | None, Query()] = None,
        include_deleted: bool = False,
    ) -> list[RunnerView]:
        states = state or [s for s in RunnerState if include_deleted or s is not RunnerState.DELETED]
        listed = await service.store.run(store_runners.listing, pool=pool, states=states)
        return [RunnerView.of(runner) for runner in listed]

    @app.get("/api/v1/runners/{runner_id}/events", tags=["runners"], dependencies=read)
    async def runner_events(runner_id: RunnerId) -> list[RunnerEventView]:
        if await service.store.run(store_runners.get, runner_id) is None:
            raise HTTPException(status_code=404, detail=f"no runner {runner_id}")
        return [RunnerEventView.of(event) for event in await service.store.run(store_runners.events, runner_id)]

    @app.get("/api/v1/jobs", tags=["jobs"], dependencies=read)
    async def jobs(
        status: JobState | None = None,
        pool: PoolFilter = None,
        run_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="the jobs of one workflow run")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_JOBS, description="the newest jobs first, at most this many")] = 200,
    ) -> list[JobView]:
        listed = await service.store.run(store_jobs.listing, status=status, pool=pool, run_id=run_id, limit=limit)
        return [JobView.of(job) for job in listed]

    async def story_or_404(job_id: int, *, scale_set: bool, what: str) -> JobStoryView:
        story = await service.operator.job_story(job_id, scale_set=scale_set)
        if story is None:
            raise HTTPException(status_code=404, detail=f"no {what} {job_id} is known to corral")
        return JobStoryView.of_story(story)

    @app.get("/api/v1/jobs/{job_id}", tags=["jobs"], dependencies=read)
    async def job(job_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> JobStoryView:
        """One job with its timeline and, while it waits, the reason it has no runner yet."""
        return await story_or_404(job_id, scale_set=False, what="job")

    @app.get("/api/v1/scale-set-jobs", tags=["jobs"], dependencies=read)
    async def scale_set_jobs(
        status: JobState | None = None,
        pool: PoolFilter = None,
        run_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="the jobs of one workflow run")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_JOBS, description="the newest jobs first, at most this many")] = 200,
    ) -> list[JobView]:
        """Jobs of scale-set pools, as their listeners heard of them; `id` is GitHub's runner request id."""
        listed = await service.store.run(
            store_scaleset_jobs.listing, status=status, pool=pool, run_id=run_id, limit=limit
        )
        return [JobView.of(job) for job in listed]

    @app.get("/api/v1/scale-set-jobs/{request_id}", tags=["jobs"], dependencies=read)
    async def scale_set_job(request_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> JobStoryView:
        """One scale-set job (by runner request id) with its timeline and, while it waits, what holds it."""
        return await story_or_404(request_id, scale_set=True, what="scale-set job request")

    @app.get("/api/v1/usage", tags=["usage"], dependencies=read)
    async def usage(
        since: Annotated[
            datetime | None, Query(description="start of the window (ISO 8601; default: a day before until)")
        ] = None,
        until: Annotated[datetime | None, Query(description="end of the window, exclusive (default: now)")] = None,
        group_by: Annotated[str, Query(description="comma-separated: pool, repository, workflow")] = "pool",
    ) -> UsageView:
        """Runner-seconds (boot, idle, busy), runners, jobs started and their mean queue time, jobs lost with their
        server and re-run, per group."""
        window = usage_window(since, until)
        dimensions = usage_dimensions(group_by)
        runners = await service.store.run(store_usage.histories, since=window[0], until=window[1])
        started = await service.store.run(store_usage.started_jobs, since=window[0], until=window[1])
        lost = await service.store.run(store_usage.lost_jobs, since=window[0], until=window[1])
        rows = account(runners, started, since=window[0], until=window[1], group_by=dimensions, lost=lost)
        return UsageView.of(rows, window[0], window[1], list(dimensions))

    @app.post("/api/v1/reload", tags=["actions"], dependencies=admin)
    async def reload(response: Response) -> ReloadResult:
        problems = await service.reload()
        if problems:
            response.status_code = 422
            return ReloadResult(reloaded=False, generation=service.operator.generation, problems=problems)
        # A file this replica refused is not asked of the others: it is most likely the same broken deploy.
        others = await service.operator.ask_replicas_to_reload()
        return ReloadResult(reloaded=True, generation=service.operator.generation, replicas=others)

    @app.post("/api/v1/reconcile", status_code=202, tags=["actions"], dependencies=admin)
    async def reconcile() -> dict[str, bool]:
        service.operator.look_again()
        return {"requested": True}

    @app.post("/api/v1/pools/{name}/drain", tags=["actions"], dependencies=admin)
    async def drain(name: PoolName) -> PoolView:
        return await set_drained(name, True)

    @app.post("/api/v1/pools/{name}/undrain", tags=["actions"], dependencies=admin)
    async def undrain(name: PoolName) -> PoolView:
        return await set_drained(name, False)

    async def set_drained(name: str, drained: bool) -> PoolView:
        if name not in service.config.pools:
            raise HTTPException(status_code=404, detail=f"no pool {name!r}")
        await service.operator.set_drained(name, drained)
        return next(view for view in await pool_views(service.config, service.operator) if view.name == name)

    @app.delete("/api/v1/runners/{runner_id}", status_code=202, tags=["actions"], dependencies=admin)
    async def delete_runner(runner_id: RunnerId) -> dict[str, str]:
        try:
            outcome = await service.operator.delete_runner(runner_id)
        except KeyStopped as exc:
            raise HTTPException(status_code=503, detail=f"{exc}; try again once it is serving") from None
        except DeleteFailed as exc:
            raise HTTPException(status_code=500, detail=str(exc)) from None
        if outcome is DeleteOutcome.MISSING:
            raise HTTPException(status_code=404, detail=f"no runner {runner_id}")
        if outcome is DeleteOutcome.BUSY:
            raise HTTPException(status_code=409, detail="the runner is running a job; drain its pool instead")
        return {"outcome": outcome.value}

    app.include_router(build_dashboard_router(service))
    return app


def usage_window(since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
    """The window asked for, in UTC (a time without a zone is taken as UTC); 422 when it is empty or longer
    than MAX_USAGE_WINDOW (the accounting reads every runner of the window into memory)."""
    end = _utc(until) if until is not None else utcnow()
    start = _utc(since) if since is not None else end - timedelta(days=1)
    if start >= end:
        raise HTTPException(status_code=422, detail="since must be before until")
    if end - start > MAX_USAGE_WINDOW:
        raise HTTPException(
            status_code=422, detail=f"the window may span at most {MAX_USAGE_WINDOW.days} days; ask for several"
        )
    return start, end


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def usage_dimensions(group_by: str) -> tuple[Dimension, ...]:
    """`pool,repository` as dimensions; 422 naming the ones allowed otherwise."""
    asked = [part.strip() for part in group_by.split(",") if part.strip()]
    unknown = [part for part in asked if part not in DIMENSIONS]
    if unknown or not asked or len(set(asked)) != len(asked):
        raise HTTPException(
            status_code=422,
            detail=f"group_by takes distinct names among {', '.join(DIMENSIONS)} (comma-separated), "
            f"not {group_by[:80]!r}",
        )
    return tuple(part for part in DIMENSIONS if part in asked)
