"""Planning creates within the project's quota: never send a create the headroom shows the quota refusing.

Each look reads the headroom (`Observation.headroom`). Between looks, every create this replica starts
holds its server's cost against it (a reservation), until a later reading can be trusted to include it:
Nova counts a server in its usage from the moment it accepts the create, and a failed create frees what it
held, so a reservation ends once its create has finished and a reading begun after that arrives. One that
somehow never finishes (a create cancelled before it ran) ends after `MAX_RESERVATION_S` instead of holding
the headroom forever.

When the headroom is short, pools of higher `priority` come first: a pool whose runners for queued jobs the
quota held back is noted as waiting, and until it is served, pools of lower priority may only use what its
wait leaves, and keep that many fewer warm runners (`min_idle`), so their idle servers make room for it.

This replica's own creates are all it can reserve: several replicas sharing a project may still overrun
the quota between two looks, and the refusal then backs the pool off as before (`quota_retry`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, fields

from corral.cloud.quota import Headroom, ServerCost, servers_that_fit

MAX_RESERVATION_S = 600.0
"""A create takes seconds; a reservation older than this is dropped whatever became of its create."""
MAX_WAITING_S = 300.0
"""A waiting pool claims again after every look; a wait not renewed for this long (its pool was removed,
its jobs went elsewhere) no longer holds lower-priority pools back."""


@dataclass(frozen=True)
class _Waiting:
    priority: int
    cost: ServerCost
    count: int
    """Runners for queued jobs the headroom held back."""
    at: float


@dataclass
class _Reservation:
    cost: ServerCost
    made_at: float
    finished_at: float | None = None


class QuotaBudget:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._headroom: Headroom | None = None
        self._reserved: dict[str, _Reservation] = {}
        self._claims = itertools.count()
        self._waiting: dict[str, _Waiting] = {}

    def refresh(self, headroom: Headroom | None, read_began_at: float) -> None:
        """A new reading (None: the quota could not be read, so nothing is held back). `read_began_at` is on
        this budget's clock: creates finished before it are in the reading."""
        self._headroom = headroom
        now = self._clock()
        self._reserved = {
            key: held
            for key, held in self._reserved.items()
            if not (held.finished_at is not None and held.finished_at < read_began_at)
            and now - held.made_at < MAX_RESERVATION_S
        }
        self._waiting = {pool: wait for pool, wait in self._waiting.items() if now - wait.at < MAX_WAITING_S}

    def left(self, *, below: int | None = None) -> Headroom | None:
        """The last reading less what this replica's creates since then hold, and, for a pool of priority
        `below`, less what waiting pools of higher priority need."""
        if self._headroom is None:
            return None
        costs = [(held.cost, 1) for held in self._reserved.values()]
        if below is not None:
            costs += [(wait.cost, wait.count) for wait in self._waiting.values() if wait.priority > below]
        held = {f.name: sum(getattr(cost, f.name) * count for cost, count in costs) for f in fields(Headroom)}
        return Headroom(
            **{
                name: None if value is None else max(0, value - held[name])
                for name, value in ((f.name, getattr(self._headroom, f.name)) for f in fields(Headroom))
            }
        )

    def claim(
        self, cost: ServerCost | None, wanted: int, *, pool: str = "", priority: int = 0, for_jobs: int = 0
    ) -> tuple[list[str], list[str]]:
        """Reserve room for up to `wanted` servers of `cost` for `pool`, the first `for_jobs` of them for queued
        jobs; returns a key per server that fits (bind each to its runner, or release it) and the resources
        that held the rest back (empty when all fit). Runners for jobs held back make the pool wait."""
        left = self.left(below=priority)
        if cost is None or left is None:
            fits, short = wanted, []
        else:
            room, limited_by = servers_that_fit(left, cost)
            fits = wanted if room is None else min(wanted, room)
            short = limited_by if fits < wanted else []
        now = self._clock()
        held_back = min(for_jobs, wanted) - fits
        if cost is not None and held_back > 0:
            self._waiting[pool] = _Waiting(priority, cost, held_back, now)
        else:
            self._waiting.pop(pool, None)
        keys = []
        for _ in range(fits):
            key = f"claim:{next(self._claims)}"
            if cost is not None:
                self._reserved[key] = _Reservation(cost, now)
            keys.append(key)
        return keys, short

    def not_waiting(self, pool: str) -> None:
        """The pool wants no new runner now: it no longer waits for the quota."""
        self._waiting.pop(pool, None)

    def outranked(self, pool: str, priority: int) -> int:
        """How many runners for queued jobs pools of higher priority than `pool` wait for: this pool keeps that
        many fewer warm runners, so that its idle servers make room for theirs."""
        return sum(wait.count for name, wait in self._waiting.items() if name != pool and wait.priority > priority)

    def bind(self, key: str, runner_id: str) -> None:
        """The claim became this runner's create."""
        held = self._reserved.pop(key, None)
        if held is not None:
            self._reserved[runner_id] = held

    def release(self, key: str) -> None:
        """A claim no runner was written for."""
        self._reserved.pop(key, None)

    def finished(self, runner_id: str) -> None:
        """The runner's create was answered (a server, or a refusal): the next reading tells the rest."""
        held = self._reserved.get(runner_id)
        if held is not None and held.finished_at is None:
            held.finished_at = self._clock()
