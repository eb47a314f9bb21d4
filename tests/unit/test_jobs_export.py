"""`corral jobs export`'s trace from a store (a SQLite file in tmp_path) filled by corral's own intake: webhook
deliveries and scale-set messages, recorded as the service records them. The exact lines, which jobs are left
out, and the round trip through the trace reader."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from corral.model import Delivery, Job, JobMessage, JobState, JobUpdate
from corral.simulate.trace import Export, Trace, TraceJob, export, read_trace
from corral.store import Store, jobs, scaleset_jobs

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    store.migrate()
    yield store
    store.close()


def webhook(store: Store, delivery: str, update: JobUpdate, *, heard: datetime) -> None:
    """A `workflow_job` delivery recorded as the webhook endpoint records it, heard at `heard`."""
    event = Delivery(id=delivery, event="workflow_job", action=update.status.value, job=update)
    store.run_blocking(jobs.record, [event], now=heard)


def job(job_id: int, status: JobState, **fields: object) -> JobUpdate:
    return JobUpdate(job_id, "octo-org/app", ("self-hosted", "linux"), status, "small", **fields)  # type: ignore[arg-type]


def scale_set_message(kind: str, request_id: int, **fields: object) -> JobMessage:
    return JobMessage(
        kind=kind,
        runner_request_id=request_id,
        job_id=f"guid-{request_id}",
        repository="api",
        owner="octo-org",
        workflow_run_id=77,
        labels=("arm64",),
        workflow_ref="octo-org/api/.github/workflows/ci.yml@refs/heads/main",
        **fields,  # type: ignore[arg-type]
    )


def fill(store: Store) -> None:
    """Two completed webhook jobs heard in pieces, one without GitHub's queued time, one still running, one
    queued, one older than the window, and a scale-set job from available to completed."""
    webhook(store, "d1", job(1, JobState.QUEUED, queued_at=at(10), workflow="CI"), heard=at(11))
    webhook(store, "d2", job(1, JobState.IN_PROGRESS, started_at=at(40), runner_name="r1"), heard=at(41))
    webhook(store, "d3", job(1, JobState.COMPLETED, completed_at=at(100), conclusion="success"), heard=at(101))
    # heard of only once it was over, GitHub's queued time missing: `at` is when corral heard of it
    update = job(2, JobState.COMPLETED, started_at=at(3), completed_at=at(4.5), conclusion="failure")
    webhook(store, "d4", update, heard=at(5.25))
    webhook(store, "d5", job(3, JobState.IN_PROGRESS, queued_at=at(1), started_at=at(2)), heard=at(2))
    webhook(store, "d6", job(4, JobState.QUEUED, queued_at=at(50)), heard=at(50))
    old = job(5, JobState.COMPLETED, queued_at=at(-7200), started_at=at(-7100), completed_at=at(-7000))
    webhook(store, "d7", old, heard=at(-7000))
    available = scale_set_message("JobAvailable", 9, queue_time=at(20))
    store.run_blocking(scaleset_jobs.record, "arm", [available], now=at(21))
    store.run_blocking(scaleset_jobs.record, "arm", [scale_set_message("JobStarted", 9)], now=at(30))
    finished = scale_set_message("JobCompleted", 9, result="succeeded")
    store.run_blocking(scaleset_jobs.record, "arm", [finished], now=at(90.1234))


def history(store: Store, since: datetime) -> list[Job]:
    """What the command reads: webhook jobs, then scale-set jobs."""
    return [*store.run_blocking(jobs.queued_since, since), *store.run_blocking(scaleset_jobs.queued_since, since)]


EXPECTED_LINES = (
    '{"at": "2026-03-02T09:00:05.250Z", "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 1.5}',
    '{"at": "2026-03-02T09:00:10Z", "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 60, '
    '"workflow_name": "CI"}',
    '{"at": "2026-03-02T09:00:20Z", "repo": "octo-org/api", "labels": ["arm64"], "duration": 60.123, '
    '"workflow_name": "ci.yml"}',
)


def test_the_export_writes_the_completed_jobs_of_the_window_oldest_first(store: Store) -> None:
    fill(store)
    assert export(history(store, since=at(-3600))) == Export(lines=EXPECTED_LINES, not_run=2, unfit=0)


def test_the_window_starts_at_since_by_when_the_job_was_queued(store: Store) -> None:
    fill(store)
    assert export(history(store, since=at(10))).lines == EXPECTED_LINES[1:]
    assert export(history(store, since=at(-86400))).lines[0] == (
        '{"at": "2026-03-02T07:00:00Z", "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 100}'
    )


def test_the_export_reads_back_through_the_trace_reader(store: Store) -> None:
    fill(store)
    written = "".join(f"{line}\n" for line in export(history(store, since=at(-3600))).lines)
    labels = ("self-hosted", "linux")
    assert read_trace(io.BytesIO(written.encode())) == Trace(
        jobs=(
            TraceJob(at=0.0, repo="octo-org/app", labels=labels, duration=1.5, workflow_name=None, line=1),
            TraceJob(at=4.75, repo="octo-org/app", labels=labels, duration=60.0, workflow_name="CI", line=2),
            TraceJob(at=14.75, repo="octo-org/api", labels=("arm64",), duration=60.123, workflow_name="ci.yml", line=3),
        ),
        origin=at(5.25),
    )


def test_a_stored_job_the_trace_format_refuses_is_left_out_and_counted(store: Store) -> None:
    unlabelled = JobUpdate(
        6, "octo-org/app", (), JobState.COMPLETED, None, queued_at=at(0), started_at=at(1), completed_at=at(2)
    )
    webhook(store, "d8", unlabelled, heard=at(2))
    assert export(history(store, since=at(-60))) == Export(lines=(), not_run=0, unfit=1)


def test_a_duration_clocks_made_negative_is_written_as_zero(store: Store) -> None:
    update = job(7, JobState.COMPLETED, queued_at=at(0), started_at=at(5), completed_at=at(4))
    webhook(store, "d9", update, heard=at(5))
    assert export(history(store, since=at(-60))).lines == (
        '{"at": "2026-03-02T09:00:00Z", "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 0}',
    )
