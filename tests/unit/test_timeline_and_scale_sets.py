"""A job's timeline as an operator reads it (`engine.timeline.timeline`), and how many runners a scale set's
jobs want (`engine.scalesets`): pure functions of what is recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corral.config import PoolConfig
from corral.engine.scalesets import jobs_awaiting_runners, scale_set_labels
from corral.engine.timeline import timeline
from corral.github.scaleset import Statistics
from corral.model import Job, JobState, Reason, Runner, RunnerEvent, RunnerState

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(**extra: Any) -> Job:
    fields: dict[str, Any] = {
        "id": 42,
        "repository": "octo/app",
        "labels": ("small",),
        "status": JobState.COMPLETED,
        "pool": "small",
        "received_at": at(0),
        "source": "webhook:d-1",
    }
    return Job(**(fields | extra))


def runner(name: str, job_id: int | None = 42, server: str | None = "srv-1") -> Runner:
    return Runner(
        id=f"id-{name}",
        pool="small",
        scope="org:octo",
        state=RunnerState.DELETED,
        name=name,
        labels=("small",),
        reason=Reason.DEMAND,
        message=None,
        created_at=at(1),
        state_changed_at=at(60),
        server_id=server,
        job_id=job_id,
    )


def moved(
    name: str, to: RunnerState, seconds: float, reason: Reason = Reason.DEMAND, message: str | None = None
) -> RunnerEvent:
    return RunnerEvent(f"id-{name}", None, to, reason, message, at(seconds))


def test_a_served_job_reads_from_its_webhook_to_its_runner_deleted_in_time_order() -> None:
    served = job(
        queued_at=at(0), started_at=at(47), completed_at=at(90), runner_name="corral-small-1", conclusion="success"
    )
    events = [
        moved("corral-small-1", RunnerState.PENDING, 1),
        moved("corral-small-1", RunnerState.CREATING, 2),
        moved("corral-small-1", RunnerState.BOOTING, 3),
        moved("corral-small-1", RunnerState.BOOTING, 30, Reason.SERVER_ACTIVE),
        moved("corral-small-1", RunnerState.IDLE, 45),
        moved("corral-small-1", RunnerState.BUSY, 46),
        moved("corral-small-1", RunnerState.FINISHED, 91, Reason.JOB_DONE),
        moved("corral-small-1", RunnerState.DELETING, 92, Reason.JOB_DONE),
        moved("corral-small-1", RunnerState.DELETED, 95, Reason.JOB_DONE),
    ]
    steps = timeline(served, [runner("corral-small-1")], events)
    assert [(int((step.at - T0).total_seconds()), step.event, step.detail) for step in steps] == [
        (0, "received", "webhook delivery d-1"),
        (0, "queued", "queued on GitHub"),
        (0, "matched", "matched pool small"),
        (1, "runner_requested", "runner corral-small-1 requested (demand)"),
        (2, "create_requested", "runner corral-small-1: JIT config made, server create sent"),
        (3, "server_created", "runner corral-small-1: server created (srv-1)"),
        (30, "server_active", "runner corral-small-1: server ACTIVE, the runner starting in it"),
        (45, "runner_online", "runner corral-small-1 online"),
        (46, "runner_busy", "runner corral-small-1 took a job"),
        (47, "started", "started on corral-small-1"),
        (90, "completed", "completed: success"),
        (91, "runner_finished", "runner corral-small-1 done (job_done)"),
        (92, "runner_deleting", "runner corral-small-1: deleting (job_done)"),
        (95, "runner_deleted", "runner corral-small-1 deleted"),
    ]


def test_a_runner_started_for_another_job_that_ran_this_one_says_so() -> None:
    steps = timeline(
        job(status=JobState.IN_PROGRESS),
        [runner("corral-small-9", job_id=7)],
        [moved("corral-small-9", RunnerState.BUSY, 5)],
    )
    assert steps[-1].detail == "runner corral-small-9 took a job (started for another job; it ran this one)"
    assert steps[-1].runner == "corral-small-9"


def test_a_failed_runner_shows_what_the_cloud_said() -> None:
    steps = timeline(
        job(status=JobState.QUEUED),
        [runner("corral-small-2", server=None)],
        [moved("corral-small-2", RunnerState.FAILED, 9, Reason.CLOUD_QUOTA, "Quota exceeded for cores")],
    )
    assert steps[-1].detail == "runner corral-small-2 failed (cloud_quota): Quota exceeded for cores"


@pytest.mark.parametrize(
    ("source", "detail"),
    [
        ("webhook:abc", "webhook delivery abc"),
        ("webhook", "webhook (no delivery id)"),
        ("poll", "found by polling GitHub's queued runs"),
        ("scale_set:17", "scale-set message 17"),
        (None, "recorded"),
        ("something-new", "something-new"),
    ],
)
def test_how_corral_first_heard_of_the_job_opens_its_timeline(source: str | None, detail: str) -> None:
    first = timeline(job(source=source, status=JobState.QUEUED), [], [])[0]
    assert (first.event, first.detail) == ("received", detail)


def test_an_unmatched_job_says_no_pool_fits() -> None:
    steps = timeline(job(pool=None, status=JobState.QUEUED), [], [])
    assert [(step.event, step.detail) for step in steps] == [
        ("received", "webhook delivery d-1"),
        ("unmatched", "no pool fits its labels and repository"),
    ]


def test_a_job_completed_without_a_known_runner_or_conclusion_says_so() -> None:
    steps = timeline(job(started_at=at(5), completed_at=at(6)), [], [])
    assert [step.detail for step in steps[-2:]] == ["started on a runner", "completed: unknown"]


@pytest.mark.parametrize(
    ("assigned", "running", "busy", "waiting"),
    [
        (0, 0, 0, 0),
        (6, 0, 0, 6),
        (6, 2, 2, 4),
        (6, 2, 4, 2),  # corral saw two runners busy before their JobStarted came
        (6, 4, 2, 2),  # two jobs ended: their runners are gone before JobCompleted came
        (3, 5, 0, 0),
        (8, 6, 6, 2),
    ],
)
def test_a_scale_sets_jobs_waiting_for_runners_count_each_running_job_once(
    assigned: int, running: int, busy: int, waiting: int
) -> None:
    assert jobs_awaiting_runners(Statistics(assigned=assigned, running=running), busy) == waiting


def test_without_statistics_no_job_waits() -> None:
    assert jobs_awaiting_runners(None, busy=3) == 0


def test_githubs_statistics_are_read_from_its_message_fields() -> None:
    data = {"totalAssignedJobs": 5, "totalRunningJobs": 2, "totalAvailableJobs": 1, "totalBusyRunners": 2}
    assert Statistics.of(data) == Statistics(available=1, assigned=5, running=2, busy=2)
    assert Statistics.of(None) == Statistics()


@pytest.mark.parametrize(
    ("name", "settings", "labels"),
    [
        ("arm", {}, ("arm", "linux", "ARM64")),
        ("arm", {"scale_set_name": "arm-set"}, ("arm-set", "linux", "ARM64")),
        ("arm", {"labels": ["Arm", "linux"]}, ("arm", "linux")),
    ],
)
def test_a_scale_set_registers_its_name_first_then_its_labels_each_once_ignoring_case(
    name: str, settings: dict[str, Any], labels: tuple[str, ...]
) -> None:
    pool = PoolConfig.model_validate(
        {"scope": {"org": "octo"}, "labels": ["linux", "ARM64"], "image": "i", "flavor": "f", "intake": "scale_set"}
        | settings
    )
    assert scale_set_labels(name, pool) == labels


def test_a_step_github_stamped_to_the_second_follows_what_must_precede_it_within_that_second() -> None:
    """GitHub stamps `started_at` and `completed_at` to the second: a job started at 47 s on a runner whose
    server corral saw ACTIVE at 47.3 s and online at 47.6 s started after both, and completed after its
    runner was noted busy at 47.8 s; a step of the next second stays after it."""
    fast = job(started_at=at(47), completed_at=at(47), runner_name="corral-small-1", conclusion="success")
    events = [
        moved("corral-small-1", RunnerState.BOOTING, 47.3, Reason.SERVER_ACTIVE),
        moved("corral-small-1", RunnerState.IDLE, 47.6),
        moved("corral-small-1", RunnerState.BUSY, 47.8),
        moved("corral-small-1", RunnerState.FINISHED, 48.2, Reason.JOB_DONE),
    ]
    steps = timeline(fast, [runner("corral-small-1")], events)
    assert [(step.event, (step.at - T0).total_seconds()) for step in steps[2:]] == [
        ("server_active", 47.3),
        ("runner_online", 47.6),
        ("started", 47.0),
        ("runner_busy", 47.8),
        ("completed", 47.0),
        ("runner_finished", 48.2),
    ]
