"""Stop at GitHub's rate limit and resume at its reset, instead of spending refused calls in between.

GitHub counts every request against the credential that made it: a token, an App's JWTs, or one App
installation (shared by all of its tokens). Once a budget is spent every further request is refused until
the reset, and repeated refusals can earn a secondary limit or a ban of the integration. So each credential
has a gate: closed until the reset when GitHub answers with `X-RateLimit-Remaining: 0` (on a success or a
refusal) or with `Retry-After` (a secondary limit); a call through a closed gate fails at once, without
touching the network, with the time left to wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

SECONDARY_LIMIT_DEFAULT_S = 60.0
"""GitHub's advice when a secondary limit names no wait: at least a minute."""
MAX_PAUSE_S = 3600.0
"""A reset is at most an hour away; a header saying otherwise (a skewed clock) is not believed further."""


class RateGate:
    """Per-credential pause until a known time; one per GitHub client, shared by all its calls."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._closed_until: dict[str, float] = {}

    def wait_s(self, credential: str) -> float:
        """Seconds until `credential` may call again; 0 when the gate is open."""
        until = self._closed_until.get(credential)
        if until is None:
            return 0.0
        remaining = until - self._clock()
        if remaining <= 0:
            del self._closed_until[credential]
            return 0.0
        return remaining

    def close_for(self, credential: str, seconds: float) -> None:
        seconds = min(max(seconds, 0.0), MAX_PAUSE_S)
        until = self._clock() + seconds
        self._closed_until[credential] = max(self._closed_until.get(credential, 0.0), until)

    def observe(self, credential: str, headers: httpx.Headers) -> None:
        """Close the gate until the reset when a response says the budget is spent."""
        if headers.get("x-ratelimit-remaining") != "0":
            return
        reset = headers.get("x-ratelimit-reset", "")
        wait = float(reset) - self._clock() if reset.isdigit() else SECONDARY_LIMIT_DEFAULT_S
        self.close_for(credential, max(wait, 1.0))
