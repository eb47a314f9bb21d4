"""What a simulation is asked to assume: boot times, boot failures, seed, quota and how long it runs around the
trace. Plain values, light to import: the command reads them without loading the engine."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corral.percentiles import nearest_rank

LEAD_S = 600.0
DRAIN_S = 3600.0
P95_Z = 1.6448536269514722
"""The standard normal's 95th percentile: a log-normal's p95 is its median times exp(sigma * P95_Z)."""


@dataclass(frozen=True)
class BootTimes:
    """How long a server takes from its create to its runner online: fixed (`p95` None, or equal to `p50`),
    or log-normal with that median and 95th percentile."""

    p50: float
    p95: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.p50) and self.p50 >= 0):
            raise ValueError("a boot time is a finite number of seconds, 0 or more")
        if self.p95 is not None and not (math.isfinite(self.p95) and self.p95 >= self.p50):
            raise ValueError("the boot time's p95 must be finite and at least its p50")

    @classmethod
    def of(cls, samples: Sequence[float]) -> BootTimes:
        """The median and 95th percentile (nearest rank) of measured boots."""
        ordered = sorted(samples)
        if not ordered:
            raise ValueError("no boot was measured")
        p50, p95 = (nearest_rank(ordered, percent) for percent in (50, 95))
        return cls(p50, p95)

    def sample(self, rng: random.Random) -> float:
        """One boot time; fixed boot times draw nothing, so they leave the random sequence alone."""
        if self.p95 is None or self.p95 == self.p50 or self.p50 == 0:
            return self.p50
        sigma = math.log(self.p95 / self.p50) / P95_Z
        return rng.lognormvariate(math.log(self.p50), sigma)


@dataclass(frozen=True)
class Settings:
    """How the world behaves, and how long the simulation runs around the trace."""

    boot: BootTimes = field(default_factory=lambda: BootTimes(60.0))
    boot_by_pool: Mapping[str, BootTimes] = field(default_factory=dict)
    """Pools whose boots differ from `boot` (as a store's history measured them)."""
    boot_failure_rate: float = 0.0
    seed: int = 0
    lead: float = LEAD_S
    """Seconds the engine runs before the first job."""
    drain: float = DRAIN_S
    """Seconds after the last job is queued the simulation waits at most for jobs still queued or running."""
    instances: int | None = None
    """Each cloud's instance quota (None: unlimited)."""
