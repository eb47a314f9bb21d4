"""The GitHub REST API of the sandbox, at github.com's shape and under Enterprise Server's `/api/v3`.

Every route passes through one hook before its handler: authentication (PAT, installation token or app
JWT, each only where GitHub accepts it), the primary rate limit and injected secondary limits. A small
ASGI middleware then stamps the caller's `X-RateLimit-*` headers, a request id, GitHub's `Date` (on
GitHub's clock, which a test may skew) and, for a classic PAT, its `X-OAuth-Scopes` on every response,
including errors raised by handlers, as GitHub does.

The runner scale-set protocol's registration exchange and its Actions service (`github/actions/`) are served
from the same app, outside this authentication: they take tokens of their own.
"""

from __future__ import annotations

import secrets
from email.utils import formatdate
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral_sandbox.github.actions.http import install as install_actions
from corral_sandbox.github.auth import bearer_token, is_app_route, refuse_app, require_app
from corral_sandbox.github.errors import GitHubError, error_response, fault_response
from corral_sandbox.github.ratelimit import secondary_limit_error
from corral_sandbox.github.routes import apps, deliveries, hook, installation, jobs, meta, runners
from corral_sandbox.http import API_V3_PREFIX, PreHook, instrumented_router

if TYPE_CHECKING:
    from corral_sandbox.github.state import GitHubState
    from corral_sandbox.world import World

API_VERSION = "2022-11-28"


def _request_id() -> str:
    return ":".join(secrets.token_hex(n).upper() for n in (2, 3, 4, 4, 4))


class GitHubHeaders:
    """Adds the rate-limit headers the hook computed, `X-GitHub-Request-Id`, `Date` and a PAT's
    `X-OAuth-Scopes` to each response (the server itself is told not to send a `Date` of its own)."""

    def __init__(self, app: ASGIApp, state: GitHubState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id()
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = {
                    **scope["state"].get("rate_headers", {}),
                    "X-GitHub-Request-Id": request_id,
                    "X-GitHub-Api-Version-Selected": API_VERSION,
                    "Date": formatdate(self.state.now(), usegmt=True),
                }
                who = scope["state"].get("principal")
                if who is not None and who.kind == "pat":
                    extra["X-OAuth-Scopes"] = ", ".join(self.state.pat_scopes)
                message["headers"] = list(message.get("headers", [])) + [
                    (name.lower().encode(), value.encode())
                    for name, value in extra.items()
                    if name.lower().encode() not in present
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _hook(world: World, state: GitHubState) -> PreHook:
    async def authenticate_and_limit(request: Request, key: str) -> Response | None:
        path = key.split(" ", 1)[1]
        try:
            token = bearer_token(request.headers.get("authorization"))
            if token is None:
                raise GitHubError(401, "Requires authentication")
            who = state.authenticate(token)
            if path == "/rate_limit":
                budget = state.rate_limits.budget(who.rate_key, who.rate_limit)
            else:
                if is_app_route(path):
                    require_app(who)
                else:
                    refuse_app(who)
                subject = who.rate_limit_subject(state.directory.pat_owner.id, world.credentials.github_app_id)
                try:
                    budget = state.rate_limits.consume(who.rate_key, who.rate_limit, subject)
                except GitHubError:
                    world.stats.incr("github_rate_limited")
                    raise
                faults = world.faults.world
                if world.faults.chance(faults.secondary_rate_limit_rate):
                    world.stats.incr("github_secondary_rate_limits")
                    raise secondary_limit_error(faults.secondary_retry_after, budget, request.state.request_id)
        except GitHubError as error:
            return error.response()
        request.state.principal = who
        request.state.rate_headers = budget.headers()
        return None

    return authenticate_and_limit


def build_github_app(world: World) -> FastAPI:
    state = world.github
    app = FastAPI(title="corral sandbox: GitHub", docs_url=None, redoc_url=None, openapi_url=None)
    router = instrumented_router(world, "github", fault_response, pre_hook=_hook(world, state))
    for area in (apps, runners, jobs, deliveries, hook, meta, installation):
        area.register(router, state)
    app.include_router(router)
    app.include_router(router, prefix=API_V3_PREFIX)
    install_actions(app, world)

    @app.exception_handler(GitHubError)
    async def github_error(request: Request, exc: GitHubError) -> Response:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        status = 404 if exc.status_code == 405 else exc.status_code
        return error_response(status, "Not Found" if status == 404 else str(exc.detail))

    app.add_middleware(GitHubHeaders, state=state)
    return app
