"""PostgreSQL `LISTEN corral_wake`: a webhook accepted by one replica wakes the pool's owner on another.

One connection of its own, in a thread (psycopg blocks while it waits for notifications), hands each
payload to the event loop. A lost connection is opened again with backoff; nothing is lost meanwhile that
the periodic pass would not find (a wake only brings a pass forward).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import make_url

from corral.outages import DependencyHealth
from corral.store.leases import WAKE_CHANNEL

logger = logging.getLogger("corral.store")

POLL_S = 1.0
"""How often the thread looks up from waiting to see whether it should stop."""


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL (postgresql+psycopg://...) as psycopg itself takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class WakeListener:
    """Calls `on_wake(payload)` on `loop` for every notification on the wake channel."""

    def __init__(
        self,
        url: str,
        loop: asyncio.AbstractEventLoop,
        on_wake: Callable[[str], None],
        on_resumed: Callable[[], None] = lambda: None,
        health: DependencyHealth | None = None,
    ) -> None:
        """`on_resumed` is called after listening again following a lost connection: what was sent meanwhile
        is lost, so the engine looks at everything afresh rather than wait for its next periodic pass.
        `health` is the store's (`Store.health`): connections refused are the database's outage, logged once."""
        self._conninfo = libpq_url(url)
        self._loop = loop
        self._on_wake = on_wake
        self._on_resumed = on_resumed
        self._health = health
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corral-wakes", daemon=True)
        self.listening = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=POLL_S * 3)

    def _run(self) -> None:
        wait_s = 1.0
        interrupted = False
        while not self._stop.is_set():
            began_at = time.monotonic()
            try:
                connection = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10)
            except psycopg.Error as exc:
                self._cannot_listen(exc, began_at, wait_s)
            else:
                try:
                    self._listen(connection, interrupted)
                except psycopg.Error as exc:
                    self.listening.clear()
                    interrupted = True
                    if time.monotonic() - began_at >= POLL_S:
                        # A connection that served was ended (a restart, an administrator): open another at
                        # once, quietly; should the database refuse it, that attempt reports the outage.
                        logger.debug("listening for wakes: connection lost (%s); listening again", type(exc).__name__)
                        wait_s = 1.0
                        continue
                    # Connecting works but the connection does not last: no outage, but no loop of reconnects.
                    logger.debug("listening for wakes: connection lost at once (%s)", type(exc).__name__)
                except RuntimeError:
                    return  # the event loop closed under us: corral is stopping
                finally:
                    connection.close()
            interrupted = True
            self._stop.wait(wait_s)
            wait_s = min(wait_s * 2, 30.0)

    def _listen(self, connection: psycopg.Connection[Any], resumed: bool) -> None:
        """Listen on `connection` until stopped; `resumed`: after a lost connection (the engine looks afresh)."""
        connection.execute(f"LISTEN {WAKE_CHANNEL}")
        self.listening.set()
        if self._health is not None:
            self._health.succeeded()
        if resumed:
            self._loop.call_soon_threadsafe(self._on_resumed)
        while not self._stop.is_set():
            for notification in connection.notifies(timeout=POLL_S):
                self._loop.call_soon_threadsafe(self._on_wake, notification.payload)

    def _cannot_listen(self, exc: psycopg.Error, began_at: float, wait_s: float) -> None:
        """A database that refuses connections is an outage of the database, reported once for the listener
        and the store together; without that report (no `health`), each failure says so itself."""
        if self._health is not None:
            self._health.failed(exc, began_at)
            logger.debug("listening for wakes failed (%s); again in %.0fs", type(exc).__name__, wait_s)
        else:
            logger.warning("listening for wakes failed (%s); again in %.0fs", type(exc).__name__, wait_s)
