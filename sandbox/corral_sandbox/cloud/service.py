"""What every service router shares: token checks, microversions, JSON bodies and response headers.

Each service builds its router with `service_router`, which wraps `instrumented_router` (stats and
injected faults) with the checks keystonemiddleware and the microversion middleware do in front of a real
service. Handlers read the negotiated version from `request.state.version` and answer through `respond`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from corral_sandbox.cloud.errors import ApiError, glance_error, keystone_error, responder_for
from corral_sandbox.cloud.microversion import Microversions, Version
from corral_sandbox.http import instrumented_router

if TYPE_CHECKING:
    from corral_sandbox.cloud.state import CloudState
    from corral_sandbox.world import World

AUTH_REQUIRED = "The request you have made requires authentication."
GLANCE_AUTH_REQUIRED = (
    "This server could not verify that you are authorized to access the document you requested. Either you "
    "supplied the wrong credentials (e.g., bad password), or your browser does not understand how to supply "
    "the credentials required."
)


def service_router(
    world: World,
    cloud: CloudState,
    service: str,
    *,
    prefix: str,
    authenticated: bool = True,
    microversions: Microversions | None = None,
) -> APIRouter:
    """A router for `service` under `prefix`; its routes demand a valid token unless `authenticated`
    is False (version discovery and token issue) and negotiate `microversions` when given."""

    async def pre_hook(request: Request, _key: str) -> Response | None:
        if authenticated and request.headers.get("x-auth-token", "") not in cloud.tokens:
            return unauthorized(cloud, service)
        if microversions is not None:
            request.state.microversions = microversions
            request.state.version = microversions.negotiate(request)
        return None

    return instrumented_router(world, cloud.side, responder_for(service), pre_hook, prefix=prefix)


def unauthorized(cloud: CloudState, service: str = "identity") -> Response:
    """keystonemiddleware's answer to a missing, unknown or expired token (Glance lets webob word it)."""
    response = glance_error(401, GLANCE_AUTH_REQUIRED) if service == "image" else keystone_error(401, AUTH_REQUIRED)
    response.headers["WWW-Authenticate"] = f'Keystone uri="{cloud.url}/identity"'
    return response


def version_headers(request: Request) -> dict[str, str]:
    microversions: Microversions | None = getattr(request.state, "microversions", None)
    version: Version | None = getattr(request.state, "version", None)
    if microversions is None or version is None:
        return {}
    return microversions.headers(version)


def respond(request: Request, body: Any, status: int = 200) -> Response:
    return raw_json(request, json.dumps(body, separators=(",", ":")).encode(), status)


def raw_json(request: Request, payload: bytes, status: int = 200) -> Response:
    """A JSON response from already serialized bytes (listings join cached per-item bodies)."""
    return Response(payload, status_code=status, media_type="application/json", headers=version_headers(request))


def no_content(request: Request, status: int = 204) -> Response:
    return Response(status_code=status, headers=version_headers(request))


async def json_body(request: Request, message: str = "Malformed request body") -> dict[str, Any]:
    """The request's JSON object; Nova and Cinder answer 400 `Malformed request body` otherwise."""
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        raise ApiError(400, message) from None
    if not isinstance(body, dict):
        raise ApiError(400, message)
    return body


def version_at_least(request: Request, version: Version) -> bool:
    current: Version = request.state.version
    return current >= version
