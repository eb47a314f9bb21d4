"""Each auto-warm pool's history, kept in memory and topped up from the store, and its latest forecast.

`corral.warmth.forecast` decides from a pool's job arrivals and boots; this part gathers them. The first
forecast of a pool reads its last `LOOKBACK_DAYS` of jobs and a week of boots (those timed by a job that waited
for its runner, exact, and those timed to the pass that saw the runner online, the fallback); after that, at
most every `REFRESH_S`, only what the store gained since (by the time corral heard of each job, the time each
runner came online, and the time each job started), so a pass costs no query of the pool's history. A replica
that takes a pool over, or a restart, reads it afresh.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from corral.metrics import WARM_WANTED
from corral.store import Store, jobs, runners
from corral.warmth import BOOTS_KEPT, DAY_S, LOOKBACK_DAYS, MIN_BOOTS, AutoWarm, DayPlans, WarmForecast, forecast

REFRESH_S = 10.0
"""How stale a pool's history may be when a pass forecasts from it: a surge shows within seconds."""
BOOT_HISTORY = timedelta(days=7)
"""How far back a pool's boots are first read (the most recent `BOOTS_KEPT` are kept)."""
T = TypeVar("T")

KEPT_S = (LOOKBACK_DAYS + 1) * DAY_S
"""Arrivals older than this (before now) no forecast reads: dropped. Today's plan reads the 14 whole days before
today's midnight."""


@dataclass
class _Cursor:
    """Where the last read of a growing table stopped: its newest time, and the rows read at that time (a
    row written later at the same time is read next time; those are not read twice)."""

    at: datetime | None = None
    seen: set[object] = field(default_factory=set)

    def fresh(self, rows: Sequence[tuple[object, datetime, T]]) -> list[T]:
        """The values of `rows` (key, time, value; read from `at` on, in time order) not read before; the
        cursor moves past them."""
        values = []
        for key, at, value in rows:
            if at == self.at and key in self.seen:
                continue
            values.append(value)
            if self.at is None or at > self.at:
                self.at, self.seen = at, {key}
            else:
                self.seen.add(key)
        return values


@dataclass
class _History:
    arrivals: list[float] = field(default_factory=list)
    """When each job was queued, seconds since the epoch, sorted."""
    boots: deque[float] = field(default_factory=lambda: deque(maxlen=BOOTS_KEPT))
    """Boots timed to the pass that saw each runner online (late by up to a look interval)."""
    waited: deque[float] = field(default_factory=lambda: deque(maxlen=BOOTS_KEPT))
    """Boots timed by the job that waited for each (exact): preferred once there are `MIN_BOOTS`."""
    heard: _Cursor = field(default_factory=_Cursor)
    online: _Cursor = field(default_factory=_Cursor)
    started: _Cursor = field(default_factory=_Cursor)
    read_at: datetime | None = None
    plans: DayPlans = field(default_factory=DayPlans)


class WarmForecaster:
    """The warm runners each `min_idle: {auto: ...}` pool wants now, from its own history."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._histories: dict[str, _History] = {}
        self.latest: dict[str, WarmForecast] = {}
        """Each pool's last forecast: what `/api/v1/pools` shows."""

    async def forecast(self, pool: str, auto: AutoWarm, now: datetime) -> WarmForecast:
        history = self._histories.setdefault(pool, _History())
        if history.read_at is None or (now - history.read_at).total_seconds() >= REFRESH_S:
            await self._read(pool, history, now)
        boots = history.waited if len(history.waited) >= MIN_BOOTS else history.boots
        found = forecast(history.arrivals, boots, now.timestamp(), auto, history.plans)
        self.latest[pool] = found
        for figure, value in found.figures().items():
            WARM_WANTED.labels(pool, figure).set(value)
        return found

    def forget(self, pool: str) -> None:
        """Drop a pool's history: it is no longer auto, or no longer configured."""
        self._histories.pop(pool, None)
        last = self.latest.pop(pool, None)
        for figure in last.figures() if last is not None else ():
            WARM_WANTED.remove(pool, figure)

    async def _read(self, pool: str, history: _History, now: datetime) -> None:
        oldest = now - timedelta(seconds=KEPT_S)
        heard = await self.store.run(jobs.arrivals_since, pool, history.heard.at or oldest)
        for queued_at in history.heard.fresh(heard):
            bisect.insort(history.arrivals, queued_at.timestamp())
        del history.arrivals[: bisect.bisect_left(history.arrivals, oldest.timestamp())]
        waited = await self.store.run(runners.waited_boots_since, pool, history.started.at or now - BOOT_HISTORY)
        history.waited.extend(seconds for seconds in history.started.fresh(waited) if seconds is not None)
        # The exact boots never fall below `MIN_BOOTS` once there (they are only ever added to): from then on
        # the pass-timed ones are never used, and not read.
        if len(history.waited) < MIN_BOOTS:
            online = await self.store.run(runners.boots_since, pool, history.online.at or now - BOOT_HISTORY)
            history.boots.extend(history.online.fresh(online))
        history.read_at = now
