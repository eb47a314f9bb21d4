"""The message queue: `GET {messageQueueUrl}` long-polls, `DELETE {messageQueueUrl}/{messageId}` acknowledges.

As on github.com the queue URL is one address for every session (`/_actions/broker/scalesets/message`); the
`Authorization: Bearer <messageQueueAccessToken>` says whose queue it is. A poll may carry `lastMessageId`
(the Go client adds it once it has seen a message) and `X-ScaleSetMaxCapacity` (the most runners the
listener will run: how many jobs github.com assigns the set at most); the api-version travels in `Accept`.
The answer is 200 with a message, or 202 with no body once `long_poll_s` passed with nothing to say; a dead
token or session gets 401, which the Go client takes for an expired token and answers by refreshing the
session.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from corral_sandbox.github.actions import errors
from corral_sandbox.github.actions.errors import fault_response
from corral_sandbox.github.actions.http import bearer
from corral_sandbox.github.actions.model import Session
from corral_sandbox.github.actions.service import BROKER_PATH, ActionsService
from corral_sandbox.github.actions.sessions import MESSAGE_TYPE
from corral_sandbox.http import instrumented_router

if TYPE_CHECKING:
    from corral_sandbox.world import World

CAPACITY_HEADER = "X-ScaleSetMaxCapacity"


def _non_negative(raw: str | None, what: str) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise errors.bad_request(f"{what} must be a non-negative integer, got {raw!r}.")
    return value


def install(app: FastAPI, world: World) -> None:
    router = instrumented_router(world, "github", fault_response)

    def service() -> ActionsService:
        return world.github.actions

    def session_of(request: Request) -> Session:
        return service().sessions.authenticate(bearer(request))

    async def get_message(request: Request) -> Response:
        polled = session_of(request)
        _non_negative(request.query_params.get("lastMessageId"), "lastMessageId")
        capacity = _non_negative(request.headers.get(CAPACITY_HEADER), CAPACITY_HEADER)
        service().advertise(polled, capacity)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + service().settings.long_poll_s
        polled.polls += 1
        try:
            while True:
                session = session_of(request)
                scale_set = service().registry.scale_sets[session.scale_set_id]
                delivery = service().sessions.next_delivery(session, partial(service().jobs.statistics, scale_set))
                if delivery is not None:
                    return JSONResponse(
                        {
                            "messageId": delivery.message_id,
                            "messageType": MESSAGE_TYPE,
                            "body": delivery.body,
                            "statistics": delivery.statistics,
                        }
                    )
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return Response(status_code=202)
                session.wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(session.wakeup.wait(), remaining)
        finally:
            polled.polls -= 1
            service().sessions.seen(polled)

    async def delete_message(request: Request) -> Response:
        session = session_of(request)
        service().sessions.seen(session)
        try:
            message_id = int(request.path_params["message_id"])
        except ValueError as exc:
            raise errors.bad_request("The message id must be an integer.") from exc
        inflight = session.inflight
        if inflight is not None and inflight.message_id == message_id:
            if world.faults.chance(world.faults.world.scaleset_ack_drop_rate):
                world.stats.incr("scaleset_acks_dropped")
            else:
                service().sessions.acknowledge(session, message_id)
        return Response(status_code=204)

    router.add_api_route(BROKER_PATH, get_message, methods=["GET"])
    router.add_api_route(BROKER_PATH + "/{message_id}", delete_message, methods=["DELETE"])
    app.include_router(router)
