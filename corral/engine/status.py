"""What each pool looks like after its last pass: for the API, the dashboard, the gauges and the status table.

Each pass leaves a snapshot in memory (the API reads it without touching the database) and writes the
pool's status row only when what it says changed, so a quiet system writes nothing.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from corral.clock import SYSTEM_CLOCK, ClockLike, as_clock
from corral.cloud.quota import ServerCost
from corral.engine.quota import MAX_WAITING_S
from corral.metrics import RUNNERS
from corral.model import RunnerState
from corral.store import Store, pools
from corral.warmth import WarmForecast


@dataclass(frozen=True)
class PoolSnapshot:
    """One pool at the end of its last pass."""

    name: str
    states: Counter[RunnerState] = field(default_factory=Counter)
    queued_jobs: int = 0
    held_jobs: int = 0
    desired: int = 0
    min_idle: int | None = None
    """The warm runners its last pass kept (None: no pass here yet, or a snapshot read from the database)."""
    warm_forecast: WarmForecast | None = None
    """`min_idle: {auto: ...}`'s last forecast for it, and its reasons."""
    ready: bool = False
    reason: str | None = None
    removed: bool = False
    quota_short: tuple[str, ...] = ()
    """The quota resources that held some of the runners the pool wanted back on its last pass."""
    scale_set_id: int | None = None
    """A scale-set pool held by another replica: its scale set, as the holder recorded it."""
    session_open: bool = False
    """...and whether the holder has a session open on it."""
    server_cost: ServerCost | None = None
    """What one of its servers costs of the quota, as its check found it."""
    quota_waiting: int = 0
    """Runners for queued jobs the quota held back on its last pass..."""
    quota_waiting_cloud: str | None = None
    """...in that cloud's quota."""


QUOTA_RENEWAL_S = MAX_WAITING_S / 3
"""A pool still waiting for quota says so again this often, or other replicas take its wait as lapsed."""


class StatusPublisher:
    def __init__(self, store: Store, clock: ClockLike = SYSTEM_CLOCK) -> None:
        self._store = store
        self._clock = as_clock(clock)
        self.snapshots: dict[str, PoolSnapshot] = {}
        self._published: dict[str, tuple[int, bool, str | None, bool]] = {}
        self._quota_published: dict[str, tuple[ServerCost | None, int, str | None, float]] = {}
        self._cost_written: dict[str, ServerCost] = {}
        self._warm_published: dict[str, dict[str, Any] | None] = {}

    async def publish(self, snapshot: PoolSnapshot, generation: int) -> None:
        self.snapshots[snapshot.name] = snapshot
        for state in RunnerState:
            if state is not RunnerState.DELETED:
                RUNNERS.labels(snapshot.name, state.value).set(snapshot.states[state])
        await self._publish_quota(snapshot)
        await self._publish_warm(snapshot)
        row = (generation, snapshot.ready, snapshot.reason, snapshot.removed)
        if self._published.get(snapshot.name) == row:
            return
        await self._store.run(
            pools.publish,
            snapshot.name,
            generation=generation,
            ready=snapshot.ready,
            reason=snapshot.reason,
            removed=snapshot.removed,
            now=self._clock.now(),
        )
        self._published[snapshot.name] = row

    async def _publish_warm(self, snapshot: PoolSnapshot) -> None:
        """An auto pool's warm runners and forecast, for the replicas that show it, when they changed (the
        forecast's figures change at most every `engine.warmth.REFRESH_S`); nothing for a pool that is not auto."""
        forecast = snapshot.warm_forecast
        warm = {"min_idle": snapshot.min_idle, "forecast": asdict(forecast)} if forecast is not None else None
        if self._warm_published.get(snapshot.name) == warm:
            return
        await self._store.run(pools.set_warm, snapshot.name, warm, now=self._clock.now())
        self._warm_published[snapshot.name] = warm

    async def _publish_quota(self, snapshot: PoolSnapshot) -> None:
        """What replicas sharing the project plan with: the pool's server cost and its wait, when either
        changed (and the wait again now and then while it lasts)."""
        cost, waiting, cloud, now = (
            snapshot.server_cost,
            snapshot.quota_waiting,
            snapshot.quota_waiting_cloud,
            self._clock.monotonic(),
        )
        last = self._quota_published.get(snapshot.name)
        renew = waiting and last is not None and now - last[3] > QUOTA_RENEWAL_S
        if last is not None and last[:3] == (cost, waiting, cloud) and not renew:
            return
        await self._store.run(
            pools.set_quota,
            snapshot.name,
            server_cost=asdict(cost) if cost else None,
            waiting=waiting,
            waiting_at=self._clock.now(),
            waiting_cloud=cloud,
            now=self._clock.now(),
        )
        self._quota_published[snapshot.name] = (cost, waiting, cloud, now)
        if cost is not None:
            self._cost_written[snapshot.name] = cost

    async def cost_before_creates(self, name: str, cost: ServerCost) -> None:
        """Write the pool's server cost now unless it is already written: its runners are about to be, and
        replicas sharing the project must find the cost of any runner of it they read (the snapshot that
        carries it is published only after the pass that creates them)."""
        if self._cost_written.get(name) == cost:
            return
        await self._store.run(pools.set_server_cost, name, asdict(cost), now=self._clock.now())
        self._cost_written[name] = cost

    async def forget(self, name: str) -> None:
        """A removed pool with nothing left: no row, no gauges, no snapshot."""
        self.snapshots.pop(name, None)
        self._published.pop(name, None)
        self._quota_published.pop(name, None)
        self._cost_written.pop(name, None)
        for state in RunnerState:
            with contextlib.suppress(KeyError):
                RUNNERS.remove(name, state.value)
        await self._store.run(pools.forget, name)
