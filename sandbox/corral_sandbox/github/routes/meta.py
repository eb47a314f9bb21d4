"""`GET /rate_limit`: the caller's budgets; GitHub does not count this call against them."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral_sandbox.github.routes.common import principal
from corral_sandbox.github.state import GitHubState

OTHER_RESOURCES = {
    "search": 30,
    "code_search": 10,
    "graphql": 5000,
    "integration_manifest": 5000,
    "dependency_snapshots": 100,
    "code_scanning_upload": 1000,
    "actions_runner_registration": 10000,
    "scim": 15000,
}


def register(router: APIRouter, state: GitHubState) -> None:
    @router.get("/rate_limit")
    async def rate_limit(request: Request) -> JSONResponse:
        who = principal(request)
        core = state.rate_limits.budget(who.rate_key, who.rate_limit)
        core_json = {
            "limit": core.limit,
            "remaining": core.remaining,
            "reset": core.reset_at,
            "used": core.used,
            "resource": "core",
        }
        reset = int(time.time()) + 60
        resources = {"core": core_json}
        for name, limit in OTHER_RESOURCES.items():
            resources[name] = {"limit": limit, "remaining": limit, "reset": reset, "used": 0, "resource": name}
        return JSONResponse({"resources": resources, "rate": core_json})
