"""`corral trace import`'s reading of GitHub's history: which jobs become trace lines, and how a window whose runs
GitHub cannot list at once (it answers 1,000 of a filtered list) is split until every run is read."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from corral.github.client import RunJob
from corral.simulate.history import History, as_job, created, run_ids_in
from corral_sandbox.github.routes.jobs import created_filter

DAY = datetime(2026, 3, 2, tzinfo=UTC)


def github_listing(created_at: list[datetime]) -> tuple[list[str], object]:
    """What GitHub's run listing answers for `created=A..B`: the total that matched and the first 1,000 ids;
    also the ranges asked, in order."""
    asked: list[str] = []

    async def run_ids(start: datetime, end: datetime) -> tuple[int, list[int]]:
        asked.append(created(start, end))
        matched = [index for index, moment in enumerate(created_at) if start <= moment <= end]
        return len(matched), matched[:1000]

    return asked, run_ids


def test_a_window_is_read_a_day_at_a_time() -> None:
    asked, run_ids = github_listing([DAY + timedelta(hours=30)])
    found = asyncio.run(run_ids_in(run_ids, DAY, DAY + timedelta(days=2, hours=1), History()))  # type: ignore[arg-type]
    assert found == [0]
    assert asked == [
        "2026-03-02T00:00:00Z..2026-03-02T23:59:59Z",
        "2026-03-03T00:00:00Z..2026-03-03T23:59:59Z",
        "2026-03-04T00:00:00Z..2026-03-04T01:00:00Z",
    ]


def test_a_day_of_2500_runs_is_split_until_each_part_is_answered_whole() -> None:
    moments = [DAY + timedelta(seconds=30 * index) for index in range(2500)]  # 2,500 runs in about 21 hours
    asked, run_ids = github_listing(moments)
    history = History()
    found = asyncio.run(run_ids_in(run_ids, DAY, DAY + timedelta(hours=23, minutes=59, seconds=59), history))  # type: ignore[arg-type]
    assert sorted(found) == list(range(2500)) and history.truncated == []
    assert asked[:3] == [
        "2026-03-02T00:00:00Z..2026-03-02T23:59:59Z",  # 2,500 counted, 1,000 answered: split
        "2026-03-02T00:00:00Z..2026-03-02T11:59:59Z",  # 1,440: split again
        "2026-03-02T00:00:00Z..2026-03-02T05:59:59Z",  # 720: whole
    ]


def test_a_minute_with_more_runs_than_github_answers_is_read_as_far_as_it_goes_and_said() -> None:
    moments = [DAY + timedelta(minutes=5)] * 1200
    _, run_ids = github_listing(moments)
    history = History()
    found = asyncio.run(run_ids_in(run_ids, DAY, DAY + timedelta(minutes=10), history))  # type: ignore[arg-type]
    assert len(found) == 1000
    # Halved from 00:00-00:10 down to the part under a minute that holds 00:05:00: 04:24-05:00.
    assert history.truncated == ["2026-03-02T00:04:24Z..2026-03-02T00:05:00Z"]


def job(**fields: object) -> RunJob:
    ran: dict[str, object] = {
        "id": 7,
        "repository": "octo-org/app",
        "labels": ("self-hosted", "linux"),
        "status": "completed",
        "conclusion": "success",
        "created_at": DAY,
        "started_at": DAY + timedelta(seconds=40),
        "completed_at": DAY + timedelta(seconds=340),
        "runner_name": "corral-small-1",
        "workflow": "CI",
    }
    return RunJob(**{**ran, **fields})  # type: ignore[arg-type]


def test_a_job_that_ran_to_completion_keeps_its_queue_time_and_its_runners_times() -> None:
    kept = as_job(job())
    assert kept is not None
    assert (kept.queued_at, kept.started_at, kept.completed_at) == (
        DAY,
        DAY + timedelta(seconds=40),
        DAY + timedelta(seconds=340),
    )
    assert (kept.labels, kept.workflow, kept.conclusion) == (("self-hosted", "linux"), "CI", "success")


@pytest.mark.parametrize(
    "fields",
    [
        {"conclusion": "skipped"},
        {"conclusion": "cancelled", "runner_name": None},  # cancelled while queued: no runner had it
        {"status": "in_progress", "conclusion": None, "completed_at": None},
        {"started_at": None},
    ],
    ids=["skipped", "cancelled-unstarted", "running", "no-start"],
)
def test_a_job_that_never_ran_to_completion_on_a_runner_is_left_out(fields: dict[str, object]) -> None:
    assert as_job(job(**fields)) is None


@pytest.mark.parametrize(
    ("query", "inside", "outside"),
    [
        (
            "2026-03-02T00:00:00Z..2026-03-02T23:59:59Z",
            DAY + timedelta(hours=23, minutes=59, seconds=59),
            DAY + timedelta(days=1),
        ),
        (">=2026-03-02", DAY, DAY - timedelta(seconds=1)),
        ("<2026-03-02", DAY - timedelta(seconds=1), DAY),
        ("2026-03-02", DAY + timedelta(hours=12), DAY + timedelta(days=1)),
        ("*..2026-03-02", DAY + timedelta(hours=23), DAY + timedelta(days=1)),
    ],
)
def test_the_sandbox_filters_runs_by_creation_as_github_does(query: str, inside: datetime, outside: datetime) -> None:
    within = created_filter(query)
    assert within(inside) and not within(outside)


def test_the_sandbox_refuses_a_created_filter_that_is_no_date() -> None:
    with pytest.raises(ValueError):
        created_filter("yesterday")
