"""Headers every answer carries, whichever route (or error handler) produced it.

`nosniff` keeps a browser from reading a JSON answer as a script or a page; `no-store` keeps runner
names, jobs and errors out of browser and proxy caches, where the next user of a shared machine could
find them. A route that set its own `Cache-Control` (the dashboard's static page, which holds no data)
keeps it.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class DefaultHeaders:
    """Pure ASGI middleware (no body buffering, unlike BaseHTTPMiddleware): adds what is missing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in DEFAULT_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
