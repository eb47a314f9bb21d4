"""A finished job's trace, as spans: where its time went, from queued to completed, told from what corral keeps.

One root span, `job`, from the job's queue time to its completion, and a child for each stage corral saw, each
ending where the next begins:

- `queue`: until corral asked for the runner that ran it (its runner was requested; a warm runner's job
  waits for no runner, so the span ends when it started);
- `server.create`: the JIT config and the create call, until the cloud accepted the server;
- `server.boot`: from the server's create to its runner coming online;
- `runner.online`: online, until the job started on it;
- `job.run`: the job itself.

A stage corral did not see (a warm runner's create happened before the job was queued) is left out rather
than invented. Re-runs and other events on the job (lost with its server, a create that failed and was retried
with another runner) are span events on the root. Built from the database alone, after the job completed, so
any replica can tell any job's trace and the hot path records nothing for it: this module has no OpenTelemetry
import (`corral.tracing` sends what it builds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from corral.model import Job, Runner, RunnerEvent, RunnerState

Attributes = dict[str, str | int]


@dataclass(frozen=True)
class SpanEvent:
    name: str
    at: datetime
    attributes: Attributes = field(default_factory=dict)


@dataclass(frozen=True)
class Span:
    name: str
    start: datetime
    end: datetime
    attributes: Attributes = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()


@dataclass(frozen=True)
class JobTrace:
    root: Span
    children: tuple[Span, ...]


def job_trace(job: Job, runners: list[Runner], events: list[RunnerEvent]) -> JobTrace | None:
    """The spans of a completed job with its runners and their events (`stories.job_record`); None for a job
    not completed, or one GitHub never said when it was queued nor corral when it heard of it."""
    if job.completed_at is None:
        return None
    queued = job.queued_at or job.received_at
    ran = next((runner for runner in runners if runner.name == job.runner_name), None)
    attributes: Attributes = {"github.job.id": job.id, "github.repository": job.repository}
    if job.run_attempt is not None:
        attributes["github.run_attempt"] = job.run_attempt
    if job.pool is not None:
        attributes["corral.pool"] = job.pool
    if job.runner_name is not None:
        attributes["corral.runner"] = job.runner_name
    if job.conclusion is not None:
        attributes["github.job.conclusion"] = job.conclusion
    moments = _moments(ran, events) if ran is not None else {}
    requested = moments.get(RunnerState.PENDING)
    online = ran.registered_at if ran is not None else None
    # GitHub's times are whole seconds: a job "started" before its runner came online started when it did.
    started = max(job.started_at, online) if job.started_at is not None and online is not None else job.started_at
    completed = max(job.completed_at, started) if started is not None else job.completed_at
    stages = [
        # A warm runner was requested before the job was queued: the job waited until it started.
        ("queue", queued, requested if requested is not None and requested >= queued else started),
        ("server.create", moments.get(RunnerState.CREATING), moments.get(RunnerState.BOOTING)),
        ("server.boot", moments.get(RunnerState.BOOTING), online),
        ("runner.online", online, started),
        ("job.run", started, completed),
    ]
    children = tuple(
        Span(name, start, end, {"github.job.id": job.id})
        for name, start, end in stages
        if start is not None and end is not None and queued <= start <= end
    )
    root = Span("job", queued, max(completed, queued), attributes, _events(job, runners, events))
    return JobTrace(root, children)


def _moments(runner: Runner, events: list[RunnerEvent]) -> dict[RunnerState, datetime]:
    """When the runner that ran the job first entered each state."""
    moments: dict[RunnerState, datetime] = {}
    for event in events:
        if event.runner_id == runner.id and event.from_state != event.to_state:
            moments.setdefault(event.to_state, event.at)
    return moments


def _events(job: Job, runners: list[Runner], events: list[RunnerEvent]) -> tuple[SpanEvent, ...]:
    """Re-runs, a loss with the server, and each runner started for the job that failed before it ran it."""
    found: list[SpanEvent] = []
    names = {runner.id: runner.name for runner in runners}
    for event in events:
        if event.to_state is RunnerState.FAILED and names.get(event.runner_id) != job.runner_name:
            detail: Attributes = {"corral.runner": names.get(event.runner_id, ""), "reason": event.reason.value}
            found.append(SpanEvent("create.retry", event.at, detail))
    if job.lost_at is not None:
        found.append(SpanEvent("lost", job.lost_at, {"reason": job.lost_reason or ""}))
    if job.rerun == "requested" and job.rerun_at is not None:
        found.append(SpanEvent("rerun", job.rerun_at, {"github.run_attempt": (job.run_attempt or 1) + 1}))
    return tuple(sorted(found, key=lambda event: event.at))
