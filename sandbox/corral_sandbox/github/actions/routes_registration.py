"""`POST {api}/actions/runner-registration`: a registration token for the Actions service URL and an admin JWT.

The client sends `Authorization: RemoteAuth <registration token>` and `{"url": <the scope's GitHub URL>,
"runner_event": "register"}`; GitHub answers `{"url", "token_schema": "OAuthAccessToken", "token"}` (the
runner's `GitHubAuthResult`; the Go client reads `url` and `token`). A token that is unknown, expired or issued
for another scope gets GitHub's 404 `Not Found` (what `config.sh` prints for a stale token). The answer is 201,
as in `actions/scaleset`'s test server (the Go client accepts any 2xx). Served under `/api/v3` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from corral_sandbox.github.errors import GitHubError, fault_response, invalid_request
from corral_sandbox.github.routes.common import json_body
from corral_sandbox.http import API_V3_PREFIX, instrumented_router

if TYPE_CHECKING:
    from corral_sandbox.world import World


def install(app: FastAPI, world: World) -> None:
    router = instrumented_router(world, "github", fault_response)

    async def runner_registration(request: Request) -> JSONResponse:
        scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
        body = await json_body(request)
        url, event = body.get("url"), body.get("runner_event")
        if scheme.lower() != "remoteauth" or not token.strip() or not isinstance(url, str):
            raise GitHubError(404, "Not Found")
        if event != "register":
            raise invalid_request(f"For 'properties/runner_event', {event!r} is not one of ['register'].")
        service = world.github.actions
        tenant, admin_token = service.exchange(token.strip(), urlsplit(url.strip()).path)
        return JSONResponse(
            {"url": service.service_url(tenant), "token_schema": "OAuthAccessToken", "token": admin_token},
            status_code=201,
        )

    router.add_api_route("/actions/runner-registration", runner_registration, methods=["POST"])
    app.include_router(router)
    app.include_router(router, prefix=API_V3_PREFIX)
