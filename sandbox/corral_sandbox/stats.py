"""Counters the sandbox keeps about itself, read by tests and benchmarks through `/_sandbox/stats`."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any


class Stats:
    """Plain counters plus API calls per endpoint, one instance per world.

    Everything runs on the sandbox's event loop, so no locking is needed.
    """

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.api_calls: defaultdict[str, Counter[str]] = defaultdict(Counter, openstack=Counter(), github=Counter())
        """Per side (`openstack`, `github`, and `openstack-two` once the second cloud is called)."""
        self.injected_errors: defaultdict[str, Counter[str]] = defaultdict(
            Counter, openstack=Counter(), github=Counter()
        )
        self.in_flight: defaultdict[str, Counter[str]] = defaultdict(Counter)
        """Requests each endpoint is answering now, per side (received, not yet answered: a fault's latency
        included)."""
        self.peak_in_flight: defaultdict[str, Counter[str]] = defaultdict(Counter)
        """The most requests each endpoint answered at once, per side: how many calls a client sends in parallel."""

    def incr(self, name: str, amount: int = 1) -> None:
        self.counters[name] += amount

    def api_call(self, side: str, endpoint: str) -> None:
        self.api_calls[side][endpoint] += 1

    def began(self, side: str, endpoint: str) -> None:
        """A request to `endpoint` is being answered (`ended` follows, whatever the answer)."""
        now = self.in_flight[side][endpoint] = self.in_flight[side][endpoint] + 1
        self.peak_in_flight[side][endpoint] = max(self.peak_in_flight[side][endpoint], now)

    def ended(self, side: str, endpoint: str) -> None:
        self.in_flight[side][endpoint] -= 1

    def injected_error(self, side: str, endpoint: str) -> None:
        """An endpoint fault answered a call with an error instead of the handler."""
        self.counters[f"{side}_injected_errors"] += 1
        self.injected_errors[side][endpoint] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "counters": dict(sorted(self.counters.items())),
            "api_calls": {side: dict(sorted(calls.items())) for side, calls in self.api_calls.items()},
            "injected_errors": {side: dict(sorted(calls.items())) for side, calls in self.injected_errors.items()},
            "in_flight": {
                side: {key: n for key, n in sorted(calls.items()) if n} for side, calls in self.in_flight.items()
            },
            "peak_in_flight": {side: dict(sorted(calls.items())) for side, calls in self.peak_in_flight.items()},
        }

    def reset(self) -> None:
        self.counters.clear()
        for calls in (*self.api_calls.values(), *self.injected_errors.values(), *self.peak_in_flight.values()):
            calls.clear()
