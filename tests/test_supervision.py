"""Nothing an action raises is lost: it is on the runner, in the log and in a metric (issue 10).

Each kind of action meets an exception it does not expect: a create whose JIT config answer githubkit cannot
parse (the sandbox garbles GitHub's answer), a delete whose cloud call raises, and job upkeep whose job answer
cannot be parsed. Then the far end behaves again, and corral carries on.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.model import Reason, RunnerState
from corral.store import runners
from corral_sandbox.local import LocalCorral
from corral_sandbox.local import pool_spec as spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_lifecycle import ORG, online_per_pool
from tests.waiting import wait_until


def metric(corral: LocalCorral, name: str, **labels: str) -> float:
    with corral.api() as api:
        text = api.get("/metrics").text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def events(corral: LocalCorral) -> list[Any]:
    every = []
    for runner in corral.runners():
        every += corral.service.store.run_blocking(runners.events, runner.id)
    return every


def unexpected_failures_logged(caplog: pytest.LogCaptureFixture, kind: str) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.exc_info is not None and f"{kind}" in record.getMessage() and "unexpected" in record.getMessage()
    ]


def test_an_exception_in_a_create_fails_the_runner_with_it_and_capacity_recovers(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, caplog: pytest.LogCaptureFixture
) -> None:
    garbled = {"match": "github POST /orgs/{org}/actions/runners/generate-jitconfig", "garble_rate": 1.0, "count": 1}
    control.put("/faults", json={"endpoints": [garbled]}).raise_for_status()
    corral = start_corral({"small": spec(["small"], min_idle=1)})

    def failed_with_the_exception() -> list[Any]:
        return [
            event
            for event in events(corral)
            if event.to_state is RunnerState.FAILED and event.reason is Reason.INTERNAL_ERROR
        ]

    [failure] = wait_until(failed_with_the_exception, what="the runner failed with the exception")
    assert failure.message is not None and "ValidationError" in failure.message
    assert unexpected_failures_logged(caplog, "create"), "the traceback is in the log"
    assert metric(corral, "corral_action_errors_total", kind="create") >= 1
    assert metric(corral, "corral_runner_failures_total", pool="small", reason="internal_error") >= 1
    wait_until(lambda: online_per_pool(sandbox) == {"small": 1}, timeout=30, what="a working runner after the fault")
    registrations = control.get("/stats").json()["github"]["runners"]["registered"]
    wait_until(
        lambda: control.get("/stats").json()["github"]["runners"]["registered"] == 1,
        what=f"the failed runner's registration removed (now {registrations})",
    )


def test_an_exception_in_a_delete_is_noted_on_the_runner_and_the_delete_retried(
    sandbox: Sandbox,
    control: httpx.Client,
    start_corral: StartCorral,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    corral = start_corral({"small": spec(["small"])})
    cloud = corral.service.cloud
    real_delete = cloud.delete_server
    calls: list[str] = []

    def delete_once_raising(server_id: str, in_cloud: str) -> None:
        # Fault injection inside corral's process: a delete that raises what no cloud error is mapped to.
        calls.append(server_id)
        if len(calls) == 1:
            raise RuntimeError("injected: the delete blew up")
        real_delete(server_id, in_cloud)

    monkeypatch.setattr(cloud, "delete_server", delete_once_raising)
    job = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["small"], "duration": 0}).json()
    wait_until(lambda: control.get(f"/jobs/{job['id']}").json()["status"] == "completed", what="the job ran")

    def noted() -> list[Any]:
        return [event for event in events(corral) if event.reason is Reason.INTERNAL_ERROR]

    [note] = wait_until(noted, what="the delete's exception noted on the runner")
    assert note.to_state is RunnerState.DELETING and "injected: the delete blew up" in (note.message or "")
    assert unexpected_failures_logged(caplog, "delete"), "the traceback is in the log"
    assert metric(corral, "corral_action_errors_total", kind="delete") >= 1
    wait_until(lambda: control.get("/stats").json()["cloud"]["servers"] == 0, timeout=30, what="deleted on retry")
    wait_until(lambda: corral.runners(states=[RunnerState.DELETING]) == [], what="the runner is deleted at last")


def test_an_exception_in_job_upkeep_is_logged_counted_and_the_job_asked_about_again(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, caplog: pytest.LogCaptureFixture
) -> None:
    corral = start_corral({"small": spec(["small"])}, stale_job_check="1s")
    with corral.api() as api:
        api.post("/api/v1/pools/small/drain").raise_for_status()
    garbled = {"match": "github GET /repos/{owner}/{repo}/actions/jobs/{job_id}", "garble_rate": 1.0, "count": 1}
    control.put("/faults", json={"endpoints": [garbled]}).raise_for_status()
    job = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["small"], "duration": 0}).json()
    wait_until(lambda: unexpected_failures_logged(caplog, "job"), timeout=20, what="the upkeep's exception logged")
    assert metric(corral, "corral_action_errors_total", kind="job_upkeep") >= 1

    def asked_again() -> bool:
        stored = corral.job(job["id"])
        return stored is not None and stored.checked_at is not None

    wait_until(asked_again, timeout=20, what="GitHub asked about the job again, successfully")
