"""The figures of a chaos run, computed from what the sandbox recorded: pure functions, no I/O.

Inputs are the sandbox's control-API shapes: jobs from `GET /_sandbox/jobs` (with the `*_s` epoch times)
and server lifetimes from `GET /_sandbox/servers`. Definitions are in `bench/chaos.py`'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

POOL_METADATA = "corral-pool"
"""The metadata key naming a server's pool (corral.cloud.provider.META_POOL, read here as data)."""

Record = dict[str, Any]


@dataclass(frozen=True)
class Kill:
    """One kill -9 of corral and the restart after it (epoch seconds)."""

    killed_s: float
    restarted_s: float
    serving_s: float
    startup_fault: str | None
    """Endpoint faults set just before the restart: "keystone", "glance" or None."""
    deadline_s: float
    """Recovery must happen before this (the next kill, or the end of the run) to be counted."""


@dataclass(frozen=True)
class Window:
    """A span of time a fault lasted (epoch seconds)."""

    start_s: float
    end_s: float


@dataclass(frozen=True)
class OverMax:
    """How often, and how far, a pool's live servers went above its `max_runners`."""

    episodes: int
    peak: int


def percentile(values: Iterable[float], share: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(math.ceil(share * len(ordered)) - 1, len(ordered) - 1)] if share > 0 else ordered[0]


def served(jobs: list[Record]) -> int:
    return sum(1 for job in jobs if job["status"] == "completed" and job["conclusion"] == "success")


def unfinished(jobs: list[Record]) -> set[int]:
    return {int(job["id"]) for job in jobs if job["status"] != "completed"}


def never_told(jobs: list[Record], lost: list[Record], known_unfinished: Iterable[int]) -> set[int]:
    """Unfinished jobs whose `queued` event was lost (from `GET /_sandbox/deliveries/lost`) and that corral
    does not have as unfinished either: nothing ever told corral about them."""
    lost_queued = {int(event["job_id"]) for event in lost if event["action"] == "queued" and event["job_id"]}
    return (unfinished(jobs) & lost_queued) - set(known_unfinished)


def wait_s(job: Record) -> float | None:
    """Queued to started, from the sandbox's sub-second times; None if it never started."""
    started = job.get("started_at_s")
    return None if started is None else float(started) - float(job["queued_at_s"])


def live_until(life: Record) -> float:
    """When a server stopped counting as capacity: it shut down (its runner exited), went to ERROR, or its
    delete was accepted; infinity if none of these happened."""
    ends = [life[key] for key in ("stopped_s", "errored_s", "delete_requested_s", "gone_s") if life[key] is not None]
    return min(ends, default=math.inf)


def over_max(lives: list[Record], max_runners: dict[str, int]) -> dict[str, OverMax]:
    """Per pool, replay every server's live span in time order and count the episodes above the maximum.

    At one instant, ends are applied before starts: a server replacing one that stopped at the same
    moment is not an excess.
    """
    result = {}
    for pool, limit in max_runners.items():
        events: list[tuple[float, int]] = []
        for life in lives:
            if life["metadata"].get(POOL_METADATA) != pool:
                continue
            events.append((float(life["created_s"]), +1))
            end = live_until(life)
            if end != math.inf:
                events.append((end, -1))
        events.sort()
        live = peak = episodes = 0
        for _, change in events:
            before = live
            live += change
            peak = max(peak, live)
            if before <= limit < live:
                episodes += 1
        result[pool] = OverMax(episodes=episodes, peak=peak)
    return result


def servers_without_a_job(lives: list[Record], jobs: list[Record]) -> int:
    """Servers whose runner never ran a job (a job names its runner, and corral names servers after runners)."""
    ran = {job["runner_name"] for job in jobs if job.get("runner_name")}
    return sum(1 for life in lives if life["name"] not in ran)


def duplicates(lives: list[Record], jobs: list[Record], warm: int) -> int:
    """Servers beyond one per job: those that ran no job, less the `warm` ones (the pools' `min_idle`
    runners standing at the end, retired by the drain). Each warm runner that takes a job is replaced by
    one started for that job, so a perfect run creates exactly jobs + warm servers."""
    return max(0, servers_without_a_job(lives, jobs) - warm)


def first_served_after(began_s: float, jobs: list[Record], lives: list[Record]) -> float | None:
    """When a job first started on a server created at or after `began_s` (epoch seconds), or None: the
    moment corral was turning demand into runners again after a restart or a rate-limit reset."""
    created = {life["name"]: float(life["created_s"]) for life in lives}
    starts = [
        float(job["started_at_s"])
        for job in jobs
        if job.get("started_at_s") is not None and created.get(job.get("runner_name") or "", -math.inf) >= began_s
    ]
    return min(starts, default=None)


def first_started_after(queued_s: float, jobs: list[Record]) -> float | None:
    """When the first job queued at or after `queued_s` started: GitHub hands runners the oldest queued job
    first, so this is when the backlog from before that moment had been worked off."""
    starts = [
        float(job["started_at_s"])
        for job in jobs
        if job.get("started_at_s") is not None and float(job["queued_at_s"]) >= queued_s
    ]
    return min(starts, default=None)


def recovery_s(kill: Kill, jobs: list[Record], lives: list[Record]) -> float | None:
    """Seconds from the kill until a job started on a runner the restarted corral created; None when that
    did not happen before the deadline (the next kill or the end of the run)."""
    moment = first_served_after(kill.restarted_s, jobs, lives)
    if moment is None or moment > kill.deadline_s:
        return None
    return moment - kill.killed_s


def backlog_s(kill: Kill, jobs: list[Record]) -> float | None:
    """Seconds from the kill until the first job queued after the restart started (None: not before the
    deadline): the outage's backlog worked off, which depends on pool sizes as much as on corral."""
    moment = first_started_after(kill.restarted_s, jobs)
    if moment is None or moment > kill.deadline_s:
        return None
    return moment - kill.killed_s


def jobs_in(window: Window, jobs: list[Record]) -> list[Record]:
    """Jobs queued while the fault lasted."""
    return [job for job in jobs if window.start_s <= float(job["queued_at_s"]) <= window.end_s]


RUNNER_METADATA = "corral-runner"
"""The metadata key naming a server's runner (corral.cloud.provider.META_RUNNER)."""


def runners_per_job(lives: list[Record], jobs: list[Record], runners: list[Record]) -> dict[int, int]:
    """Per job, the servers it accounts for: the one that ran it, and those started for it (corral's runners,
    `GET /api/v1/runners?include_deleted=true`, name the job each was started for) that ran no job at all.

    A server started for one job that ran another (GitHub hands a new runner the oldest queued job) is that
    other job's: in a backlog every runner is started for a younger job than the one it takes, and counting
    it for the job it was started for would charge one job with the runners of several."""
    ran = {job["runner_name"]: int(job["id"]) for job in jobs if job.get("runner_name")}
    started_for = {runner["id"]: runner["job_id"] for runner in runners if runner.get("job_id") is not None}
    counts: dict[int, int] = {}
    for life in lives:
        job = ran.get(life["name"])
        if job is None:
            job = started_for.get(life["metadata"].get(RUNNER_METADATA))
        if job is not None:
            counts[int(job)] = counts.get(int(job), 0) + 1
    return counts


def double_creates(lives: list[Record]) -> int:
    """Servers created for a runner that already had one: the same create made twice (say, by two replicas,
    or by a restart that did not see its predecessor's create)."""
    runners = [life["metadata"].get(RUNNER_METADATA) for life in lives]
    named = [runner for runner in runners if runner]
    return len(named) - len(set(named))
