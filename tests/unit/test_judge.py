"""What the judge learns from a runner's move: a runner coming online ends its pool's create backoff.

In a busy pool a runner takes a job the moment it registers, so corral seldom sees it idle: it is seen busy,
or already done, straight from booting. Each of those is a runner that came online as much as one seen idle.
Measured before this was so (bench/chaos.py, 300 jobs, 20% of creates failing): runners almost never went
through idle, the pools' backoffs never ended and grew to 60 s, and a third of the jobs were still queued
when the run's settle time ran out.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from corral.config import CorralConfig
from corral.engine.creator import Creator
from corral.engine.judge import RunnerJudge
from corral.engine.running import Running
from corral.engine.supervisor import Supervisor
from corral.engine.transitions import Mover
from corral.model import Delivery, JobState, JobUpdate, Reason, Runner, RunnerState, Transition
from corral.policy import Verdict
from corral.store import Store, jobs, runners
from corral.store.runners import NewRunner, RunnerAndJob
from corral.usage import phase_seconds
from tests.minimal_config import running


class Learned:
    """Stands in for the creator: records what the judge tells it."""

    def __init__(self) -> None:
        self.online: list[str] = []
        self.failed: list[str] = []

    async def came_online(self, runner: Runner) -> None:
        self.online.append(runner.pool)

    async def booting_failed(self, runner: Runner, reason: Reason, message: str | None) -> None:
        self.failed.append(runner.pool)


def booting_runner() -> Runner:
    now = datetime.now(UTC)
    return Runner(
        id="r1",
        pool="small",
        scope="org:octo-org",
        state=RunnerState.BOOTING,
        name="corral-small-r1",
        labels=("small",),
        reason=Reason.SERVER_CREATED,
        message=None,
        created_at=now,
        state_changed_at=now,
        server_id="s1",
        job_id=7,
    )


@pytest.mark.parametrize(
    "verdict",
    [
        Verdict(RunnerState.IDLE, Reason.CAME_ONLINE),
        Verdict(RunnerState.BUSY, Reason.TOOK_JOB),
        Verdict(RunnerState.FINISHED, Reason.JOB_DONE),
    ],
    ids=["seen idle", "seen busy", "seen done"],
)
def test_a_runner_seen_online_for_the_first_time_ends_its_pools_backoff(verdict: Verdict) -> None:
    learned = Learned()
    judge = RunnerJudge(
        Running(cast(CorralConfig, None)),
        cast(Mover, None),
        cast(Supervisor, None),
        cast(Creator, learned),
        lambda after_s: None,
    )
    runner = booting_runner()
    transition = judge._transition(runner, RunnerAndJob(runner, 7, None), verdict)
    asyncio.run(judge._learn(cast(CorralConfig, None), transition))
    assert learned.online == ["small"]


@pytest.mark.parametrize(
    ("state", "verdict", "lost"),
    [
        (RunnerState.BUSY, Verdict(RunnerState.FAILED, Reason.SERVER_ERROR, "server in ERROR: host failed"), 9),
        (RunnerState.BUSY, Verdict(RunnerState.FAILED, Reason.SERVER_VANISHED, "its server disappeared"), 9),
        (RunnerState.BUSY, Verdict(RunnerState.FINISHED, Reason.RUNNER_EXITED, "server shut down"), None),
        (RunnerState.IDLE, Verdict(RunnerState.FAILED, Reason.SERVER_ERROR, "server in ERROR: host failed"), None),
    ],
    ids=["busy, server in ERROR", "busy, server vanished", "busy, server SHUTOFF", "idle, server in ERROR"],
)
def test_a_job_is_marked_lost_only_when_its_busy_runners_server_died_under_it(
    state: RunnerState, verdict: Verdict, lost: int | None
) -> None:
    """`rerun_lost_jobs` re-runs only on proof: the job table had job 9 running on this runner, and the look
    saw its server go to ERROR or vanish. A SHUTOFF server is how a runner that finished looks too; an idle
    runner ran no job."""
    judge = RunnerJudge(
        Running(cast(CorralConfig, None)),
        cast(Mover, None),
        cast(Supervisor, None),
        cast(Creator, Learned()),
        lambda after_s: None,
    )
    runner = replace(booting_runner(), state=state)
    job_status = JobState.IN_PROGRESS if state is RunnerState.BUSY else None
    transition = judge._transition(runner, RunnerAndJob(runner, 9 if job_status else None, job_status), verdict)
    assert transition.lost_job == lost


class StoppedClock:
    """A wall clock standing at one moment: the pass below happens at `at`."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return self.at.timestamp()

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("nothing here waits")


def test_a_runner_whose_job_started_and_ended_between_two_passes_was_busy_from_the_jobs_start(store: Store) -> None:
    """A short job's `in_progress` and `completed` webhooks often reach corral before the pass that would have
    seen its runner busy (they fold into one pass). Until 2026-12-06 the runner then went from idle straight to
    finished, and its history, the usage report and `corral_runner_seconds_total{phase="busy"}` held no second
    of the job (a usage test failed on it in CI). It is now busy from the job's start, as the webhook said,
    then finished when the pass saw it: idle 60 s, busy 35 s."""
    up = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
    started, completed, seen = up + timedelta(seconds=60), up + timedelta(seconds=90), up + timedelta(seconds=95)
    intent = NewRunner(pool="small", scope="org:octo-org", labels=("linux",), reason=Reason.WARM)
    [runner] = store.run_blocking(runners.add, "corral", [intent], now=up)
    for target, reason in (
        (RunnerState.CREATING, Reason.CREATE_REQUESTED),
        (RunnerState.BOOTING, Reason.SERVER_CREATED),
        (RunnerState.IDLE, Reason.CAME_ONLINE),
    ):
        [moved] = store.run_blocking(runners.apply, [Transition(runner, target, reason)], now=up)
        assert moved is not None
        runner = moved
    job = JobUpdate(41, "octo-org/app", ("linux",), JobState.IN_PROGRESS, "small", runner_name=runner.name)
    news = [
        Delivery(id="taken", event="workflow_job", action="in_progress", job=replace(job, started_at=started)),
        Delivery(
            id="done",
            event="workflow_job",
            action="completed",
            job=replace(job, status=JobState.COMPLETED, started_at=started, completed_at=completed),
        ),
    ]
    store.run_blocking(jobs.record, news, now=seen)
    clock = StoppedClock(seen)
    judge = RunnerJudge(
        running(), Mover(store, clock=clock), Supervisor(), cast(Creator, Learned()), lambda after_s: None, clock=clock
    )
    asyncio.run(judge.judge(store.run_blocking(runners.live_of_pool, "small"), None))
    moves = [(event.to_state, event.at) for event in store.run_blocking(runners.events, runner.id)][3:]
    assert moves == [
        (RunnerState.IDLE, up),
        (RunnerState.BUSY, started),
        (RunnerState.FINISHED, seen),
        (RunnerState.DELETING, seen),
    ]
    assert phase_seconds(moves, up, seen) == {"boot": 0.0, "idle": 60.0, "busy": 35.0}
