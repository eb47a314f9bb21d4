"""Usage accounting: runner-seconds per pool, repository and workflow, split into boot, idle and busy, with
jobs and mean queue time; the sums agree with the runner history, the API, the CSV and the metric alike."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from corral.cli import main
from corral.metrics import REGISTRY
from corral_sandbox.local import LocalCorral, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_end_to_end import everything_done
from tests.test_lifecycle import converge
from tests.waiting import wait_until

PHASE_OF = {"pending": "boot", "creating": "boot", "booting": "boot", "idle": "idle", "busy": "busy"}
JOBS = 16


def from_history(corral: LocalCorral, since: datetime, until: datetime) -> dict[str, dict[str, float]]:
    """Seconds per pool and phase, summed here from each runner's events as the API lists them."""
    totals: dict[str, dict[str, float]] = {}
    with corral.api() as api:
        runners = api.get("/api/v1/runners", params={"include_deleted": True}).json()
        for runner in runners:
            events = api.get(f"/api/v1/runners/{runner['id']}/events").json()
            times = [datetime.fromisoformat(event["at"]) for event in events] + [until]
            pool = totals.setdefault(runner["pool"], {"boot": 0.0, "idle": 0.0, "busy": 0.0})
            for event, entered, left in zip(events, times, times[1:], strict=False):
                phase = PHASE_OF.get(event["to_state"])
                start, end = max(entered, since), min(left, until)
                if phase and end > start:
                    pool[phase] += (end - start).total_seconds()
    return totals


def busy_metric(pool: str) -> float:
    return REGISTRY.get_sample_value("corral_runner_seconds_total", {"pool": pool, "phase": "busy"}) or 0.0


def test_usage_on_a_trace_agrees_with_the_runner_history(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, capsys: pytest.CaptureFixture[str]
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    busy_before = {pool: busy_metric(pool) for pool in ("small", "large")}
    corral = start_corral(
        {"small": pool_spec(["small"], min_idle=1), "large": pool_spec(["large"])}, default_pool="small"
    )
    jobs = [
        {
            "at": index * 0.1,
            "repo": "octo-org/app" if index % 2 else "octo-org/site",
            "labels": ["large" if index % 4 == 3 else "small"],
            "duration": 0.5,
            "workflow_name": "build" if index % 3 else "test",
        }
        for index in range(JOBS)
    ]
    control.post("/trace", json={"jobs": jobs}).raise_for_status()
    wait_until(lambda: everything_done(control, JOBS), timeout=90, what=f"all {JOBS} jobs completed")

    def all_known_done() -> bool:
        with corral.api() as api:
            listed = api.get("/api/v1/jobs", params={"status": "completed"}).json()
            live = api.get("/api/v1/runners", params={"state": ["busy", "finished", "deleting"]}).json()
        return len(listed) == JOBS and not live

    converge(corral, all_known_done, "corral saw every job complete and every used runner deleted", timeout=60)
    until = datetime.now(UTC)
    window = {"since": since.isoformat(), "until": until.isoformat()}
    with corral.api() as api:
        by_pool = api.get("/api/v1/usage", params={**window, "group_by": "pool"}).json()
        by_repo = api.get("/api/v1/usage", params={**window, "group_by": "repository,workflow"}).json()

    history = from_history(corral, since, until)
    rows = {row["pool"]: row for row in by_pool["rows"]}
    assert set(rows) == {"small", "large"}
    for pool, row in rows.items():
        for phase in ("boot", "idle", "busy"):
            assert row[f"{phase}_s"] == pytest.approx(history[pool][phase], abs=0.01), (pool, phase)
        assert row["runner_s"] == pytest.approx(row["boot_s"] + row["idle_s"] + row["busy_s"], abs=0.01)
        assert row["busy_s"] > 0 and row["mean_queue_s"] is not None
        # Every busy phase has ended: the metric counted each as it ended, to the same total.
        assert busy_metric(pool) - busy_before[pool] == pytest.approx(row["busy_s"], abs=0.01)
    assert sum(row["jobs"] for row in rows.values()) == JOBS
    assert rows["large"]["jobs"] == sum(1 for job in jobs if job["labels"] == ["large"])

    keyed = {(row["repository"], row["workflow"]): row for row in by_repo["rows"]}
    expected_jobs = {
        (repo, workflow): sum(1 for job in jobs if (job["repo"], job["workflow_name"]) == (repo, workflow))
        for repo in ("octo-org/app", "octo-org/site")
        for workflow in ("build", "test")
    }
    assert {key: keyed[key]["jobs"] for key in expected_jobs} == expected_jobs
    assert sum(row["runner_s"] for row in by_repo["rows"]) == pytest.approx(
        sum(row["runner_s"] for row in rows.values()), abs=0.05
    ), "the same seconds, whichever way they are grouped"

    assert (
        main(
            [
                "usage",
                "--csv",
                "--since",
                since.isoformat(),
                "--until",
                until.isoformat(),
                "--url",
                corral.url,
                "--token",
                corral.token,
            ]
        )
        == 0
    )
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["pool"] for row in table] == ["large", "small"]
    assert float(table[1]["busy_s"]) == pytest.approx(rows["small"]["busy_s"], abs=0.001)


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"group_by": "team"}, "group_by takes distinct names among pool, repository, workflow"),
        ({"group_by": "pool,pool"}, "group_by takes distinct names"),
        ({"since": "2026-12-01T00:00:00Z", "until": "2026-11-30T00:00:00Z"}, "since must be before until"),
        ({"since": "2026-01-01T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "at most 31 days"),
    ],
)
def test_a_usage_question_that_cannot_be_answered_says_why(
    sandbox: Sandbox, start_corral: StartCorral, params: dict[str, Any], detail: str
) -> None:
    corral = start_corral()
    with corral.api() as api:
        answer = api.get("/api/v1/usage", params=params)
    assert answer.status_code == 422 and detail in answer.text


def test_corral_usage_refuses_a_time_it_cannot_read(sandbox: Sandbox, start_corral: StartCorral) -> None:
    corral = start_corral()
    with pytest.raises(SystemExit, match="neither an ISO 8601 time"):
        main(["usage", "--since", "yesterday", "--url", corral.url, "--token", corral.token])
