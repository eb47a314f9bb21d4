"""A job trace from GitHub's own records: what `corral trace import` reads, so a team can replay its history
through `corral simulate` before it installs corral.

For each repository: the workflow runs created in the window (GitHub's Actions API, filtered by `created`),
then every job of each run, every attempt's. A job is kept when it ran on a runner and completed: queued at its
`created_at`, lasting from its `started_at` to its `completed_at`, with its `runs-on` labels and workflow's
name. Jobs skipped, cancelled before a runner took them, or not yet completed are left out and counted.

GitHub answers at most 1,000 runs of a filtered list. The window is read a day at a time, and a day that holds
more is split in halves until each part fits (down to a minute; a minute holding more than 1,000 runs is read
as far as GitHub answers, and said).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from corral.config import ScopeConfig
from corral.github.client import GitHubClient, RunJob
from corral.model import Job, JobState

SLICE = timedelta(days=1)
SMALLEST_SLICE = timedelta(minutes=1)
CONCURRENT_RUNS = 8
"""Runs whose jobs are read at once: enough to hide the latency, few enough for GitHub's secondary limits."""

RunIds = Callable[[datetime, datetime], Awaitable[tuple[int, list[int]]]]
"""The runs created from the first moment to the second, both included: (the total GitHub counts, the ids it
answered)."""


@dataclass
class History:
    """The jobs read, and what was left out."""

    jobs: list[Job] = field(default_factory=list)
    runs: int = 0
    not_run: int = 0
    """Jobs skipped, cancelled before a runner took them, or not completed."""
    truncated: list[str] = field(default_factory=list)
    """Minutes whose runs GitHub could not answer whole (more than 1,000 created in one minute)."""


def created(start: datetime, end: datetime) -> str:
    """GitHub's `created` filter for a closed range of seconds."""
    return f"{_stamp(start)}..{_stamp(end)}"


async def run_ids_in(run_ids: RunIds, since: datetime, until: datetime, history: History) -> list[int]:
    """Every run created from `since` to `until`, a day at a time, splitting a part GitHub cannot answer whole."""
    found: list[int] = []
    start = _whole(since)
    until = _whole(until)
    while start <= until:
        end = min(start + SLICE - timedelta(seconds=1), until)
        found.extend(await _split(run_ids, start, end, history))
        start = end + timedelta(seconds=1)
    return list(dict.fromkeys(found))


async def _split(run_ids: RunIds, start: datetime, end: datetime, history: History) -> list[int]:
    total, ids = await run_ids(start, end)
    if total <= len(ids):
        return ids
    if end - start < SMALLEST_SLICE:
        history.truncated.append(created(start, end))
        return ids
    middle = start + (end - start) / 2
    middle = _whole(middle)
    return [
        *await _split(run_ids, start, middle, history),
        *await _split(run_ids, middle + timedelta(seconds=1), end, history),
    ]


async def read_history(github: GitHubClient, repositories: list[str], since: datetime, until: datetime) -> History:
    """The completed jobs of `repositories` whose runs were created from `since` to `until`."""
    history = History()
    slots = asyncio.Semaphore(CONCURRENT_RUNS)
    for repository in repositories:
        await _read_repository(github, repository, since, until, history, slots)
    return history


async def _read_repository(
    github: GitHubClient,
    repository: str,
    since: datetime,
    until: datetime,
    history: History,
    slots: asyncio.Semaphore,
) -> None:
    scope = ScopeConfig(repo=repository)

    async def ids(start: datetime, end: datetime) -> tuple[int, list[int]]:
        return await github.workflow_run_ids(scope, repository, created=created(start, end))

    async def jobs_of(run_id: int) -> list[RunJob]:
        async with slots:
            return await github.run_jobs(scope, repository, run_id)

    runs = await run_ids_in(ids, since, until, history)
    history.runs += len(runs)
    for batch in await asyncio.gather(*(jobs_of(run_id) for run_id in runs)):
        for job in batch:
            kept = as_job(job)
            if kept is None:
                history.not_run += 1
            else:
                history.jobs.append(kept)


def as_job(job: RunJob) -> Job | None:
    """The job as corral's store would hold it, or None when it never ran on a runner to completion."""
    if job.status != "completed" or job.conclusion == "skipped" or not job.runner_name:
        return None
    if job.started_at is None or job.completed_at is None or job.created_at is None:
        return None
    return Job(
        id=job.id,
        repository=job.repository,
        labels=job.labels,
        status=JobState.COMPLETED,
        pool=None,
        received_at=job.created_at,
        conclusion=job.conclusion,
        runner_name=job.runner_name,
        queued_at=job.created_at,
        started_at=job.started_at,
        completed_at=job.completed_at,
        workflow=job.workflow,
    )


def _whole(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(microsecond=0)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
