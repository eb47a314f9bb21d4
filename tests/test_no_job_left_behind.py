"""No job left behind: transient faults delay a job, they never abandon it (issue 9, items 1-4).

Each test lets corral's own loop run (no passes forced from the test) against the sandbox with a fault that
once made corral stop serving a job for good, and waits for the job to be served anyway.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from corral_sandbox.local import LocalCorral, app_github, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_lifecycle import ORG, online_per_pool
from tests.waiting import wait_until


@pytest.fixture
def start(start_corral: StartCorral) -> StartCorral:
    """A corral with one pool, `small`, unless `pools` says otherwise; `settings` are top-level keys."""

    def make(pools: dict[str, Any] | None = None, **settings: Any) -> LocalCorral:
        return start_corral(pools or {"small": pool_spec(["small"])}, **settings)

    return make


def queue_job(control: httpx.Client, labels: list[str], duration: float = 0.0) -> int:
    job = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": labels, "duration": duration})
    job.raise_for_status()
    return int(job.json()["id"])


def sandbox_job(control: httpx.Client, job_id: int) -> dict[str, Any]:
    body: dict[str, Any] = control.get(f"/jobs/{job_id}").json()
    return body


def completed(control: httpx.Client, job_id: int) -> bool:
    return bool(sandbox_job(control, job_id)["status"] == "completed")


def counters(control: httpx.Client) -> dict[str, int]:
    body: dict[str, int] = control.get("/stats").json()["counters"]
    return body


# -- 1. a transient cloud error while checking pools at start ---------------------------------------------


@pytest.mark.parametrize(
    ("fault", "what"),
    [
        ({"match": "openstack GET /image/v2/images*", "status": 500, "count": 2}, "two Glance 500s"),
        ({"match": "openstack POST /identity/v3/auth/tokens", "status": 401, "count": 1}, "a Keystone 401"),
    ],
)
def test_a_cloud_error_while_checking_pools_at_start_is_retried(
    sandbox: Sandbox, control: httpx.Client, start: StartCorral, fault: dict[str, Any], what: str
) -> None:
    control.put("/faults", json={"endpoints": [{**fault, "error_rate": 1.0}]}).raise_for_status()
    corral = start({"small": pool_spec(["small"], min_idle=1)})
    wait_until(lambda: counters(control).get("openstack_injected_errors") == fault["count"], what=what)
    job_id = queue_job(control, ["small"])
    wait_until(lambda: completed(control, job_id), timeout=30, what=f"the job served despite {what} at start")
    with corral.api() as api:
        assert api.get("/readyz").status_code == 200


def test_readyz_names_a_pool_that_is_not_ready(sandbox: Sandbox, start: StartCorral) -> None:
    pools = {"small": pool_spec(["small"]), "broken": pool_spec(["broken"], image="no-such-image")}
    corral = start(pools, default_pool="small")

    def readyz() -> httpx.Response:
        with httpx.Client(base_url=corral.url) as client:
            return client.get("/readyz")

    def not_ready() -> dict[str, Any] | None:
        answer = readyz()
        pools = answer.json()["pools"]
        checked = "no-such-image" in (pools["broken"]["reason"] or "") and pools["small"]["ready"]
        return pools if answer.status_code == 503 and checked else None

    pools_status = wait_until(not_ready, what="/readyz answering 503")
    assert pools_status["broken"]["ready"] is False
    assert "no-such-image" in pools_status["broken"]["reason"]
    assert pools_status["small"]["ready"] is True


# -- 2. max_runners_per_job bounds duplicates, it does not abandon jobs ------------------------------------


def test_failed_creates_do_not_count_toward_max_runners_per_job(
    sandbox: Sandbox, control: httpx.Client, start: StartCorral
) -> None:
    create = {"match": "openstack POST /compute/v2.1/servers", "error_rate": 1.0, "status": 503, "count": 3}
    control.put("/faults", json={"endpoints": [create]}).raise_for_status()
    start(max_runners_per_job=3)
    job_id = queue_job(control, ["small"])
    wait_until(lambda: counters(control).get("openstack_injected_errors") == 3, what="three refused creates")
    wait_until(lambda: completed(control, job_id), timeout=45, what="the job served after three failed creates")


def test_a_job_whose_runners_went_to_other_jobs_is_still_served(
    sandbox: Sandbox, control: httpx.Client, start: StartCorral
) -> None:
    # Three older jobs corral never hears of (lost webhooks, no polling within the test) take the runners
    # started for a new one, oldest first, as GitHub hands jobs to runners.
    control.put("/faults", json={"world": {"webhook_lose_rate": 1.0}}).raise_for_status()
    older = [queue_job(control, ["small"]) for _ in range(3)]
    control.put("/faults", json={}).raise_for_status()
    corral = start(max_runners_per_job=3, missed_job_scan="1h", stale_job_check="1s")
    job_id = queue_job(control, ["small"])
    wait_until(lambda: all(completed(control, job) for job in older), timeout=45, what="the older jobs ran")
    wait_until(lambda: completed(control, job_id), timeout=45, what="the new job served in the end")
    wait_until(lambda: (job := corral.job(job_id)) and job.status == "completed", what="corral knows")


# -- 3. a lost `completed` webhook does not leave a job in progress for ever --------------------------------


def test_a_job_whose_completed_webhook_is_lost_is_completed_from_github(
    sandbox: Sandbox, control: httpx.Client, start: StartCorral
) -> None:
    corral = start(stale_job_check="1s")
    job_id = queue_job(control, ["small"], duration=1.0)

    def in_progress_in_corral() -> bool:
        stored = corral.job(job_id)
        return stored is not None and stored.status == "in_progress"

    wait_until(in_progress_in_corral, what="the job in progress, as corral knows it")
    control.put("/faults", json={"world": {"webhook_lose_rate": 1.0}}).raise_for_status()
    wait_until(lambda: completed(control, job_id), what="the job done on GitHub")

    def completed_in_corral() -> bool:
        stored = corral.job(job_id)
        return stored is not None and stored.status == "completed" and stored.conclusion == "success"

    wait_until(completed_in_corral, timeout=30, what="corral to learn from GitHub that the job completed")
    with corral.api() as api:
        jobs = api.get("/api/v1/jobs", params={"status": "in_progress"}).json()
    assert jobs == [], "no job left in progress on the API"


def test_jobs_whose_runners_are_gone_agree_with_github_one_pass_after_corral_notices(
    sandbox: Sandbox, control: httpx.Client, start: StartCorral
) -> None:
    """Issue 25, item 16: a job's end heard of by no webhook is asked of GitHub as soon as corral sees its
    runner gone, not `stale_job_check` later (up to a minute and a half by default, which left jobs shown
    `in_progress` long after GitHub had finished them). Neither clock can help here: no stale check within
    the test (1h), and corral looks at the far ends and runs its job upkeep only when asked (1h)."""
    corral = start(stale_job_check="1h", reconcile_interval="1h")
    jobs = [queue_job(control, ["small"], duration=3600.0) for _ in range(3)]

    def corral_has_them_running() -> bool:
        return all((job := corral.job(job_id)) is not None and job.status == "in_progress" for job_id in jobs)

    wait_until(corral_has_them_running, what="every job in progress, as corral knows it")
    control.put("/faults", json={"world": {"webhook_lose_rate": 1.0}}).raise_for_status()
    for job_id in jobs:
        control.post(f"/jobs/{job_id}/cancel").raise_for_status()  # ends the job; its runner exits
    wait_until(lambda: control.get("/stats").json()["github"]["runners"]["registered"] == 0, what="runners gone")
    assert [corral.job(job_id).status for job_id in jobs] == ["in_progress"] * 3  # type: ignore[union-attr]
    corral.settle()  # one look at the far ends, and the pool's pass that sees the runners gone

    def table() -> dict[int, tuple[str, str | None]]:
        stored = {job_id: corral.job(job_id) for job_id in jobs}
        return {job_id: (job.status, job.conclusion) for job_id, job in stored.items() if job is not None}

    def github() -> dict[int, tuple[str, str | None]]:
        return {
            job_id: (body["status"], body["conclusion"]) for job_id in jobs if (body := sandbox_job(control, job_id))
        }

    wait_until(lambda: table() == github(), what="corral's job table to agree with GitHub")
    assert table() == dict.fromkeys(jobs, ("completed", "cancelled"))


# -- 4. at GitHub's rate limit corral stops calling until the reset ------------------------------------------


def test_at_the_rate_limit_corral_stops_calling_github_until_the_reset(
    sandbox: Sandbox, control: httpx.Client, start: StartCorral
) -> None:
    start({"small": pool_spec(["small"], min_idle=1)}, reconcile_interval="1s")
    wait_until(lambda: online_per_pool(sandbox) == {"small": 1}, what="a warm runner")
    control.put("/rate-limit", json={"remaining": 0, "reset_in": 6}).raise_for_status()
    first = queue_job(control, ["small"])
    wait_until(lambda: completed(control, first), timeout=20, what="a job, served by the warm runner")
    # Its replacement needs a JIT config, which only the reset allows: a second job served proves the resume.
    second = queue_job(control, ["small"])
    wait_until(lambda: completed(control, second), timeout=45, what="a job served after the reset")
    refused = counters(control).get("github_rate_limited", 0)
    # Refused: the calls already on their way when the limit closed (a JIT config per create under way, a
    # listing); after the first refusal corral makes none until the reset (a pass a second would be ~6 more).
    assert 1 <= refused <= 4, f"corral should stop at the limit, not keep calling: {refused} refused calls"


def test_a_github_app_at_its_rate_limit_starts_no_runner_before_the_reset(
    sandbox: Sandbox, control: httpx.Client, start: StartCorral
) -> None:
    """A corral that starts (or restarts) while its App is at the limit must learn its installation before it can
    do anything for a scope: the App's own limit pauses the scope too. Found by bench/chaos.py: a restart during
    the limit started a runner a second for nothing, each failing at its JIT config, and the failures' backoff
    held creation back well past the reset."""
    control.post(f"/jobs/{queue_job(control, ['small'])}/cancel").raise_for_status()  # the org and its App
    control.put("/rate-limit", json={"remaining": 0, "reset_in": 6}).raise_for_status()
    corral = start(reconcile_interval="1s", github=app_github(sandbox.info))
    job_id = queue_job(control, ["small"])
    wait_until(lambda: completed(control, job_id), timeout=30, what="the job, served after the reset")
    with corral.api() as api:
        runners = api.get("/api/v1/runners", params={"include_deleted": True}).json()
    refused = [runner["name"] for runner in runners if "JIT config" in (runner["message"] or "")]
    assert len(refused) <= 1, f"only the call that met the limit may fail, not one runner a pass: {refused}"
