"""A dependency's outage is logged once when it begins and once when it ends, never as a traceback per call
(issue 25, item 17): the real PostgreSQL, its connections ended with `pg_terminate_backend`, then refused."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx
import psycopg
import pytest

from corral.metrics import REGISTRY
from corral.outages import DependencyHealth
from corral.store import DatabaseUnavailable, Store, runners
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.store_urls import POSTGRES_ADMIN_URL, postgres_url
from tests.test_store import add
from tests.waiting import wait_until


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def unexpected_errors() -> float:
    """Every count of an unexpected error (whose alerts say: a bug, report it), whatever its labels."""
    families = ("corral_action_errors", "corral_reconcile_errors")
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name in families
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


@contextmanager
def administered(url: str) -> Iterator[tuple[Callable[[], int], Callable[[bool], None]]]:
    """`end()` ends every connection to the test's database (how many it ended); `allow(False)` has the server
    refuse new ones until `allow(True)` (always restored on the way out)."""
    database = url.rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:

        def end() -> int:
            query = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s"
            row = admin.execute(query, (database,)).fetchone()
            return int(row[0]) if row else 0

        def allow(allowed: bool) -> None:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allowed).lower()}')

        try:
            yield end, allow
        finally:
            allow(True)


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(record.levelname, record.getMessage()) for record in caplog.records if record.name == "corral.outages"]


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """corral's own, and the server's (a request that raised); the HTTP clients' are silenced in production."""
    return [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if (record.exc_info or record.exc_text) and record.name.startswith(("corral", "uvicorn"))
    ]


def queue_job(control: httpx.Client) -> int:
    job = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0})
    job.raise_for_status()
    return int(job.json()["id"])


def served(control: httpx.Client, corral: LocalCorral, job_id: int) -> bool:
    """Completed on GitHub, and corral's table says so too."""
    known = corral.job(job_id)
    done = control.get(f"/jobs/{job_id}").json()["status"] == "completed"
    return done and known is not None and known.status == "completed"


def test_the_store_logs_a_database_outage_once_when_it_begins_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    unavailable_before = sample("corral_database_errors_total", kind="unavailable")
    outages_before = sample("corral_dependency_outages_total", dependency="database")
    with postgres_url() as url:
        store = Store(url)
        try:
            store.migrate()
            store.report_outages()
            add(store)
            with administered(url) as (end, allow):
                for _ in range(4):
                    assert end() >= 1, "the store's connection was there to end"
                    assert len(store.run_blocking(runners.listing)) == 1, "served on a new connection"
                assert outage_lines(caplog) == [], "a connection replaced at once is no outage"
                allow(False)
                end()
                for _ in range(3):
                    with pytest.raises(DatabaseUnavailable, match="the database is unreachable"):
                        store.run_blocking(runners.listing)
                assert sample("corral_dependency_up", dependency="database") == 0.0
                allow(True)
                assert len(store.run_blocking(runners.listing)) == 1
        finally:
            store.close()
    [(began_level, began), (ended_level, ended)] = outage_lines(caplog)
    assert (began_level, ended_level) == ("WARNING", "INFO")
    assert began.startswith("database unreachable since ") and "OperationalError" in began
    assert "meanwhile corral records no webhook (each is answered 503; once it is back" in began
    assert ended.startswith("database reachable again after ")
    assert tracebacks(caplog) == []
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == [began]
    assert sample("corral_dependency_up", dependency="database") == 1.0
    assert sample("corral_dependency_outages_total", dependency="database") == outages_before + 1
    assert sample("corral_database_errors_total", kind="unavailable") == unavailable_before + 3, "the refused calls"


