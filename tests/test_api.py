"""The REST API's own doors: parameters it refuses, headers every answer carries, and no docs page that
loads code from a CDN for anyone who asks."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from corral.api.dashboard import CONTENT_SECURITY_POLICY
from corral.clock import utcnow
from corral.model import Delivery, JobState, JobUpdate
from corral.store import jobs
from corral_sandbox.local import LocalCorral
from tests.conftest import StartCorral

EXTERNAL_ASSET = re.compile(r"""(src|href)\s*=\s*["']?(https?:)?//""", re.IGNORECASE)


@pytest.fixture
def corral(start_corral: StartCorral) -> LocalCorral:
    return start_corral(reconcile_interval="1h")


@pytest.fixture
def api(corral: LocalCorral) -> Iterator[httpx.Client]:
    with corral.api() as client:
        yield client


def problem(response: httpx.Response) -> tuple[int, list[str], str]:
    """The status, and where and what FastAPI says is wrong with the first parameter it refused."""
    first = response.json()["detail"][0]
    return response.status_code, first["loc"], first["msg"]


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("-1", "Input should be greater than or equal to 1"),
        ("0", "Input should be greater than or equal to 1"),
        ("1001", "Input should be less than or equal to 1000"),
        ("many", "Input should be a valid integer, unable to parse string as an integer"),
    ],
)
def test_a_job_limit_out_of_range_gets_422_naming_the_bound(api: httpx.Client, limit: str, message: str) -> None:
    assert problem(api.get("/api/v1/jobs", params={"limit": limit})) == (422, ["query", "limit"], message)


def test_limits_in_range_are_honoured(api: httpx.Client, corral: LocalCorral) -> None:
    polled = [
        Delivery(
            id=None,
            event="poll",
            action="queued",
            job=JobUpdate(job_id, "octo-org/app", ("small",), JobState.QUEUED, pool="small"),
        )
        for job_id in (1, 2, 3)
    ]
    corral.service.store.run_blocking(jobs.record, polled, now=utcnow())
    assert len(api.get("/api/v1/jobs", params={"limit": 1}).json()) == 1
    assert len(api.get("/api/v1/jobs", params={"limit": 1000}).json()) == 3


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        ("GET", "/api/v1/jobs", {"pool": "p" * 300}),
        ("GET", "/api/v1/jobs", {"pool": "Small; DROP TABLE jobs"}),
        ("GET", "/api/v1/runners", {"pool": "p" * 300}),
        ("GET", f"/api/v1/runners/{'r' * 33}/events", {}),
        ("GET", "/api/v1/runners/Runner%20One/events", {}),
        ("DELETE", f"/api/v1/runners/{'r' * 33}", {}),
        ("POST", f"/api/v1/pools/{'p' * 300}/drain", {}),
        ("POST", "/api/v1/pools/Not_A_Pool/undrain", {}),
    ],
)
def test_names_and_ids_that_cannot_exist_are_refused_with_422(
    api: httpx.Client, method: str, path: str, params: dict[str, str]
) -> None:
    response = api.request(method, path, params=params)
    assert response.status_code == 422, response.text
    assert "should match pattern" in response.json()["detail"][0]["msg"]


def test_well_formed_names_that_do_not_exist_are_still_404(api: httpx.Client) -> None:
    assert api.get("/api/v1/runners/0123456789/events").status_code == 404
    assert api.post("/api/v1/pools/gpu/drain").status_code == 404
    assert api.get("/api/v1/jobs", params={"pool": "gpu"}).json() == []


def test_docs_pages_are_gone_and_the_openapi_description_needs_a_read_token(
    corral: LocalCorral, api: httpx.Client
) -> None:
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect", "/openapi.json"):
        response = httpx.get(f"{corral.url}{path}")
        assert response.status_code == 404, path
        assert not EXTERNAL_ASSET.search(response.text), f"{path} loads something from another site"
    assert httpx.get(f"{corral.url}/api/v1/openapi.json").status_code == 401
    _, metrics_only = corral.create_token("prometheus", "metrics")
    scrape = {"Authorization": f"Bearer {metrics_only}"}
    assert httpx.get(f"{corral.url}/api/v1/openapi.json", headers=scrape).status_code == 403
    description = api.get("/api/v1/openapi.json").json()
    assert description["info"]["title"] == "corral"
    assert {"/api/v1/jobs", "/api/v1/runners", "/api/v1/pools/{name}/drain"} <= set(description["paths"])
    limit = next(p for p in description["paths"]["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 1000)


def test_every_answer_says_nosniff_and_no_store(corral: LocalCorral, api: httpx.Client) -> None:
    answers = {
        "health": httpx.get(f"{corral.url}/healthz"),
        "no token": httpx.get(f"{corral.url}/api/v1/pools"),
        "data": api.get("/api/v1/pools"),
        "summary": api.get("/api/v1/summary"),
        "metrics": api.get("/metrics"),
        "not found": api.get("/api/v1/nothing-here"),
        "refused parameter": api.get("/api/v1/jobs", params={"limit": -1}),
        "webhook": httpx.post(f"{corral.url}/webhook", content=b"{}"),
        "action": api.post("/api/v1/reconcile"),
    }
    missing = {
        name: dict(answer.headers)
        for name, answer in answers.items()
        if answer.headers.get("x-content-type-options") != "nosniff"
        or answer.headers.get("cache-control") != "no-store"
    }
    assert missing == {}


def test_the_dashboard_keeps_its_content_security_policy_and_loads_nothing_from_elsewhere(corral: LocalCorral) -> None:
    for path in ("/", "/dashboard/dashboard.js", "/dashboard/dashboard.css"):
        response = httpx.get(f"{corral.url}{path}")
        assert response.status_code == 200
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert not EXTERNAL_ASSET.search(response.text), f"{path} loads something from another site"
