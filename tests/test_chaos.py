"""The chaos bench, short: 100 jobs while corral is killed three times and every other fault strikes.

`bench/chaos.py` drives `corral serve` only from outside (processes, HTTP, the sandbox's control API, the
database as an admin would), so these tests hold whatever engine is behind the API. What they assert is
corral's promise under faults: every job served, nothing leaked, no pool above its maximum, nothing stuck,
and few runners wasted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import chaos_measures as measures
from bench.chaos import ChaosOptions, run_chaos

DUPLICATES_ALLOWED = 5
"""Servers beyond one per job (and the warm ones) that a 100-job run may create: races no engine can close
from the outside, such as a runner started for a job whose `in_progress` webhook was lost while a warm
runner had already taken it. Measured: 0-2 in runs of this size."""


@pytest.mark.long
@pytest.mark.timeout(300)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_no_job_is_lost_while_corral_is_killed_and_the_world_misbehaves(database: str, tmp_path: Path) -> None:
    options = ChaosOptions(
        jobs=100,
        kills=3,
        seed=7,
        database="postgresql" if database == "postgresql" else "sqlite",
        # Short jobs and boots, so that 100 jobs and three kills fit 25 s; the faults are the full bench's.
        duration_s=25.0,
        job_duration_s=(0.2, 1.0),
        boot_delay_s=0.2,
        settle_s=90.0,
        drain_s=60.0,
        workdir=tmp_path,
    )
    result = run_chaos(options)
    report = result.report()  # every assertion shows the whole picture: the figures and the log's errors
    assert result.total == 100, report
    assert result.served == result.total, report
    assert result.stuck_jobs == 0 and result.stuck_never_told == [], report
    assert result.leaks.total == 0, report
    assert result.max_violations == 0, report
    assert result.duplicates <= DUPLICATES_ALLOWED, report
    assert result.unexpected_exits == [], report
    assert result.log_counts["cannot go from deleted to failed"] == 0, report


def life(pool: str, created: float, stopped: float | None = None, name: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "metadata": {"corral-pool": pool},
        "created_s": created,
        "active_s": None,
        "stopped_s": stopped,
        "errored_s": None,
        "delete_requested_s": None,
        "gone_s": None,
    }


def test_a_server_replacing_one_that_stopped_at_the_same_moment_is_no_excess() -> None:
    lives = [life("small", 0.0, 5.0), life("small", 1.0, 9.0), life("small", 5.0), life("gpu", 0.0)]
    assert measures.over_max(lives, {"small": 2, "gpu": 1}) == {
        "small": measures.OverMax(episodes=0, peak=2),
        "gpu": measures.OverMax(episodes=0, peak=1),
    }


def test_each_excursion_above_the_maximum_counts_once() -> None:
    lives = [life("small", 0.0, 2.0), life("small", 1.0, 3.0), life("small", 4.0, 6.0), life("small", 5.0)]
    assert measures.over_max(lives, {"small": 1}) == {"small": measures.OverMax(episodes=2, peak=2)}


def test_duplicates_are_servers_that_ran_no_job_beyond_the_warm_ones() -> None:
    lives = [life("small", 0.0, name=name) for name in ("a", "b", "c", "d")]
    jobs: list[dict[str, Any]] = [{"runner_name": "a"}, {"runner_name": "b"}, {"runner_name": None}]
    assert measures.duplicates(lives, jobs, warm=1) == 1
    assert measures.duplicates(lives, jobs, warm=3) == 0


def test_a_stuck_job_whose_queued_event_was_lost_and_that_corral_does_not_know_was_never_told() -> None:
    jobs: list[dict[str, Any]] = [
        {"id": 1, "status": "queued"},  # queued event lost, unknown to corral: never told
        {"id": 2, "status": "queued"},  # queued event lost, but corral has it queued: corral's own failure
        {"id": 3, "status": "queued"},  # delivered: corral's own failure
        {"id": 4, "status": "completed"},  # lost, yet served
    ]
    lost = [
        {"event": "workflow_job", "action": action, "job_id": job}
        for action, job in [("queued", 1), ("queued", 2), ("in_progress", 3), ("queued", 4)]
    ]
    assert measures.never_told(jobs, lost, known_unfinished=[2, 3]) == {1}
