"""The FastAPI application: REST API under /api/v1, health, metrics (OpenAPI at /docs)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from corral import __version__
from corral.api.auth import requires
from corral.api.dashboard import build_dashboard_router
from corral.api.views import JobView, PoolView, ReloadResult, RunnerEventView, RunnerView
from corral.api.webhook import build_webhook_router
from corral.metrics import REGISTRY
from corral.model import JobState, RunnerState
from corral.service import Service

logger = logging.getLogger("corral.api")


def build_app(service: Service) -> FastAPI:
    app = FastAPI(title="corral", version=__version__, description="Ephemeral GitHub Actions runners on OpenStack")
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
        drained does not count against it). The body names each pool's readiness and why not."""
        pools = {}
        for name in service.config.pools:
            pool_ready, reason = service.engine.pool_ready(name)
            pools[name] = {"ready": pool_ready, "reason": reason}
        serving = [name for name in service.config.pools if name not in service.engine.drained]
        ready = service.engine.passes > 0 and all(pools[name]["ready"] for name in serving)
        response.status_code = 200 if ready else 503
        return {"ready": ready, "passes": service.engine.passes, "pools": pools}

    read = [Depends(requires(service.store, "read"))]
    admin = [Depends(requires(service.store, "admin"))]

    @app.get("/metrics", tags=["health"], dependencies=[Depends(requires(service.store, "metrics"))])
    async def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/pools", tags=["pools"], dependencies=read)
    async def pools() -> list[PoolView]:
        return service.pool_views()

    @app.get("/api/v1/runners", tags=["runners"], dependencies=read)
    async def runners(
        pool: str | None = None,
        state: Annotated[list[RunnerState] | None, Query()] = None,
        include_deleted: bool = False,
    ) -> list[RunnerView]:
        states = state or [s for s in RunnerState if include_deleted or s is not RunnerState.DELETED]
        return [RunnerView.of(row) for row in service.store.runners(pool=pool, states=states)]

    @app.get("/api/v1/runners/{runner_id}/events", tags=["runners"], dependencies=read)
    async def runner_events(runner_id: str) -> list[RunnerEventView]:
        if service.store.runner(runner_id) is None:
            raise HTTPException(status_code=404, detail=f"no runner {runner_id}")
        return [RunnerEventView.of(event) for event in service.store.events(runner_id)]

    @app.get("/api/v1/jobs", tags=["jobs"], dependencies=read)
    async def jobs(status: JobState | None = None, pool: str | None = None, limit: int = 200) -> list[JobView]:
        return [JobView.of(job) for job in service.store.jobs(status=status, pool=pool, limit=min(limit, 1000))]

    @app.post("/api/v1/reload", tags=["actions"], dependencies=admin)
    async def reload(response: Response) -> ReloadResult:
        problems = await service.reload()
        if problems:
            response.status_code = 422
        return ReloadResult(reloaded=not problems, generation=service.engine.generation, problems=problems)

    @app.post("/api/v1/reconcile", status_code=202, tags=["actions"], dependencies=admin)
    async def reconcile() -> dict[str, bool]:
        service.engine.wake()
        return {"requested": True}

    @app.post("/api/v1/pools/{name}/drain", tags=["actions"], dependencies=admin)
    async def drain(name: str) -> PoolView:
        return set_drained(name, True)

    @app.post("/api/v1/pools/{name}/undrain", tags=["actions"], dependencies=admin)
    async def undrain(name: str) -> PoolView:
        return set_drained(name, False)

    def set_drained(name: str, drained: bool) -> PoolView:
        if name not in service.config.pools:
            raise HTTPException(status_code=404, detail=f"no pool {name!r}")
        service.engine.set_drained(name, drained)
        return next(view for view in service.pool_views() if view.name == name)

    @app.delete("/api/v1/runners/{runner_id}", status_code=202, tags=["actions"], dependencies=admin)
    async def delete_runner(runner_id: str) -> dict[str, str]:
        outcome = await service.engine.delete_runner(runner_id)
        if outcome == "missing":
            raise HTTPException(status_code=404, detail=f"no runner {runner_id}")
        if outcome == "busy":
            raise HTTPException(status_code=409, detail="the runner is running a job; drain its pool instead")
        return {"outcome": outcome}

    app.include_router(build_dashboard_router(service))
    return app
