"""How many warm runners a pool with `min_idle: {auto: ...}` keeps: a pure function of its history and the time.

The model, in one paragraph. A job waits no longer than `target_wait` if it finds a warm runner, or if a runner
started when an earlier job took a warm one comes online within `target_wait` of it. Such a replacement is online
a boot time (`b`, the pool's recent boots at the chosen percentile) and a moment (`REACTION_S`: the webhook, the
pass) after the job that took the warm runner; so a job finds a runner in time when, counting itself, no more
jobs than there are warm runners were queued in the `W = b + 1 s - target_wait` seconds before it (of a matrix
queued in one second, the n-th job counts n). Each job of the history thus says how many warm runners it needed.
From the same kind of day (weekday or weekend, by UTC date) over the last 14 days, a day's weight halving every 7
days, corral makes a **plan for the day**: in each quarter hour, k warm runners leave the jobs that needed more
than k to cold boots; the plan adds the runners that spare the most jobs per runner first, across the whole day,
until the jobs left to cold boots are no more than the percentile allows over the whole day. So one warm runner
at night, which spares few jobs, is left out before the fifth at 10:00, which spares many, and a matrix that
comes at a different time each day is left to cold boots if the day can afford it. The plan is made once a
quarter hour and is kept for the quarter hours from now until one boot from now (the 9:00 ramp is warmed for at
8:59). Beside it, the **last 15 minutes** count, with a matrix as one arrival: a surge of separate jobs is
answered within minutes. The pool keeps the larger of the two, then `min` and `max` bound it.

What it cannot foresee: a burst with no precedent at this time of day (the first one is served by cold boots),
a shift in the daily shape until a week or two of history carries it, and boots slower than the recent ones.
With fewer than `MIN_BOOTS` boots measured it keeps `min` and learns.

All times are seconds since the epoch (UTC), so that the same history gives the same answer anywhere.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from corral.percentiles import nearest_rank

DAY_S = 86_400.0
SLOT_S = 15 * 60.0
"""A plan's step: one number of warm runners per quarter hour of the day."""
SLOTS = int(DAY_S // SLOT_S)
RECENT_S = 15 * 60.0
"""The recent sample: the jobs of the last 15 minutes."""
LOOKBACK_DAYS = 14
SPREAD_SLOTS = 2
"""A job of the history speaks for the quarter hours within 30 minutes of its own, a share each."""
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
    """Warm runners the last 15 minutes need, at the percentile (the jobs of one second as one arrival)."""
    usual_need: int
    """Warm runners the day plan keeps from now until one boot from now."""
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


DayPlan = tuple[int, ...]
"""Warm runners for each quarter hour of a day (`SLOTS` of them), from midnight UTC."""


class DayPlans:
    """One pool's day plans, made at most once a quarter hour: a plan reads two weeks of jobs, a pass reads
    none. A plan is made with the boot time and settings of the first forecast of its quarter hour."""

    def __init__(self) -> None:
        self._made_in: tuple[int, AutoWarm] | None = None
        self._plans: dict[float, DayPlan] = {}

    def plan(self, arrivals: Sequence[float], day_start: float, window: float, now: float, auto: AutoWarm) -> DayPlan:
        made_in = (int(now // SLOT_S), auto)
        if made_in != self._made_in:
            self._made_in, self._plans = made_in, {}
        if day_start not in self._plans:
            self._plans[day_start] = plan_day(arrivals, day_start, window, auto)
        return self._plans[day_start]


def forecast(
    arrivals: Sequence[float], boots: Sequence[float], now: float, auto: AutoWarm, plans: DayPlans | None = None
) -> WarmForecast:
    """The warm runners to keep at `now`, from the pool's job `arrivals` (sorted) and its `boots` (seconds
    each, oldest first); `plans` keeps the day plans between calls (without it, each call makes its own)."""
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
    recent = _recent_need(arrivals, now, window, auto.percentile)
    plans = plans if plans is not None else DayPlans()
    # The quarter hours from now until a runner started now is online: warm before the ramp, not at it.
    planned = max(
        plans.plan(arrivals, _day_start(slot * SLOT_S), window, now, auto)[int(slot % SLOTS)]
        for slot in range(int(now // SLOT_S), int((now + boot_s) // SLOT_S) + 1)
    )
    wanted = min(max(recent, planned, auto.minimum), auto.maximum)
    basis = "the last 15 minutes" if recent >= planned else "the plan for this time of day"
    reason = (
        f"{max(recent, planned)} warm for p{auto.percentile:g} of jobs to find a runner within "
        f"{auto.target_wait_s:g}s ({basis}; boots p{auto.percentile:g} {boot_s:g}s)"
    )
    if wanted != max(recent, planned):
        reason += f", bounded to {wanted} by min {auto.minimum} / max {auto.maximum}"
    return WarmForecast(wanted, boot_s, window, recent_jobs, recent, planned, reason)


def plan_day(arrivals: Sequence[float], day_start: float, window: float, auto: AutoWarm) -> DayPlan:
    """The warm runners for each quarter hour of the day from `day_start`, from the same kind of day in the
    history: the fewest quarter-hour runners that leave no more than `100 - percentile` % of a day's jobs
    (weighted by day) needing more warm runners than their quarter hour has.

    A quarter hour's jobs are those of the `SPREAD_SLOTS` quarter hours either side too, each counted a share:
    a matrix that came at 10:05 yesterday says as much of 9:45 as of 10:15 today. With k warm runners, the
    jobs that needed more than k are left to cold boots; from 0 runners up, the steps of that curve's lower
    convex hull say how many jobs each added runner spares (a hull, because that curve need not bend one way:
    a quarter hour whose third runner spares little may see its fourth to tenth spare a matrix), and the plan
    takes the steps that spare the most jobs per runner first, each quarter hour's in order, until the day is
    within its allowance.
    """
    if not arrivals:
        return (0,) * SLOTS
    first_day = _day_start(arrivals[0])
    weekend = _weekend(day_start)
    by_slot: list[dict[int, float]] = [{} for _ in range(SLOTS)]
    """Per quarter hour, the weighted jobs that needed exactly k warm runners, by k."""
    days_weight = 0.0
    share = 1.0 / (2 * SPREAD_SLOTS + 1)
    for days in range(1, LOOKBACK_DAYS + 1):
        start = day_start - days * DAY_S
        if start < first_day or _weekend(start) != weekend:
            continue
        weight = 0.5 ** (days / HALF_LIFE_DAYS)
        days_weight += weight
        for at, need in _needs(arrivals, start, start + DAY_S, window):
            home = min(int((at - start) // SLOT_S), SLOTS - 1)
            for slot in range(max(home - SPREAD_SLOTS, 0), min(home + SPREAD_SLOTS, SLOTS - 1) + 1):
                by_slot[slot][need] = by_slot[slot].get(need, 0.0) + weight * share
    if not days_weight:
        return (0,) * SLOTS
    steps: list[tuple[float, int, int, float]] = []
    """(jobs spared per runner, quarter hour, runners after the step, jobs spared), in jobs of a day."""
    jobs = 0.0
    for slot, needs in enumerate(by_slot):
        cold = [0.0] * (min(max(needs, default=0), auto.maximum) + 1)
        """`cold[k]`: the jobs left to cold boots with k warm runners."""
        left = sum(needs.values()) / days_weight
        jobs += left
        for k in range(len(cold)):
            left -= needs.get(k, 0.0) / days_weight
            cold[k] = max(left, 0.0)
        steps += _hull_steps(slot, cold)
    steps.sort(key=lambda step: (-step[0], step[1], step[2]))
    left_cold, allowed = jobs, jobs * (100.0 - auto.percentile) / 100.0
    plan = [0] * SLOTS
    for _, slot, runners, spared in steps:
        if left_cold <= allowed + 1e-9:
            break
        plan[slot] = runners
        left_cold -= spared
    return tuple(plan)


def _hull_steps(slot: int, cold: list[float]) -> list[tuple[float, int, int, float]]:
    """The steps of the lower convex hull of `(k, cold[k])` from k = 0: each as (jobs spared per runner,
    `slot`, runners after it, jobs spared). Along a hull each step spares fewer per runner than the last. The
    rate is rounded to a billionth so that equal ones sort by quarter hour, whatever the float sums did."""
    hull = [0]
    for k in range(1, len(cold)):
        # Drop the last corner while it lies above the line from the one before it to k (one on the line is
        # kept: a step of one runner at a time can stop anywhere along it).
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (cold[b] - cold[a]) * (k - a) > (cold[k] - cold[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(k)
    return [
        (round((cold[a] - cold[b]) / (b - a), 9), slot, b, cold[a] - cold[b])
        for a, b in itertools.pairwise(hull)
        if cold[a] > cold[b]
    ]


def _needs(arrivals: Sequence[float], start: float, end: float, window: float) -> list[tuple[float, int]]:
    """Each job queued in [start, end), with the warm runners it needed: itself and the jobs queued in the
    `window` seconds before it, those of the same moment ahead of it in the queue included."""
    first, last = bisect.bisect_left(arrivals, start), bisect.bisect_left(arrivals, end)
    return [
        (arrivals[index], index - bisect.bisect_right(arrivals, arrivals[index] - window) + 1)
        for index in range(first, last)
    ]


def _recent_need(arrivals: Sequence[float], now: float, window: float, percentile: float) -> int:
    """The percentile of the needs of the last 15 minutes' jobs, the jobs of one second counted as one: a
    matrix is served by cold boots once it has come, and keeping its size warm after it spares no job."""
    seconds = sorted({math.floor(at) for at in arrivals[bisect.bisect_left(arrivals, now - RECENT_S - window) :]})
    needs = sorted(need for _, need in _needs(seconds, now - RECENT_S, math.nextafter(now, math.inf), window))
    return int(nearest_rank(needs, percentile)) if needs else 0


def _count(arrivals: Sequence[float], start: float, end: float) -> int:
    return bisect.bisect_left(arrivals, end) - bisect.bisect_left(arrivals, start)


def _day_start(at: float) -> float:
    return at - at % DAY_S


def _weekend(at: float) -> bool:
    """Saturday or Sunday, by UTC date (the epoch began on a Thursday)."""
    return int(at // DAY_S + 3) % 7 >= 5
