"""How many warm runners a pool with `min_idle: {auto: ...}` keeps: a pure function of its history and the time.

The model, in one paragraph. A job waits no longer than `target_wait` if it finds a warm runner, or if a
runner started when an earlier job took a warm one comes online within `target_wait` of it. Such a
replacement is online a boot time (`b`, the pool's recent boots at the chosen percentile) and a moment
(`REACTION_S`: the webhook, the pass) after the job that took the warm runner; so a job finds a runner in time
when, counting itself, no more jobs than there are warm runners arrived in the `W = b + 1 s - target_wait`
seconds before it. Each job of the history thus says how many warm
runners it needed: the jobs in its `W`. The pool keeps the chosen percentile of that need, taken over two
samples, and the larger of the two: the jobs of the **last 15 minutes** (a surge is seen within minutes), and
the jobs of the **next 15 minutes of the same time of day** on each of the last 14 days of the same kind
(weekday or weekend, by UTC date), a day's weight halving every 7 days (the 9:00 ramp is warmed for at 8:55).
A matrix of 20 jobs in one second needs 20 runners, and says so. Then `min` and `max` bound it.

What it cannot foresee: a burst with no precedent at this time of day (the first one is served by cold boots
and raises the count from then), a shift in the daily shape until a week or two of history carries it, and
boots slower than the recent ones. With fewer than `MIN_BOOTS` boots measured it keeps `min` and learns.

All times are seconds since the epoch (UTC), so that the same history gives the same answer anywhere.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from corral.percentiles import nearest_rank

DAY_S = 86_400.0
RECENT_S = 15 * 60.0
"""The recent sample: the jobs of the last 15 minutes."""
AHEAD_S = 15 * 60.0
"""The usual sample: on each past day, the jobs of the 15 minutes from this time of day."""
LOOKBACK_DAYS = 14
HALF_LIFE_DAYS = 7.0
"""A past day's weight halves every 7 days: last week's Monday counts twice the Monday before."""
MIN_BOOTS = 5
"""Boots measured before the pool's boot time is trusted: until then, auto keeps `min`."""
BOOTS_KEPT = 200
"""The most recent boots the boot time is taken from."""
REACTION_S = 1.0
"""From a job taking a warm runner to its replacement's create: the webhook, the pass (about half a second)."""


@dataclass(frozen=True)
class AutoWarm:
    """`min_idle: {auto: ...}` as the forecast reads it."""

    target_wait_s: float
    percentile: float
    minimum: int
    maximum: int


@dataclass(frozen=True)
class WarmForecast:
    """How many warm runners auto keeps now, and the figures it took that from."""

    wanted: int
    boot_s: float | None
    """The pool's boot time at the chosen percentile (None: fewer than `MIN_BOOTS` boots measured)."""
    window_s: float
    """`boot_s + REACTION_S - target_wait`: jobs closer together than this compete for the warm runners (0: none
    do)."""
    recent_jobs: int
    """Jobs of the pool in the last 15 minutes."""
    recent_need: int
    """Warm runners the recent sample needs, at the percentile."""
    usual_need: int
    """Warm runners the same time of day on recent days needs, at the percentile."""
    reason: str
    """One line: why this many."""

    @property
    def rate_per_minute(self) -> float:
        """Jobs a minute over the last 15 minutes."""
        return round(self.recent_jobs / (RECENT_S / 60.0), 2)

    def figures(self) -> dict[str, float]:
        """Its numbers, by the `figure` label of the `corral_pool_auto_warm` gauge (a boot not yet known: 0)."""
        return {
            "wanted": self.wanted,
            "boot_seconds": self.boot_s or 0.0,
            "rate_per_minute": self.rate_per_minute,
            "recent_need": self.recent_need,
            "usual_need": self.usual_need,
        }

    def as_dict(self) -> dict[str, object]:
        return {
            "wanted": self.wanted,
            "boot_s": self.boot_s,
            "window_s": self.window_s,
            "rate_per_minute": self.rate_per_minute,
            "recent_need": self.recent_need,
            "usual_need": self.usual_need,
            "reason": self.reason,
        }


