"""The HTTP plumbing both sides of the sandbox share: per-route stats and injected faults.

Each side builds its routers with `instrumented_router`; every route then counts its calls under the
endpoint key `"<METHOD> <route template>"` and obeys the endpoint faults switched on for it, answering
with an error body shaped the way that side's real service shapes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

if TYPE_CHECKING:
    from corral_sandbox.world import World

ErrorResponder = Callable[[int, str], Response]
"""Builds the error response a real service would send for (status, message)."""

PreHook = Callable[[Request, str], Awaitable[Response | None]]
"""Runs before the handler with (request, endpoint key); a returned response short-circuits the call."""

API_V3_PREFIX = "/api/v3"


def endpoint_key(method: str, path_format: str) -> str:
    """The name a route is counted and matched under; Enterprise Server's `/api/v3` prefix is folded."""
    if path_format.startswith(API_V3_PREFIX + "/"):
        path_format = path_format[len(API_V3_PREFIX) :]
    return f"{method} {path_format}"


def instrumented_router(
    world: World,
    side: str,
    error_response: ErrorResponder,
    pre_hook: PreHook | None = None,
    **router_kwargs: Any,
) -> APIRouter:
    """An APIRouter whose routes count calls and apply endpoint faults for `side`."""

    class InstrumentedRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            methods = sorted(self.methods or {"GET"})
            path_format = self.path_format

            async def instrumented(request: Request) -> Response:
                key = endpoint_key(request.method if request.method in methods else methods[0], path_format)
                world.stats.began(side, key)
                try:
                    return await answer(request, key)
                finally:
                    world.stats.ended(side, key)

            async def answer(request: Request, key: str) -> Response:
                decision = world.faults.decide(side, *key.split(" ", 1))
                if decision.latency_s:
                    # The request is received in full before the server dawdles, as with a slow real
                    # service: a client that gives up (or dies) meanwhile does not undo its request. It is
                    # counted once received in full, so that a test which kills the client after seeing the
                    # count knows the request will be carried out.
                    await request.body()
                    world.stats.api_call(side, key)
                    await asyncio.sleep(decision.latency_s)
                else:
                    world.stats.api_call(side, key)
                if decision.error_status is not None:
                    world.stats.injected_error(side, key)
                    return error_response(decision.error_status, "injected fault")
                if pre_hook is not None:
                    early = await pre_hook(request, key)
                    if early is not None:
                        return early
                response = await handler(request)
                if decision.garble:
                    world.stats.incr(f"{side}_garbled_answers")
                    return Response(b"{}", status_code=response.status_code, media_type="application/json")
                return response

            return instrumented

    return APIRouter(route_class=InstrumentedRoute, **router_kwargs)
