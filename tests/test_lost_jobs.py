"""Jobs lost with their runner's server are re-run (`rerun_lost_jobs`, issue 30): each lost attempt once, up
to the pool's limit, and never a job that failed on its own.

The sandbox takes servers away halfway through their runner's job (`lost_mid_job_rate`, ERROR with a fault)
and fails the job `lost_contact_delay` later, as GitHub does with a runner gone silent; corral's looks (every
second here) see the server die first, which is its proof that the machine, not the job, failed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import httpx

from corral.model import JobState
from corral_sandbox.local import pool_spec
from tests.conftest import StartCorral
from tests.waiting import wait_until

ORG = "octo-org"


def sandbox_jobs(control: httpx.Client) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = control.get("/jobs").json()
    return jobs


def test_every_attempt_lost_with_its_server_is_rerun_once_and_no_job_that_failed_on_its_own_is(
    start_corral: StartCorral, control: httpx.Client
) -> None:
    control.put("/faults", json={"seed": 7, "world": {"lost_mid_job_rate": 0.5}}).raise_for_status()
    control.put("/timings", json={"lost_contact_delay": 4.0, "boot_delay": 0.2}).raise_for_status()
    pools = {"small": pool_spec(["small"], rerun_lost_jobs=1, max_runners=20)}
    corral = start_corral(pools, tuning={"lost_job_recheck": "1s"})
    outcomes = ["success", "failure"] * 6  # every other job fails on its own
    for conclusion in outcomes:
        request = {"repo": f"{ORG}/app", "labels": ["self-hosted", "small"], "duration": 2.0, "conclusion": conclusion}
        control.post("/jobs", json=request).raise_for_status()

    def settled() -> list[dict[str, Any]] | None:
        """Every job GitHub has (re-runs included) completed, and corral has decided about each it saw lost."""
        jobs = sandbox_jobs(control)
        if any(job["status"] != "completed" for job in jobs):
            return None
        for job in jobs:
            known = corral.job(job["id"])
            if job["runner_lost"] and (known is None or known.lost_at is None or known.rerun in (None, "requesting")):
                return None
        return jobs

    jobs: list[dict[str, Any]] = wait_until(
        settled, timeout=120, what="every job and re-run completed, every lost job decided"
    )
    attempts: defaultdict[int, dict[int, dict[str, Any]]] = defaultdict(dict)
    for job in jobs:
        assert job["run_attempt"] not in attempts[job["run_id"]], "one job per attempt of a run"
        attempts[job["run_id"]][job["run_attempt"]] = job
    firsts = [runs[1] for runs in attempts.values()]
    lost = [job for job in firsts if job["runner_lost"]]
    failed_alone = [job for job in firsts if job["conclusion"] == "failure" and not job["runner_lost"]]
    assert lost and failed_alone, "the seed gives both kinds"
    with corral.api() as api:  # what `corral why` and the dashboard show of each, and the usage accounting
        stories = {job["id"]: api.get(f"/api/v1/jobs/{job['id']}").raise_for_status().json() for job in lost}
        (usage,) = api.get("/api/v1/usage").raise_for_status().json()["rows"]  # the last day, by pool
    every_lost = [job for job in jobs if job["runner_lost"]]
    assert (usage["pool"], usage["lost"], usage["reruns"]) == ("small", len(every_lost), len(lost))
    for first in firsts:
        runs = attempts[first["run_id"]]
        if first["runner_lost"]:
            # Re-run once: a second attempt, the same job again.
            assert sorted(runs) == [1, 2] and runs[2]["labels"] == first["labels"]
            story = stories[first["id"]]
            assert (story["rerun"], story["run_attempt"], story["name"]) == ("requested", 1, "build")
            assert "server in ERROR" in story["lost_reason"] and "host failed" in story["lost_reason"]
            events = [entry["event"] for entry in story["timeline"]]
            assert events.index("runner_failed") < events.index("lost") < events.index("rerun")
            second = runs[2]
            if second["runner_lost"]:  # lost again: the pool's one re-run is spent
                assert corral.job(second["id"]).rerun == "limit"  # type: ignore[union-attr]
            else:
                assert second["conclusion"] == first_outcome(outcomes, first, firsts)
        else:
            assert sorted(runs) == [1], f"job {first['id']} ({first['conclusion']}) was not lost: never re-run"
            known = corral.job(first["id"])
            assert known is not None and known.status is JobState.COMPLETED and known.lost_at is None


def first_outcome(outcomes: list[str], first: dict[str, Any], firsts: list[dict[str, Any]]) -> str:
    """The conclusion the job was submitted with (its re-run ends the same way when its server survives)."""
    order = sorted(job["id"] for job in firsts)
    return outcomes[order.index(first["id"])]
