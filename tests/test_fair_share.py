"""`max_runners_per_repo`: one repository's big matrix cannot take a whole pool; other repositories' jobs are
served beside it, in order of queue time."""

from __future__ import annotations

import statistics

import httpx

from bench.fair_share import most_at_once
from corral_sandbox.local import pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_end_to_end import everything_done, nothing_left
from tests.waiting import wait_until

CAP = 3
MATRIX_JOBS = 40
OTHER_JOBS = 8
JOB_S = 1.0


def test_a_repository_matrix_holds_at_most_its_cap_and_others_are_served_beside_it(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    control.put("/timings", json={"boot_delay": 0.3}).raise_for_status()
    start_corral({"shared": pool_spec(["shared"], max_runners=8, max_runners_per_repo=CAP)}, default_pool="shared")
    matrix = [{"at": 0.0, "repo": "octo-org/matrix", "labels": ["shared"], "duration": JOB_S}] * MATRIX_JOBS
    others = [
        {"at": 0.5 + index * 0.1, "repo": f"octo-org/app-{index % 4}", "labels": ["shared"], "duration": JOB_S}
        for index in range(OTHER_JOBS)
    ]
    control.post("/trace", json={"jobs": matrix + others}).raise_for_status()
    total = MATRIX_JOBS + OTHER_JOBS
    wait_until(lambda: everything_done(control, total), timeout=120, what=f"all {total} jobs completed")
    wait_until(lambda: nothing_left(control), timeout=60, what="no server or registration left")

    jobs = control.get("/jobs").json()
    matrix_jobs = [job for job in jobs if job["repo"] == "octo-org/matrix"]
    other_jobs = [job for job in jobs if job["repo"] != "octo-org/matrix"]
    assert len(matrix_jobs) == MATRIX_JOBS and len(other_jobs) == OTHER_JOBS
    assert all(job["conclusion"] == "success" for job in jobs)
    assert most_at_once(matrix_jobs) <= CAP, "the matrix ran more jobs at once than max_runners_per_repo"
    # Served beside the matrix, not after it: every other job started while most of the matrix still waited.
    matrix_starts = sorted(job["started_at_s"] for job in matrix_jobs)
    assert max(job["started_at_s"] for job in other_jobs) < matrix_starts[MATRIX_JOBS // 2]
    other_wait = statistics.median(job["started_at_s"] - job["queued_at_s"] for job in other_jobs)
    matrix_wait = statistics.median(job["started_at_s"] - job["queued_at_s"] for job in matrix_jobs)
    assert other_wait < matrix_wait
