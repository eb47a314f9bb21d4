"""Outages of what corral depends on, logged once when each begins and once when it ends.

While a dependency (the database, say) cannot be reached, every call to it fails: logging each failure, with
its traceback, buried the one fact an operator needs under dozens of identical stack traces. Instead the
first failure logs one line (what, since when, what corral does meanwhile), the first success afterwards
logs one line (back, after how long), and in between nothing: the calls that fail meanwhile raise a
`DependencyUnavailable` (`corral.store.DatabaseUnavailable`, for the database), which their callers log
without a traceback (`log_unexpected`). A traceback is left for what is truly unexpected.

Two metrics follow each dependency: `corral_dependency_up{dependency}` (1 reachable, 0 in an outage) and
`corral_dependency_outages_total{dependency}` (outages begun).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from datetime import datetime

from prometheus_client import Counter

from corral import secrets
from corral.clock import SYSTEM_CLOCK, Clock, as_clock
from corral.metrics import DEPENDENCY_OUTAGES, DEPENDENCY_UP

logger = logging.getLogger("corral.outages")

MAX_REASON_CHARS = 200
"""Enough of an error message to name the cause (connection refused, the server shutting down)."""


class DependencyUnavailable(Exception):
    """A call failed because a dependency is in an outage, which was logged once when it began: whoever
    catches this tries again later and logs no traceback (see `log_unexpected`)."""

    dependency = "dependency"
    """Which one, as the API's 503 names it."""


def log_unexpected(log: logging.Logger, message: str, *args: object, counted: Counter | None = None) -> None:
    """`log.exception(message, *args)` for the exception being handled, and `counted.inc()`, unless it is an
    outage's: that one was logged (and counted) when the outage began, so it gets a DEBUG line here rather
    than a traceback at every call, and counts as no unexpected error (whose alert says: report a bug)."""
    error = sys.exc_info()[1]
    if isinstance(error, DependencyUnavailable):
        log.debug(message + " (%s)", *args, error, stacklevel=2)
        return
    if counted is not None:
        counted.inc()
    log.exception(message, *args, stacklevel=2)  # the record names the caller's line, not this one


def describe(error: BaseException) -> str:
    """An error as the outage line shows it: its type and the first line of its message, clipped and with
    every known secret blanked (a driver's message may quote part of a connection string)."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    if len(first_line) > MAX_REASON_CHARS:
        first_line = first_line[: MAX_REASON_CHARS - 3] + "..."
    text = f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__
    return secrets.redact(text)


class DependencyHealth:
    """Whether one dependency is reachable, told by every call to it; safe to tell from any thread."""

    def __init__(
        self,
        dependency: str,
        meanwhile: str,
        *,
        clock: Clock | Callable[[], datetime] = SYSTEM_CLOCK,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        """`meanwhile` completes "meanwhile corral ...": what it does until the dependency is back. `clock`: a
        Clock, or (as callers pinned the two apart) a wall-time function with `monotonic` beside it."""
        self.dependency = dependency
        self.meanwhile = meanwhile
        if isinstance(clock, Clock):
            self._clock = as_clock(monotonic, wall=clock.now) if monotonic is not None else clock
        else:
            self._clock = as_clock(monotonic or SYSTEM_CLOCK, wall=clock)
        self.monotonic = self._clock.monotonic
        self._lock = threading.Lock()
        self.down_since: datetime | None = None
        """When the outage under way began (None: reachable, as far as corral knows)."""
        self._down_at = 0.0
        self._succeeded_at: float | None = None
        """When a call last succeeded (monotonic); None before the first."""

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, error: BaseException, began_at: float) -> None:
        """A call that began at `began_at` (`monotonic`) found the dependency unreachable. The first such
        call begins an outage, and logs it; a call older than the latest success is old news (calls run in
        several threads at once) and changes nothing."""
        with self._lock:
            if self.down_since is not None:
                return
            if self._succeeded_at is not None and began_at < self._succeeded_at:
                return
            since = self.down_since = self._clock.now()
            self._down_at = self.monotonic()
            DEPENDENCY_UP.labels(self.dependency).set(0)  # under the lock: an end racing this one sets it last
        DEPENDENCY_OUTAGES.labels(self.dependency).inc()
        logger.warning(
            "%s unreachable since %s (%s); meanwhile corral %s. Logged again when it is back",
            self.dependency,
            since.isoformat(timespec="seconds"),
            describe(error),
            self.meanwhile,
        )

    def succeeded(self) -> None:
        """A call succeeded: an outage under way ends, and says how long it lasted."""
        first = self._succeeded_at is None
        self._succeeded_at = self.monotonic()
        if self.down_since is None:  # the common case, without the lock: every transaction comes here
            if first:
                DEPENDENCY_UP.labels(self.dependency).set(1)
            return
        with self._lock:
            since, self.down_since = self.down_since, None
            if since is None:
                return
            lasted = self.monotonic() - self._down_at
            DEPENDENCY_UP.labels(self.dependency).set(1)
        logger.info(
            "%s reachable again after %.1fs (unreachable since %s)",
            self.dependency,
            lasted,
            since.isoformat(timespec="seconds"),
        )
