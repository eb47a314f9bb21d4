"""One trace per job (issue 30): a corral whose environment asks for the console exporter prints, for each job
it served, a `job` span with the job's attributes and the stages corral saw as its children."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from corral.model import JobState
from tests.conftest import StartCorral
from tests.unit.test_job_spans import console_spans
from tests.waiting import wait_until


def test_each_job_served_gets_a_trace_on_the_console(
    start_corral: StartCorral, control: httpx.Client, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "corral-under-test")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # ms: the batch goes out at once, not after 5 s
    corral = start_corral()
    job = {"repo": "octo-org/app", "labels": ["self-hosted", "small"], "duration": 0.2}
    ids = []
    for _ in range(3):  # one after another: each job's runner is started for it, after it was queued
        ids.append(control.post("/jobs", json=job).raise_for_status().json()["id"])
        wait_until(lambda: control.get(f"/jobs/{ids[-1]}").json()["status"] == "completed", what="the job done")
    printed: list[dict[str, Any]] = []

    def traced() -> dict[int, dict[str, Any]] | None:
        printed.extend(console_spans(capfd.readouterr().out))
        roots = {span["attributes"]["github.job.id"]: span for span in printed if span["name"] == "job"}
        return roots if set(ids) <= set(roots) else None

    roots = wait_until(traced, timeout=60, what="a trace of each of the three jobs")
    for job_id in ids:
        root = roots[job_id]
        known = corral.job(job_id)
        assert known is not None and known.status is JobState.COMPLETED
        assert root["resource"]["attributes"]["service.name"] == "corral-under-test"
        assert root["attributes"] == {
            "github.job.id": job_id,
            "github.repository": "octo-org/app",
            "github.run_attempt": 1,
            "corral.pool": "small",
            "corral.runner": known.runner_name,
            "github.job.conclusion": "success",
        }
        children = [span for span in printed if span.get("parent_id") == root["context"]["span_id"]]
        names = [span["name"] for span in children]
        # Each job had a runner started for it (no warm ones): every stage, the job's run last.
        assert sorted(names) == sorted(["queue", "server.create", "server.boot", "runner.online", "job.run"])
        assert all(span["context"]["trace_id"] == root["context"]["trace_id"] for span in children)
