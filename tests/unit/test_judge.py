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
from datetime import UTC, datetime
from typing import cast

import pytest

from corral.config import CorralConfig
from corral.engine.creator import Creator
from corral.engine.judge import RunnerJudge
from corral.engine.running import Running
from corral.engine.supervisor import Supervisor
from corral.engine.transitions import Mover
from corral.model import JobState, Reason, Runner, RunnerState
from corral.policy import Verdict
from corral.store.runners import RunnerAndJob


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
