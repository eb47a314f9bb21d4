"""HTTP plumbing of the Actions service: bearer tokens, api-version, bodies, paths and the `ActivityId` header.

The service answers on the sandbox's GitHub port, outside the REST API's authentication and rate limits (it
has its own tokens), through instrumented routers so endpoint faults and call counts work as on every route.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral_sandbox.github.actions import errors
from corral_sandbox.github.actions.errors import ActionsError
from corral_sandbox.github.actions.service import SERVICE_PREFIX

if TYPE_CHECKING:
    from corral_sandbox.world import World

PREVIEW_VERSION = re.compile(r"^\d+\.\d+-preview(\.\d+)?$")


def bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def require_preview_version(request: Request) -> None:
    """`_apis` resources are preview ones: the api-version (query, or `Accept: ...; api-version=`) must say so."""
    version = request.query_params.get("api-version")
    if version is None:
        found = re.search(r"api-version=([^;,\s]+)", request.headers.get("accept", ""))
        version = found.group(1) if found else None
    if version is None or not PREVIEW_VERSION.match(version):
        raise errors.preview_required()


async def json_value(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise errors.bad_request("The request body is not valid JSON.") from exc


async def json_object(request: Request) -> dict[str, Any]:
    body = await json_value(request)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise errors.bad_request("The request body must be a JSON object.")
    return body


def path_id(request: Request, name: str, not_found: ActionsError) -> int:
    try:
        return int(request.path_params[name])
    except ValueError as exc:
        raise not_found from exc


class ActionsPaths:
    """Collapses doubled slashes under `/_actions/` and stamps an `ActivityId` on the service's answers.

    The service URL ends in `/`, and a client that joins paths by formatting (`"%s/%s"`, as ARC's `AcquireJobs`
    does) sends `//`; GitHub serves those, so the sandbox does too. `ActivityId` is the header the Go client
    quotes in its errors.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(SERVICE_PREFIX + "/"):
            await self.app(scope, receive, send)
            return
        if "//" in scope["path"]:
            path = re.sub(r"/{2,}", "/", scope["path"])
            scope = {**scope, "path": path, "raw_path": path.encode()}
        activity = str(uuid.uuid4()).encode()

        async def send_with_activity(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"activityid", activity)]
            await send(message)

        await self.app(scope, receive, send_with_activity)


def install(app: FastAPI, world: World) -> None:
    """Serve the registration exchange and the Actions service from the GitHub app."""
    from corral_sandbox.github.actions import routes_admin, routes_broker, routes_registration

    routes_registration.install(app, world)
    routes_admin.install(app, world)
    routes_broker.install(app, world)

    async def actions_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ActionsError)
        return exc.response()

    app.add_exception_handler(ActionsError, actions_error)
    app.add_middleware(ActionsPaths)
