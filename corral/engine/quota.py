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

Replicas sharing a project plan with each other's creates too: a pool's runners are written under one
lock for the project (`store.quota`), after reading the runners of pools other replicas hold whose
servers this replica's reading may not count, at the cost their holders published. Their waits come from
the pools' status rows, read with every look. A refusal no replica could foresee backs the pool off as
before (`quota_retry`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection

from corral.clock import SYSTEM_CLOCK, ClockLike, as_clock
from corral.cloud.quota import Headroom, ServerCost, servers_that_fit
from corral.store import quota as shared

MAX_RESERVATION_S = 600.0
"""A create takes seconds; a reservation older than this is dropped whatever became of its create."""
MAX_WAITING_S = 300.0
"""A waiting pool claims again after every look; a wait not renewed for this long (its pool was removed,
its jobs went elsewhere) no longer holds lower-priority pools back."""
CLOCK_SLACK_S = 2.0
"""Replicas' clocks may differ by this much: a server another replica made this long before a reading began
is still counted as made after it."""

BARE_SERVER = ServerCost(cores=0, ram_mb=0, instances=1, ports=1)
"""What another replica's runner counts at when its pool's cost cannot be read: at least its instance."""


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
    def __init__(self, clock: ClockLike = SYSTEM_CLOCK) -> None:
        self._clock = as_clock(clock)
        self._headroom: Headroom | None = None
        self._reserved: dict[str, _Reservation] = {}
        self._held: Counter[ServerCost] = Counter()
        """`_reserved` counted by cost, kept as reservations come and go: a claim reads it instead of counting
        the hundreds of reservations a busy pool makes between two looks (a look's interval of creates)."""
        self._claims = itertools.count()
        self._waiting: dict[str, _Waiting] = {}
        self._others_waiting: dict[str, _Waiting] = {}
        """Pools other replicas hold that wait for quota, as their status rows said at the last look."""
        self.read_began_wall: datetime | None = None
        """When the last reading began, by the wall clock other replicas' runner events are stamped with."""
        self.looked = False
        """Whether a look has read the quota yet (or tried to: a failed reading plans without it). Until the
        first, a pass plans nothing rather than creates the quota may refuse: after a start, passes run before
        the first look has read anything."""

    def refresh(self, headroom: Headroom | None, read_began_at: float, read_began_wall: datetime | None = None) -> None:
        """A new reading (None: the quota could not be read, so nothing is held back). `read_began_at` is on
        this budget's clock: creates finished before it are in the reading."""
        self._headroom = headroom
        self.read_began_wall = read_began_wall
        self.looked = True
        now = self._clock.monotonic()
        self._reserved = {
            key: held
            for key, held in self._reserved.items()
            if not (held.finished_at is not None and held.finished_at < read_began_at)
            and now - held.made_at < MAX_RESERVATION_S
        }
        self._held = Counter(held.cost for held in self._reserved.values())
        self._waiting = {pool: wait for pool, wait in self._waiting.items() if now - wait.at < MAX_WAITING_S}

    def others_waiting(self, waits: Iterable[tuple[str, int, ServerCost, int, float]]) -> None:
        """The pools other replicas hold that wait for quota: (pool, priority, server cost, runners held back,
        seconds since their holder said so). Replaces what the last look's status rows said."""
        now = self._clock.monotonic()
        self._others_waiting = {
            pool: _Waiting(priority, cost, count, now - age)
            for pool, priority, cost, count, age in waits
            if count > 0 and age < MAX_WAITING_S
        }

    def _all_waiting(self) -> dict[str, _Waiting]:
        now = self._clock.monotonic()
        others = {pool: wait for pool, wait in self._others_waiting.items() if now - wait.at < MAX_WAITING_S}
        return {**others, **self._waiting}

    def left(self, *, below: int | None = None, excluding: Collection[str] = ()) -> Headroom | None:
        """The last reading less what this replica's creates since then hold (but the claims `excluding`), and,
        for a pool of priority `below`, less what waiting pools of higher priority need."""
        if self._headroom is None:
            return None
        reserved = self._held.copy()
        for key in set(excluding):
            if (held := self._reserved.get(key)) is not None:
                reserved[held.cost] -= 1
        costs = [(cost, count) for cost, count in reserved.items() if count > 0]
        if below is not None:
            costs += [(wait.cost, wait.count) for wait in self._all_waiting().values() if wait.priority > below]
        return self._headroom.less(costs)

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
        now = self._clock.monotonic()
        held_back = min(for_jobs, wanted) - fits
        self._waiting.pop(pool, None)
        if cost is not None:
            self.held_back(pool, priority, cost, held_back)
        keys = []
        for _ in range(fits):
            key = f"claim:{next(self._claims)}"
            if cost is not None:
                self._reserved[key] = _Reservation(cost, now)
                self._held[cost] += 1
            keys.append(key)
        return keys, short

    def held_back(self, pool: str, priority: int, cost: ServerCost, count: int) -> None:
        """`count` more of the pool's runners for queued jobs found no room: the pool waits for them."""
        if count <= 0:
            return
        before = self._waiting.get(pool)
        self._waiting[pool] = _Waiting(priority, cost, count + (before.count if before else 0), self._clock.monotonic())

    def waiting(self, pool: str) -> int:
        """Runners for queued jobs the quota holds back for `pool` (a pool this replica holds)."""
        wait = self._waiting.get(pool)
        return wait.count if wait else 0

    def not_waiting(self, pool: str) -> None:
        """The pool wants no new runner now: it no longer waits for the quota."""
        self._waiting.pop(pool, None)

    def outranked(self, pool: str, priority: int) -> int:
        """How many runners for queued jobs pools of higher priority than `pool` wait for: this pool keeps that
        many fewer warm runners, so that its idle servers make room for theirs."""
        waiting = self._all_waiting().items()
        return sum(wait.count for name, wait in waiting if name != pool and wait.priority > priority)

    def bind(self, key: str, runner_id: str) -> None:
        """The claim became this runner's create."""
        held = self._reserved.pop(key, None)
        if held is not None:
            if (replaced := self._reserved.get(runner_id)) is not None:
                self._held[replaced.cost] -= 1
            self._reserved[runner_id] = held

    def reserved_runners(self) -> list[str]:
        """The runners whose creates this budget reserved room for and no reading has counted yet."""
        return [key for key in self._reserved if not key.startswith("claim:")]

    def release(self, key: str) -> None:
        """A claim no runner was written for."""
        held = self._reserved.pop(key, None)
        if held is not None:
            self._held[held.cost] -= 1

    def finished(self, runner_id: str) -> None:
        """The runner's create was answered (a server, or a refusal): the next reading tells the rest."""
        held = self._reserved.get(runner_id)
        if held is not None and held.finished_at is None:
            held.finished_at = self._clock.monotonic()


class SharedRoom:
    """For `runners.add`, on replicas sharing a project: how many servers of `cost` fit in `left` (this
    replica's view, its claims for them aside) once the servers of the pools `others` made since the reading
    began are counted too, this replica's own creates (`own`, already in `left`) aside. Every pool counts,
    those this replica holds included: a pool taken over from a replica that stalled past its lease may still
    have that replica's creates under way, which this one never reserved. Runs in the add's transaction, after
    the project's lock, and keeps how many it held back and what limited them."""

    def __init__(
        self,
        left: Headroom,
        cost: ServerCost,
        others: Collection[str],
        read_began: datetime,
        *,
        cloud: str,
        or_unrecorded: bool,
        own: Collection[str] = (),
    ) -> None:
        """`cloud`: the quota's cloud, whose runners count (`or_unrecorded`: and those older than the record of
        their cloud, which is the first)."""
        self._left, self._cost, self._others, self._own = left, cost, others, own
        self._cloud, self._or_unrecorded = cloud, or_unrecorded
        self._since = read_began - timedelta(seconds=CLOCK_SLACK_S)
        self.held_back = 0
        self.short: list[str] = []

    def __call__(self, connection: Connection, count: int) -> int:
        shared.take_turn(connection)
        made = shared.made_since(
            connection, self._others, self._since, self._cloud, self._or_unrecorded, excluding=self._own
        )
        costs = shared.server_costs(connection, made)
        taken = [(ServerCost.of(costs.get(pool)) or BARE_SERVER, servers) for pool, servers in made.items()]
        fits, limited_by = servers_that_fit(self._left.less(taken), self._cost)
        if fits is None or fits >= count:
            return count
        self.held_back, self.short = count - fits, limited_by
        return fits
