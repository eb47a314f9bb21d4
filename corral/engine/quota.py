"""Planning creates within the project's quota: never send a create the headroom shows the quota refusing.

Each look reads the headroom (`Observation.headroom`). Between looks, every create this replica starts
holds its server's cost against it (a reservation), until a later reading can be trusted to include it:
Nova counts a server in its usage from the moment it accepts the create, and a failed create frees what it
held, so a reservation ends once its create has finished and a reading begun after that arrives. One that
somehow never finishes (a create cancelled before it ran) ends after `MAX_RESERVATION_S` instead of holding
the headroom forever.

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

    def left(self) -> Headroom | None:
        """The last reading less what this replica's creates since then hold."""
        if self._headroom is None:
            return None
        held = {f.name: sum(getattr(r.cost, f.name) for r in self._reserved.values()) for f in fields(Headroom)}
        return Headroom(
            **{
                name: None if value is None else max(0, value - held[name])
                for name, value in ((f.name, getattr(self._headroom, f.name)) for f in fields(Headroom))
            }
        )

    def claim(self, cost: ServerCost | None, wanted: int) -> tuple[list[str], list[str]]:
        """Reserve room for up to `wanted` servers of `cost`; returns a key per server that fits (bind each to
        its runner, or release it) and the resources that held the rest back (empty when all fit)."""
        left = self.left()
        if cost is None or left is None:
            fits, short = wanted, []
        else:
            room, limited_by = servers_that_fit(left, cost)
            fits = wanted if room is None else min(wanted, room)
            short = limited_by if fits < wanted else []
        now = self._clock()
        keys = []
        for _ in range(fits):
            key = f"claim:{next(self._claims)}"
            if cost is not None:
                self._reserved[key] = _Reservation(cost, now)
            keys.append(key)
        return keys, short

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
