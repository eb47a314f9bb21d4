"""A completed job's trace: the stages corral saw, each ending where the next begins, and what happened on the
way as events. Exact times, from a job's rows alone (no clock, no OpenTelemetry)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corral.config import ConfigError
from corral.job_spans import JobTrace, job_trace
from corral.model import Job, JobState, Reason, Runner, RunnerEvent, RunnerState
from corral.tracing import JobTracing, wanted

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def runner(name: str, *, job_id: int | None, registered_s: float | None) -> Runner:
    return Runner(
        id=f"id-{name}",
        pool="small",
        scope="org:octo",
        state=RunnerState.DELETED,
        name=name,
        labels=("small",),
        reason=Reason.GONE,
        message=None,
        created_at=at(0),
        state_changed_at=at(100),
        job_id=job_id,
        registered_at=at(registered_s) if registered_s is not None else None,
    )


def moves(name: str, *steps: tuple[RunnerState, float]) -> list[RunnerEvent]:
    events, source = [], None
    for state, seconds in steps:
        events.append(RunnerEvent(f"id-{name}", source, state, Reason.DEMAND, None, at(seconds)))
        source = state
    return events


def done(**fields: object) -> Job:
    base: dict[str, object] = {
        "id": 9,
        "repository": "octo/app",
        "labels": ("small",),
        "status": JobState.COMPLETED,
        "pool": "small",
        "received_at": at(0.2),
        "conclusion": "success",
        "runner_name": "corral-small-a",
        "queued_at": at(0),
        "started_at": at(50),
        "completed_at": at(80),
        "run_attempt": 1,
    }
    return Job(**{**base, **fields})  # type: ignore[arg-type]


def shape(trace: JobTrace | None) -> list[tuple[str, float, float]]:
    assert trace is not None
    spans = [trace.root, *trace.children]
    return [(span.name, (span.start - T0).total_seconds(), (span.end - T0).total_seconds()) for span in spans]


def test_a_job_served_by_a_runner_started_for_it_has_every_stage() -> None:
    ran = runner("corral-small-a", job_id=9, registered_s=45)
    events = moves(
        "corral-small-a",
        (RunnerState.PENDING, 1),
        (RunnerState.CREATING, 1.5),
        (RunnerState.BOOTING, 3),
        (RunnerState.BUSY, 51),
        (RunnerState.FINISHED, 81),
    )
    trace = job_trace(done(), [ran], events)
    assert shape(trace) == [
        ("job", 0, 80),
        ("queue", 0, 1),
        ("server.create", 1.5, 3),
        ("server.boot", 3, 45),
        ("runner.online", 45, 50),
        ("job.run", 50, 80),
    ]
    assert trace is not None and trace.root.attributes == {
        "github.job.id": 9,
        "github.repository": "octo/app",
        "github.run_attempt": 1,
        "corral.pool": "small",
        "corral.runner": "corral-small-a",
        "github.job.conclusion": "success",
    }


def test_githubs_whole_seconds_never_start_a_job_before_its_runner_came_online() -> None:
    """GitHub says the job started at 45 s (its times are whole seconds), its runner came online at 45.7 s."""
    ran = runner("corral-small-a", job_id=9, registered_s=45.7)
    events = moves("corral-small-a", (RunnerState.PENDING, 1), (RunnerState.CREATING, 1.5), (RunnerState.BOOTING, 3))
    trace = job_trace(done(started_at=at(45), completed_at=at(45)), [ran], events)
    assert shape(trace)[-3:] == [("server.boot", 3, 45.7), ("runner.online", 45.7, 45.7), ("job.run", 45.7, 45.7)]


def test_a_warm_runners_job_waits_for_no_create_and_a_failed_create_is_an_event() -> None:
    """The warm runner was created and online before the job was queued: those stages are not the job's. A
    runner started for the job that failed to boot shows as a retry on the job."""
    warm = runner("corral-small-a", job_id=None, registered_s=-300)
    failed = runner("corral-small-b", job_id=9, registered_s=None)
    events = moves("corral-small-a", (RunnerState.PENDING, -400), (RunnerState.CREATING, -399)) + moves(
        "corral-small-b", (RunnerState.PENDING, 1), (RunnerState.FAILED, 20)
    )
    trace = job_trace(done(started_at=at(2), completed_at=at(30)), [warm, failed], events)
    assert shape(trace) == [("job", 0, 30), ("queue", 0, 2), ("job.run", 2, 30)]
    assert trace is not None
    assert [(event.name, event.attributes["corral.runner"]) for event in trace.root.events] == [
        ("create.retry", "corral-small-b")
    ]


def test_a_job_lost_with_its_server_and_re_run_says_so_on_its_trace() -> None:
    lost = done(
        conclusion="failure",
        lost_at=at(60),
        lost_reason="runner corral-small-a: server in ERROR: host failed",
        rerun="requested",
        rerun_at=at(400),
        completed_at=at(360),
    )
    trace = job_trace(lost, [], [])
    assert trace is not None
    assert [(event.name, (event.at - T0).total_seconds()) for event in trace.root.events] == [
        ("lost", 60),
        ("rerun", 400),
    ]
    assert trace.root.events[1].attributes == {"github.run_attempt": 2}


def test_a_job_not_completed_has_no_trace_yet() -> None:
    assert job_trace(done(status=JobState.IN_PROGRESS, completed_at=None), [], []) is None


@pytest.mark.parametrize(
    ("environment", "asked"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_SERVICE_NAME": "corral"}, False),
    ],
)
def test_traces_are_sent_only_when_the_otel_environment_asks(environment: dict[str, str], asked: bool) -> None:
    assert wanted(environment) is asked
    if not asked:
        assert JobTracing.from_environment(environment) is None


def test_an_exporter_no_package_registers_is_refused_naming_the_installed_ones() -> None:
    with pytest.raises(ConfigError) as refused:
        JobTracing.from_environment({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert "no span exporter 'zipkin' is installed" in str(refused.value) and "console" in str(refused.value)


def test_the_console_exporter_prints_the_jobs_spans_with_their_times(capfd: pytest.CaptureFixture[str]) -> None:
    tracing = JobTracing.from_environment({"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "ci-corral"})
    assert tracing is not None
    ran = runner("corral-small-a", job_id=9, registered_s=45)
    events = moves("corral-small-a", (RunnerState.PENDING, 1), (RunnerState.CREATING, 1.5), (RunnerState.BOOTING, 3))
    trace = job_trace(done(), [ran], events)
    assert trace is not None
    tracing.send(trace)
    tracing.shutdown()
    spans = console_spans(capfd.readouterr().out)
    assert [span["name"] for span in spans] == [
        "queue",
        "server.create",
        "server.boot",
        "runner.online",
        "job.run",
        "job",
    ]
    root = spans[-1]
    assert root["resource"]["attributes"]["service.name"] == "ci-corral"
    assert root["start_time"].startswith("2026-12-06T09:00:00") and root["end_time"].startswith("2026-12-06T09:01:20")
    assert {span["context"]["trace_id"] for span in spans} == {root["context"]["trace_id"]}
    assert {span["parent_id"] for span in spans[:-1]} == {root["context"]["span_id"]}


def console_spans(out: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed: JSON objects one after another (other output skipped)."""
    decoder, spans, position = json.JSONDecoder(), [], 0
    while (start := out.find('{\n    "name"', position)) != -1:
        span, position = decoder.raw_decode(out, start)
        spans.append(span)
    return spans
