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

    def incr(self, name: str, amount: int = 1) -> None:
        self.counters[name] += amount

    def api_call(self, side: str, endpoint: str) -> None:
        self.api_calls[side][endpoint] += 1

    def injected_error(self, side: str, endpoint: str) -> None:
        """An endpoint fault answered a call with an error instead of the handler."""
        self.counters[f"{side}_injected_errors"] += 1
        self.injected_errors[side][endpoint] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "counters": dict(sorted(self.counters.items())),
            "api_calls": {side: dict(sorted(calls.items())) for side, calls in self.api_calls.items()},
            "injected_errors": {side: dict(sorted(calls.items())) for side, calls in self.injected_errors.items()},
        }

    def reset(self) -> None:
        self.counters.clear()
        for calls in (*self.api_calls.values(), *self.injected_errors.values()):
            calls.clear()
