"""Which queued jobs get a runner now (`policy.judge_demand`): how long a job whose runners keep going to other
jobs is held, and how long a job presumed taken waits for GitHub's word, to the second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corral.model import QueuedJob
from corral.policy import Demand, DemandTuning

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
TUNING = DemandTuning(
    stale_after=timedelta(seconds=60),
    max_runners_per_job=2,
    max_hold=timedelta(seconds=300),
    busy_covers_job=timedelta(seconds=120),
    confirm_after=timedelta(seconds=45),
)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def judged(job: QueuedJob) -> str:
    demand = TUNING.judge([job], NOW)
    return "wanted" if demand.wanted else "held" if demand.held else "left out"


@pytest.mark.parametrize(
    ("diverted", "hold_s"),
    [(2, 60), (3, 120), (4, 240), (5, 300), (9, 300)],
)
def test_a_job_diverted_n_times_is_held_for_a_wait_that_doubles_up_to_max_hold(diverted: int, hold_s: int) -> None:
    """GitHub last confirmed it queued `hold_s - 1` s or `hold_s` s after its last diversion (10 s ago)."""
    diverted_at = ago(hold_s + 10)
    early = QueuedJob(1, ago(2000), diverted_at + timedelta(seconds=hold_s - 1), diverted, diverted_at)
    due = QueuedJob(1, ago(2000), diverted_at + timedelta(seconds=hold_s), diverted, diverted_at)
    assert (judged(early), judged(due)) == ("held", "wanted")


def test_a_job_diverted_fewer_times_than_max_runners_per_job_is_demand() -> None:
    assert judged(QueuedJob(1, ago(10), None, runners_diverted=1, diverted_at=ago(5))) == "wanted"


@pytest.mark.parametrize(
    ("received_s_ago", "checked_s_ago", "outcome"),
    [
        (59, None, "wanted"),
        (60, None, "wanted"),
        (61, None, "left out"),
        (3600, 60, "wanted"),
        (3600, 61, "left out"),
    ],
)
def test_a_job_older_than_stale_job_check_is_demand_only_if_github_confirmed_it_within_that_time(
    received_s_ago: int, checked_s_ago: int | None, outcome: str
) -> None:
    checked = None if checked_s_ago is None else ago(checked_s_ago)
    assert judged(QueuedJob(1, ago(received_s_ago), checked)) == outcome


@pytest.mark.parametrize(
    ("taken_s_ago", "checked_after_taken_s", "outcome"),
    [
        (10, None, "left out"),  # presumed taken: no runner, the webhook is on its way
        (50, 44, "left out"),  # asked too soon after: the runner that took it may not have said so yet
        (50, 45, "wanted"),  # GitHub says still queued 45 s after: demand again
        (121, None, "wanted"),  # busy_covers_job (120 s) is over: fresh jobs are demand again
    ],
)
def test_a_job_whose_runner_took_another_waits_45_s_for_githubs_word(
    taken_s_ago: int, checked_after_taken_s: int | None, outcome: str
) -> None:
    taken = ago(taken_s_ago)
    checked = None if checked_after_taken_s is None else taken + timedelta(seconds=checked_after_taken_s)
    assert judged(QueuedJob(1, ago(30), checked, maybe_taken_at=taken)) == outcome


def test_demand_keeps_the_queue_order_and_splits_held_from_wanted() -> None:
    jobs = [
        QueuedJob(1, ago(50), None),
        QueuedJob(2, ago(40), None, runners_diverted=2, diverted_at=ago(10)),
        QueuedJob(3, ago(30), None),
        QueuedJob(4, ago(200), None),
    ]
    assert TUNING.judge(jobs, NOW) == Demand(wanted=[1, 3], held=[2], unconfirmed=[4])
