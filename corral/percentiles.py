"""Nearest-rank percentiles: the figures corral states are values that occurred, never interpolations."""

from __future__ import annotations

import math
from collections.abc import Sequence


def nearest_rank(ordered: Sequence[float], percent: float) -> float:
    """The `percent`th percentile of sorted values, nearest rank: a value that occurred (the p95 of 20 is the
    19th smallest). What `corral simulate` states waits by, measured boots are summed up by, and `min_idle:
    {auto: ...}` takes a pool's boot time at."""
    return ordered[min(max(math.ceil(percent / 100 * len(ordered)), 1), len(ordered)) - 1]
