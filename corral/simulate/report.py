"""What a simulation found, per pool: jobs served, their waits, the runner-hours spent and the peak servers.

Read from the world's ledger alone (what the simulated GitHub and cloud saw), never from corral's store, so
the figures are what a user would measure, not what corral believes. Only what happened from `measure_from`
(seconds after the trace's first job) counts: jobs queued from then, and runner time from then; what came
before is history that warmed the engine up.

- A pool's `jobs` are those corral's routing sends it; `served` those that started before the simulation
  ended. A wait is from queued to started (served jobs only). Percentiles are nearest-rank: the p95 of 20
  waits is the 19th smallest, a wait that really happened.
- Runner-hours split each server's life: `booting` from its create until its runner came online (or until it
  was deleted: a boot that failed is spent booting), `idle` from then until it took a job (or left), `busy`
  while it ran its job. The minutes between a job's end and the server's deletion are in none of them.
- `peak_servers`: the most servers of the pool that existed at once.

Numbers are rounded (waits to the hundredth of a second, hours to the thousandth) so that the same run prints
the same bytes on any machine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral.percentiles import nearest_rank
from corral.simulate.run import Outcome
from corral.simulate.world import SimServer

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Waits:
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, waits: Sequence[float]) -> Waits | None:
        if not waits:
            return None
        ordered = sorted(waits)
        p50, p95, p99 = (nearest_rank(ordered, percent) for percent in PERCENTILES)
        return cls(p50=_s(p50), p95=_s(p95), p99=_s(p99), max=_s(ordered[-1]))


@dataclass(frozen=True)
class RunnerTime:
    """Runner time in seconds, unrounded (what a comparison reads); `hours()` is what is printed."""

    busy: float
    idle: float
    booting: float

    def hours(self) -> dict[str, float]:
        return {"busy": _h(self.busy), "idle": _h(self.idle), "booting": _h(self.booting)}


@dataclass(frozen=True)
class PoolReport:
    jobs: int
    served: int
    wait_s: Waits | None
    runner_time: RunnerTime
    peak_servers: int
    servers: int
    """Servers created in the window."""
    boot_failures: int
    waits: tuple[float, ...] = field(default=(), repr=False)
    """Every served job's wait, sorted (what a goal at any percentile is checked against)."""
    cache_starts: dict[str, int] | None = None
    """For a pool with `cache_volumes`: its servers created in the window by how they started (`warm`, with a
    volume an earlier server used; `cold`, a new one; `none`, without one)."""


@dataclass(frozen=True)
class Report:
    jobs: int
    unmatched: int
    pools: dict[str, PoolReport]
    measured_s: float
    """Seconds measured: from `measure_from` to the simulation's end."""

    def as_dict(self) -> dict[str, object]:
        """The JSON shape `corral simulate --format json` prints."""
        return {
            "jobs": self.jobs,
            "unmatched": self.unmatched,
            "pools": {
                name: {
                    "jobs": pool.jobs,
                    "served": pool.served,
                    "wait_s": None if pool.wait_s is None else vars(pool.wait_s),
                    "runner_hours": pool.runner_time.hours(),
                    "peak_servers": pool.peak_servers,
                    "servers": pool.servers,
                    "boot_failures": pool.boot_failures,
                    **({"cache_starts": pool.cache_starts} if pool.cache_starts is not None else {}),
                }
                for name, pool in self.pools.items()
            },
            "measured_hours": _h(self.measured_s),
        }

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def as_table(self) -> str:
        """One line per pool, the same figures as the JSON."""
        header = ("pool", "jobs", "served", "wait p50", "p95", "p99", "max", "busy h", "idle h", "booting h", "peak")
        rows: list[tuple[str, ...]] = [header]
        for name, pool in self.pools.items():
            waits = pool.wait_s
            shown = ("-",) * 4 if waits is None else tuple(f"{value:g}s" for value in vars(waits).values())
            hours = pool.runner_time.hours()
            rows.append(
                (name, str(pool.jobs), str(pool.served), *shown, *(f"{h:g}" for h in hours.values()),
                 str(pool.peak_servers))
            )  # fmt: skip
        lines = aligned(rows, left=1)
        for name, pool in self.pools.items():
            if pool.cache_starts is not None:
                starts = pool.cache_starts
                lines.append(
                    f"{name}: {starts['warm']} of {sum(starts.values())} servers started with a warm cache volume "
                    f"({starts['cold']} with a new one, {starts['none']} without)"
                )
        unmatched = f"{self.unmatched} unmatched (no pool takes their labels)"
        lines.append(f"{self.jobs} jobs, {unmatched}; {_h(self.measured_s):g} h measured")
        return "\n".join(lines) + "\n"