def test_while_postgresql_refuses_connections_corral_logs_the_outage_twice_and_no_traceback(
    sandbox: Sandbox,
    control: httpx.Client,
    start_corral: StartCorral,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The whole corral (engine passes, job upkeep, leases, wakes, webhooks, the API) through the outage the
    issue describes: connections ended four times, then refused; a job queued meanwhile is served after."""
    caplog.set_level(logging.INFO)
    errors_before = unexpected_errors()
    with postgres_url() as url:
        document = corral_config(sandbox.info, url, {"small": pool_spec(["small"])}, missed_job_scan="1s")
        corral = start_corral(document=document)
        # A first job, served as usual: corral learns the repository, whose queued jobs it polls for.
        first = queue_job(control)
        wait_until(lambda: served(control, corral, first), what="a first job served")
        with administered(url) as (end, allow):
            for _ in range(4):
                end()
                corral.settle()  # a look and a pass, on new connections
            assert outage_lines(caplog) == []
            allow(False)
            end()
            corral.settle()  # the look and the pass fail: no runner is judged or started meanwhile
            job = queue_job(control)
            wait_until(
                lambda: any(d["status_code"] == 503 for d in control.get("/deliveries").json()),
                what="the job's webhook answered 503",
            )
            with corral.api() as api:
                answer = api.get("/api/v1/jobs")
            assert (answer.status_code, answer.json()) == (
                503,
                {"detail": "corral's database is unreachable now; try again shortly"},
            )
            assert answer.headers["Retry-After"] == "5"
            allow(True)
        wait_until(lambda: served(control, corral, job), timeout=30, what="the job queued meanwhile, served")
        corral.stop()
    lines = outage_lines(caplog)
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert lines[0][1].startswith("database unreachable since ")
    assert lines[1][1].startswith("database reachable again after ")
    assert tracebacks(caplog) == []
    assert unexpected_errors() == errors_before, "an outage is no bug: the unexpected-error alerts stay quiet"


def test_one_outage_one_line_each_way_and_a_failure_older_than_the_latest_success_is_old_news(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Calls run in several threads at once: one that began before another's success and failed after it
    says nothing new (the dependency answered since), and begins no outage."""
    caplog.set_level(logging.INFO)
    now = [0.0]
    health = DependencyHealth(
        "cloud", "waits", clock=lambda: datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), monotonic=lambda: now[0]
    )
    now[0] = 2.0
    health.succeeded()
    health.failed(OSError("refused"), began_at=1.0)
    assert not health.down and outage_lines(caplog) == []
    health.failed(OSError("refused"), began_at=3.0)
    health.failed(OSError("refused again"), began_at=4.0)
    assert health.down
    now[0] = 10.5
    health.succeeded()
    health.succeeded()
    assert outage_lines(caplog) == [
        (
            "WARNING",
            "cloud unreachable since 2026-01-02T03:04:05+00:00 (OSError: refused); meanwhile corral waits. "
            "Logged again when it is back",
        ),
        ("INFO", "cloud reachable again after 8.5s (unreachable since 2026-01-02T03:04:05+00:00)"),
    ]
    assert sample("corral_dependency_up", dependency="cloud") == 1.0


def test_a_cloud_or_github_outage_is_logged_once_when_it_begins_and_once_when_it_ends(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, caplog: pytest.LogCaptureFixture
) -> None:
    """Each look lists every cloud's servers and GitHub's runners: it is both dependencies' probe. Looks
    happen only when the test asks (`settle`), so how many fail is known; the lines are one per outage."""
    caplog.set_level(logging.INFO)
    corral = start_corral({"small": pool_spec(["small"])}, reconcile_interval="1h")
    cloud = f"cloud:{corral.service.cloud.names[0]}"
    before = {name: sample("corral_dependency_outages_total", dependency=name) for name in (cloud, "github")}
    corral.settle()
    down = [
        {"match": "openstack GET /compute/v2.1/servers/detail", "error_rate": 1.0, "status": 503},
        {"match": "github GET */actions/runners", "error_rate": 1.0, "status": 502},
    ]
    control.put("/faults", json={"endpoints": down}).raise_for_status()
    for _ in range(3):
        corral.settle()
    assert [sample("corral_dependency_up", dependency=name) for name in (cloud, "github")] == [0.0, 0.0]
    control.put("/faults", json={}).raise_for_status()
    corral.settle()
    lines = sorted(outage_lines(caplog), key=lambda line: (line[1].split()[0], line[0] == "INFO"))
    assert [(level, message.split(" since ")[0].split(" after ")[0]) for level, message in lines] == [
        ("WARNING", f"{cloud} unreachable"),
        ("INFO", f"{cloud} reachable again"),
        ("WARNING", "github unreachable"),
        ("INFO", "github reachable again"),
    ]
    assert "(CloudTransientError: " in lines[0][1] and "meanwhile corral judges none of that cloud's" in lines[0][1]
    assert "HTTP 502" in lines[2][1] and "meanwhile corral judges no runner by its registration" in lines[2][1]
    assert tracebacks(caplog) == []
    assert [sample("corral_dependency_up", dependency=name) for name in (cloud, "github")] == [1.0, 1.0]
    assert {name: sample("corral_dependency_outages_total", dependency=name) - before[name] for name in before} == {
        cloud: 1.0,
        "github": 1.0,
    }
