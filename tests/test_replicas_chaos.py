"""Three replicas on the real PostgreSQL under the chaos bench: failover by kill -9, and a rolling restart.

`bench/chaos.py --replicas 3` drives three `corral serve` processes from outside with a 300-job trace over
three pools while the cloud, GitHub, webhooks, the rate limit and PostgreSQL misbehave as in the one-replica
chaos test. Webhooks go to one live replica, moved off it when it is stopped, as a load balancer would.

- failover: each replica is killed with SIGKILL once, at a moment drawn from the seed, and stays down one to
  two lease times (lease 3 s), so the others take its pools, then started again (it takes its share back);
- rolling restart: each replica in turn is stopped with SIGTERM and started again at once.

Asserted either way: every job served, no leaked server, volume, port or registration, no job accounting
for more runners than `max_runners_per_job`, no runner created twice, and no pool ever above its
`max_runners`. That last one is replayed exactly from the sandbox's server lifetimes (every create, stop,
ERROR and delete, `chaos_measures.over_max`), which is stricter than sampling the server count every 100 ms:
an excess shorter than the sampling period is counted too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

from bench import chaos_measures as measures
from bench.chaos import ChaosOptions, ChaosResult, run_chaos
from tests.test_chaos import DUPLICATES_ALLOWED, life

pytestmark = pytest.mark.e2e  # through `three_replicas`, which the e2e detection does not see into


def three_replicas(stop: Literal["kill", "term"], workdir: Path, jobs: int = 300) -> ChaosResult:
    options = ChaosOptions(
        jobs=jobs,
        kills=3,
        seed=1,
        database="postgresql",
        duration_s=jobs / 5.0,
        # Five jobs a second, short jobs and boots, so that 300 fit the pools' 9 runners in about a minute.
        job_duration_s=(0.1, 0.5),
        boot_delay_s=0.2,
        settle_s=90.0,
        drain_s=60.0,
        workdir=workdir,
        replicas=3,
        stop=stop,
        lease_time_s=3.0,
    )
    return run_chaos(options)


def assert_nothing_lost(result: ChaosResult, jobs: int = 300) -> None:
    report = result.report()  # every assertion shows the whole picture: the figures and the logs' errors
    assert len(result.victims) == 3 and sorted(replica for replica, _ in result.victims) == [0, 1, 2], report
    assert result.total == jobs, report
    assert result.served == result.total, report
    assert result.stuck_jobs == 0, report
    assert result.leaks.total == 0, report
    assert result.max_violations == 0, report
    assert result.jobs_over_max_runners_per_job == [], report
    assert result.double_creates == 0, report
    assert result.duplicates <= DUPLICATES_ALLOWED, report
    assert result.unexpected_exits == [], report
    assert result.log_counts["cannot go from deleted to failed"] == 0, report


@pytest.mark.long
@pytest.mark.timeout(300)
def test_no_job_is_lost_while_each_of_three_replicas_is_killed_in_turn(tmp_path: Path) -> None:
    result = three_replicas("kill", tmp_path)
    assert_nothing_lost(result)
    held = {pool for _, pools in result.victims for pool in pools}
    assert held & {"small", "large", "gpu"}, f"a killed replica held pools, and they failed over: {result.victims}"


@pytest.mark.long
@pytest.mark.timeout(300)
def test_a_rolling_restart_of_three_replicas_under_load_loses_nothing(tmp_path: Path) -> None:
    # Half the kill test's trace: three clean stops, each while jobs flow, are what this checks; the kill
    # test carries the 300-job load the issue asks for (CI's 20 minutes on two cores are the limit).
    assert_nothing_lost(three_replicas("term", tmp_path, jobs=150), jobs=150)


def runner(runner_id: str, job_id: int | None) -> dict[str, Any]:
    return {"id": runner_id, "job_id": job_id}


def test_a_server_counts_for_the_job_it_ran_else_for_the_job_it_was_started_for() -> None:
    lives = [life("small", 0.0, name=name) for name in ("a", "b", "c", "w")]
    for item, runner_id in zip(lives, ("ra", "rb", "rc", "rw"), strict=True):
        item["metadata"]["corral-runner"] = runner_id
    jobs: list[dict[str, Any]] = [{"id": 1, "runner_name": "a"}, {"id": 2, "runner_name": "b"}]
    # a was started for 2 but ran 1; b was started for 2 and ran it; c, started for 2, ran nothing; w is warm.
    runners = [runner("ra", 2), runner("rb", 2), runner("rc", 2), runner("rw", None)]
    assert measures.runners_per_job(lives, jobs, runners) == {1: 1, 2: 2}


def test_a_second_server_for_one_runner_is_a_double_create() -> None:
    lives = [life("small", 0.0, name=name) for name in ("a", "a", "b")]
    for item, runner_id in zip(lives, ("ra", "ra", "rb"), strict=True):
        item["metadata"]["corral-runner"] = runner_id
    assert measures.double_creates(lives) == 1
