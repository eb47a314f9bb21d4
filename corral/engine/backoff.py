"""Per-key exponential backoff and log de-duplication: how errors are retried without storms."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from corral.clock import SYSTEM_CLOCK, Clock, ClockLike, as_clock


@dataclass
class Backoff:
    """Doubles the wait after each failure up to `cap`; one success resets it."""

    base_s: float = 1.0
    cap_s: float = 60.0
    clock: ClockLike = SYSTEM_CLOCK
    failures: int = 0
    until: float = 0.0
    _clock: Clock = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._clock = as_clock(self.clock)

    def failed(self, at_least_s: float = 0.0) -> float:
        """Record a failure; returns the seconds to wait before trying again.

        Failures while already waiting do not make the wait longer (only `at_least_s` can): they come from
        attempts started before the wait began (eight parallel creates failing together are one failure of
        the cloud, not eight), and counting each would jump to the cap at once.
        """
        now = self._clock.monotonic()
        if now < self.until:
            self.until = max(self.until, now + at_least_s)
            return self.until - now
        self.failures += 1
        wait: float = max(min(self.cap_s, self.base_s * 2.0 ** (self.failures - 1)), at_least_s)
        self.until = now + wait
        return wait

    def succeeded(self) -> None:
        self.failures = 0
        self.until = 0.0

    @property
    def waiting(self) -> bool:
        return self._clock.monotonic() < self.until

    @property
    def remaining_s(self) -> float:
        return max(self.until - self._clock.monotonic(), 0.0)


@dataclass
class LogOnce:
    """Logs a repeating message once per `interval_s` per key, counting what it held back."""

    logger: logging.Logger
    interval_s: float = 60.0
    clock: ClockLike = SYSTEM_CLOCK
    _last: dict[str, tuple[str, float, int]] = field(default_factory=dict)
    _clock: Clock = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._clock = as_clock(self.clock)

    def warning(self, key: str, message: str) -> None:
        now = self._clock.monotonic()
        previous = self._last.get(key)
        if previous is not None and previous[0] == message and now - previous[1] < self.interval_s:
            self._last[key] = (message, previous[1], previous[2] + 1)
            return
        suppressed = previous[2] if previous is not None and previous[0] == message else 0
        suffix = f" (repeated {suppressed} more times)" if suppressed else ""
        self.logger.warning("%s%s", message, suffix)
        self._last[key] = (message, now, 0)

    def clear(self, key: str) -> None:
        self._last.pop(key, None)
