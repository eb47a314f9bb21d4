"""`corral serve`: the API server and the engine on one event loop, with SIGHUP reloading the config."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import signal
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from corral.api.app import build_app
from corral.engine.supervisor import ActionKind
from corral.service import Service

logger = logging.getLogger("corral.serve")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: corral owns SIGINT/SIGTERM/SIGHUP for the whole process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def server_config(app: ASGIApp, host: str, port: int) -> uvicorn.Config:
    """uvicorn with no logging set-up of its own: its lines (tracebacks too) go through corral's handler."""
    return uvicorn.Config(
        app, host=host, port=port, log_config=None, log_level="warning", lifespan="off", http="httptools"
    )


async def serve(service: Service, host: str, port: int) -> None:
    server = _Server(server_config(build_app(service), host, port))
    loop = asyncio.get_running_loop()

    def stop() -> None:
        logger.info("stopping")
        service.stop()
        server.should_exit = True

    signals = itertools.count(1)

    def reload() -> None:
        # Supervised, not a bare task: an exception of the reload is logged once and counted, never lost.
        key = f"reload:sighup:{next(signals)}"
        service.engine.supervisor.start(ActionKind.RELOAD, key, service.reload())

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGHUP, reload)
    engine = loop.create_task(service.run())
    try:
        await server.serve()
    finally:
        service.stop()
        await engine
        service.close()