def aligned(rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """A table's lines: columns two spaces apart, the first `left` of them (names) to the left, the figures
    to the right, so that digits line up; no trailing spaces."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) if index < left else cell.rjust(width)
                  for index, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]  # fmt: skip


def report(outcome: Outcome, measure_from: float = 0.0) -> Report:
    """The figures of `outcome`, counting from `measure_from` seconds after the trace's first job."""
    start = outcome.origin + measure_from
    end = max(outcome.end, start)
    jobs = [job for job in outcome.ledger.jobs if job.queued_at >= start]
    pools: dict[str, PoolReport] = {}
    for name in outcome.pools:
        mine = [job for job in jobs if job.pool == name]
        waits = [job.started_at - job.queued_at for job in mine if job.started_at is not None]
        servers = [server for server in outcome.ledger.servers if server.pool == name]
        pools[name] = PoolReport(
            jobs=len(mine),
            served=len(waits),
            wait_s=Waits.of(waits),
            runner_time=_runner_time(servers, start, end),
            peak_servers=_peak(servers, start, end),
            servers=sum(1 for server in servers if server.created_at >= start),
            boot_failures=sum(1 for server in servers if server.created_at >= start and server.status == "ERROR"),
            waits=tuple(sorted(waits)),
            cache_starts=_cache_starts(servers, start) if name in outcome.cached_pools else None,
        )
    return Report(
        jobs=len(jobs),
        unmatched=sum(1 for job in jobs if job.pool is None),
        pools=pools,
        measured_s=end - start,
    )


def _cache_starts(servers: Sequence[SimServer], start: float) -> dict[str, int]:
    made = [server for server in servers if server.created_at >= start]
    warm = sum(1 for server in made if server.cache == "warm")
    cold = sum(1 for server in made if server.cache == "cold")
    return {"warm": warm, "cold": cold, "none": len(made) - warm - cold}


def _runner_time(servers: Sequence[SimServer], start: float, end: float) -> RunnerTime:
    busy = idle = booting = 0.0
    for server in servers:
        gone = min(server.deleted_at if server.deleted_at is not None else end, end)
        online = server.online_at if server.online_at is not None else gone
        booting += _overlap(server.created_at, online, start, end)
        if server.online_at is None:
            continue
        left = server.done_at if server.done_at is not None else gone
        took = server.busy_at if server.busy_at is not None else left
        idle += _overlap(server.online_at, min(took, left), start, end)
        if server.busy_at is not None:
            busy += _overlap(server.busy_at, left, start, end)
    return RunnerTime(busy=busy, idle=idle, booting=booting)


def _peak(servers: Sequence[SimServer], start: float, end: float) -> int:
    """The most servers alive at once within [start, end] (a server deleted as another is created: not both)."""
    events = []
    for server in servers:
        gone = server.deleted_at if server.deleted_at is not None else math.inf
        if gone <= start or server.created_at > end:
            continue
        events.append((max(server.created_at, start), 1))
        events.append((gone, -1))
    peak = alive = 0
    for _, change in sorted(events):
        alive += change
        peak = max(peak, alive)
    return peak


def _overlap(begin: float, finish: float, start: float, end: float) -> float:
    return max(min(finish, end) - max(begin, start), 0.0)


def _s(seconds: float) -> float:
    return round(seconds, 2) + 0.0


def _h(seconds: float) -> float:
    return round(seconds / 3600.0, 3) + 0.0