def forecast(arrivals: Sequence[float], boots: Sequence[float], now: float, auto: AutoWarm) -> WarmForecast:
    """The warm runners to keep at `now`, from the pool's job `arrivals` (sorted) and its `boots` (seconds
    each, oldest first)."""
    recent_jobs = _count(arrivals, now - RECENT_S, math.nextafter(now, math.inf))
    recent_boots = list(boots)[-BOOTS_KEPT:]
    if len(recent_boots) < MIN_BOOTS:
        reason = f"learning: {len(recent_boots)} boot(s) measured of the {MIN_BOOTS} needed; keeping min"
        return WarmForecast(auto.minimum, None, 0.0, recent_jobs, 0, 0, reason)
    boot_s = round(nearest_rank(sorted(recent_boots), auto.percentile), 2)
    window = round(boot_s + REACTION_S - auto.target_wait_s, 2)
    if window <= 0:
        reason = f"a boot (p{auto.percentile:g} {boot_s:g}s) is within the target wait: no runner need be warm"
        return WarmForecast(auto.minimum, boot_s, 0.0, recent_jobs, 0, 0, reason)
    # The recent sample ends at `now` itself: the burst that woke this pass counts.
    recent = _need([(arrivals, now - RECENT_S, math.nextafter(now, math.inf), 1.0)], window, auto.percentile)
    today_is_weekend = _weekend(now)
    past_days = [
        (arrivals, now - days * DAY_S, now - days * DAY_S + AHEAD_S, 0.5 ** (days / HALF_LIFE_DAYS))
        for days in range(1, LOOKBACK_DAYS + 1)
        if _weekend(now - days * DAY_S) == today_is_weekend
    ]
    usual = _need(past_days, window, auto.percentile)
    wanted = min(max(recent, usual, auto.minimum), auto.maximum)
    basis = "the last 15 minutes" if recent >= usual else "this time of day on recent days"
    reason = (
        f"p{auto.percentile:g} of jobs found a runner within {auto.target_wait_s:g}s with {max(recent, usual)} warm "
        f"({basis}; boots p{auto.percentile:g} {boot_s:g}s)"
    )
    if wanted != max(recent, usual):
        reason += f", bounded to {wanted} by min {auto.minimum} / max {auto.maximum}"
    return WarmForecast(wanted, boot_s, window, recent_jobs, recent, usual, reason)


def _need(samples: list[tuple[Sequence[float], float, float, float]], window: float, percentile: float) -> int:
    """The weighted percentile, over the jobs queued in each sample's [start, end), of the jobs (counting
    itself) queued in the `window` seconds up to each: the warm runners that job needed."""
    needs: list[tuple[int, float]] = []
    for arrivals, start, end, weight in samples:
        first, last = bisect.bisect_left(arrivals, start), bisect.bisect_left(arrivals, end)
        for index in range(first, last):
            at = arrivals[index]
            # Jobs in (at - window, at]: those of the same moment after it count too (a matrix comes at once).
            upto = bisect.bisect_right(arrivals, at)
            needs.append((upto - bisect.bisect_right(arrivals, at - window), weight))
    if not needs:
        return 0
    needs.sort()
    total = sum(weight for _, weight in needs)
    wanted = total * percentile / 100.0
    running = 0.0
    for need, weight in needs:
        running += weight
        if running >= wanted - 1e-9:
            return need
    return needs[-1][0]


def _count(arrivals: Sequence[float], start: float, end: float) -> int:
    return bisect.bisect_left(arrivals, end) - bisect.bisect_left(arrivals, start)


def _weekend(at: float) -> bool:
    """Saturday or Sunday, by UTC date (the epoch began on a Thursday)."""
    return int(at // DAY_S + 3) % 7 >= 5
