"""A lost webhook costs latency, never a job: corral asks GitHub to redeliver, or polls for queued runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral_sandbox.local import LocalCorral, app_github, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.waiting import wait_until


@pytest.fixture
def start(sandbox: Sandbox, tmp_path: Path, start_corral: StartCorral) -> Callable[[str], LocalCorral]:
    def make(auth: str) -> LocalCorral:
        document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", {"small": pool_spec(["small"])})
        # Only the missed-job scan can find the job: no stale-job checks within the test's time.
        document.update(missed_job_scan="1s", stale_job_check="1h", reconcile_interval="1s")
        if auth == "app":
            document["github"] = app_github(sandbox.info)
        return start_corral(document=document)

    return make


def corral_knows(corral: LocalCorral, job_id: int) -> bool:
    return corral.job(job_id) is not None


def test_a_failed_delivery_is_redelivered_at_corrals_request(start: Any, control: httpx.Client) -> None:
    corral = start("app")
    control.put("/faults", json={"world": {"webhook_drop_rate": 1.0}}).raise_for_status()
    job = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0}).json()
    wait_until(lambda: any(d["status_code"] == 0 for d in control.get("/deliveries").json()), what="a failed delivery")
    assert not corral_knows(corral, job["id"])
    control.put("/faults", json={}).raise_for_status()
    wait_until(lambda: corral_knows(corral, job["id"]), what="the job, from a redelivery")
    # The sandbox logs an attempt once corral has answered it, so the log may trail corral by a moment.
    wait_until(lambda: any(d["redelivery"] for d in control.get("/deliveries").json()), what="a logged redelivery")
    wait_until(lambda: control.get(f"/jobs/{job['id']}").json()["status"] == "completed", what="the job ran")


def test_a_webhook_never_sent_is_found_by_polling_with_a_token(start: Any, control: httpx.Client) -> None:
    corral = start("token")
    # A repository-scoped pool is what token polling watches; this org pool's repo is learnt from a first job.
    seen = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0}).json()
    wait_until(lambda: control.get(f"/jobs/{seen['id']}").json()["status"] == "completed", what="a first job")
    wait_until(lambda: corral_knows(corral, seen["id"]), what="the first job known by webhook")
    wait_until(lambda: control.get("/stats").json()["github"]["runners"]["registered"] == 0, what="no idle runner")
    control.put("/faults", json={"world": {"webhook_lose_rate": 1.0}}).raise_for_status()
    lost = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0}).json()
    wait_until(lambda: corral_knows(corral, lost["id"]), what="the lost job, found by polling")
    wait_until(lambda: control.get(f"/jobs/{lost['id']}").json()["status"] == "completed", what="the lost job ran")
    assert control.get("/stats").json()["github"]["webhooks"]["lost"] >= 1


def test_a_webhook_never_sent_is_found_with_a_github_app_too(start: Any, control: httpx.Client) -> None:
    corral = start("app")
    seen = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0}).json()
    wait_until(lambda: control.get(f"/jobs/{seen['id']}").json()["status"] == "completed", what="a first job")
    wait_until(lambda: control.get("/stats").json()["github"]["runners"]["registered"] == 0, what="no idle runner")
    control.put("/faults", json={"world": {"webhook_lose_rate": 1.0}}).raise_for_status()
    lost = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0}).json()
    wait_until(lambda: corral_knows(corral, lost["id"]), timeout=20, what="the lost job, found by polling")
    wait_until(lambda: control.get(f"/jobs/{lost['id']}").json()["status"] == "completed", what="the lost job ran")
