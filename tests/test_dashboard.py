"""The dashboard: the page at `/` renders a running corral's pools and runners in a real (headless) browser,
and the endpoints it reads need a token and never hand out a secret. A person signs in with a form that
turns the token into an HttpOnly, SameSite=Strict cookie; a token in a URL is refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page

from corral.api.auth import DASHBOARD_COOKIE
from corral_sandbox.local import LocalCorral, pool_spec
from corral_sandbox.server import Sandbox
from tests.browser import CHROMIUM, browser, expect
from tests.conftest import StartCorral
from tests.waiting import wait_until

ORG = "octo-org"
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install -y chromium)"
)


def summary(corral: LocalCorral) -> dict[str, Any]:
    with corral.api() as api:
        response = api.get("/api/v1/summary")
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def pools_of(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {pool["name"]: pool for pool in body["pools"]}


def warm(corral: LocalCorral, idle: dict[str, int]) -> dict[str, Any]:
    """Wait until each named pool has exactly this many idle runners; return that summary."""

    def probe() -> dict[str, Any] | None:
        body = summary(corral)
        return body if {name: pools_of(body)[name]["idle"] for name in idle} == idle else None

    return wait_until(probe, timeout=20, what=f"idle runners {idle}")


def secrets_of(sandbox: Sandbox, corral: LocalCorral) -> list[str]:
    return [sandbox.info.pat, sandbox.info.webhook_secret, corral.token]


# -- the API the page reads -----------------------------------------------------------------------------


def test_the_page_is_public_but_its_data_needs_a_read_token(
    sandbox: Sandbox, start_corral: StartCorral, control: httpx.Client
) -> None:
    corral = start_corral({"dashtest": pool_spec(["small"])})
    metrics_token = corral.create_token("scraper", "metrics")[1]
    with httpx.Client(base_url=corral.url, timeout=10) as anonymous:
        page = anonymous.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"], "no asset may come from elsewhere"
        assert "dashtest" not in page.text, "the page itself carries no data"
        assert anonymous.get("/dashboard/dashboard.js").status_code == 200
        assert anonymous.get("/dashboard/corral.db").status_code == 404, "only the page's own files are served"
        for path in ("/api/v1/summary", "/api/v1/failures"):
            assert anonymous.get(path).status_code == 401
            forbidden = anonymous.get(path, headers={"Authorization": f"Bearer {metrics_token}"})
            assert forbidden.status_code == 403, "a metrics token cannot read the dashboard's data"


def test_summary_shows_pools_runners_jobs_and_waits(
    sandbox: Sandbox, start_corral: StartCorral, control: httpx.Client
) -> None:
    corral = start_corral(
        {"small": pool_spec(["small"], min_idle=2), "gpu": pool_spec(["gpu"], max_runners=2)}, default_pool="small"
    )
    warm(corral, {"small": 2})
    job = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["self-hosted", "gpu"], "duration": 0}).json()
    wait_until(lambda: control.get(f"/jobs/{job['id']}").json()["status"] == "completed", what="gpu job done")

    def job_counted() -> dict[str, Any] | None:
        body = summary(corral)
        return body if body["jobs"].get("completed") == 1 else None

    body = wait_until(job_counted, what="the completed job in the summary")
    pools = pools_of(body)
    assert set(pools) == {"gpu", "small"}
    assert (pools["small"]["default"], pools["small"]["ready"], pools["small"]["desired"]) == (True, True, 2)
    assert pools["gpu"]["default"] is False and pools["gpu"]["drained"] is False
    assert body["runners"]["idle"] >= 2 and set(body["runners"]) >= {"pending", "booting", "busy", "failed"}
    assert body["wait"]["samples"] == 1 and body["wait"]["median_s"] is not None
    assert body["default_pool"] == "small" and body["generation"] == 1
    assert body["quota_headroom"] == {}, "the sandbox's quota is unlimited"

    with corral.api() as api:
        api.post("/api/v1/pools/gpu/drain").raise_for_status()
    gpu = pools_of(summary(corral))["gpu"]
    assert (gpu["drained"], gpu["ready"], gpu["reason"]) == (True, False, "drained by an operator")


def test_failures_list_boot_failures_with_their_reason_and_no_secret(
    sandbox: Sandbox, start_corral: StartCorral, control: httpx.Client
) -> None:
    control.put("/faults", json={"world": {"boot_failure_rate": 1.0}}).raise_for_status()
    corral = start_corral({"small": pool_spec(["small"], min_idle=1)})

    def failures() -> list[dict[str, Any]]:
        with corral.api() as api:
            body: list[dict[str, Any]] = api.get("/api/v1/failures").json()
        return body

    listed = wait_until(failures, timeout=20, what="a failed runner listed")
    control.put("/faults", json={}).raise_for_status()
    newest = listed[0]
    assert newest["pool"] == "small" and newest["runner_name"].startswith("corral-small-")
    assert newest["reason"].startswith("server in ERROR"), newest
    assert newest["from_state"] in ("creating", "booting")
    with corral.api() as api:
        texts = [api.get(path).text for path in ("/api/v1/failures", "/api/v1/summary")]
    for text in texts:
        for secret in secrets_of(sandbox, corral):
            assert secret not in text
        assert "jit" not in text.lower()


# -- signing in -------------------------------------------------------------------------------------------


def sign_in(client: httpx.Client, token: str) -> httpx.Response:
    return client.post("/dashboard/session", json={"token": token})


def test_a_token_in_the_url_is_refused_saying_where_it_goes(sandbox: Sandbox, start_corral: StartCorral) -> None:
    corral = start_corral({"small": pool_spec(["small"])})
    token = corral.create_token("linked", "read")[1]
    with httpx.Client(base_url=corral.url, timeout=10) as client:
        for path in ("/", "/api/v1/summary", "/api/v1/pools"):
            refused = client.get(path, params={"token": token})
            assert refused.status_code == 400, path
            assert "does not take a token in the URL" in refused.text and "sign in" in refused.text
            assert token not in refused.text


def test_signing_in_sets_an_httponly_strict_cookie_that_only_reads(sandbox: Sandbox, start_corral: StartCorral) -> None:
    corral = start_corral({"small": pool_spec(["small"])})
    admin_token = corral.create_token("operator", "admin")[1]
    with httpx.Client(base_url=corral.url, timeout=10) as browser_like:
        signed_in = sign_in(browser_like, admin_token)
        assert (signed_in.status_code, signed_in.content) == (204, b"")
        cookie = signed_in.headers["set-cookie"]
        attributes = sorted(part.strip().lower().split("=")[0] for part in cookie.split(";")[1:])
        assert attributes == ["httponly", "max-age", "path", "samesite"], "no Secure over plain HTTP"
        assert "samesite=strict" in cookie.lower() and "path=/" in cookie.lower()

        assert browser_like.get("/api/v1/summary").status_code == 200, "the cookie reads the dashboard's data"
        assert browser_like.get("/api/v1/runners").status_code == 200
        assert browser_like.post("/api/v1/pools/small/drain").status_code == 401, "the cookie never acts"
        assert browser_like.get("/metrics").status_code == 401, "nor scrapes"

        signed_out = browser_like.delete("/dashboard/session")
        assert signed_out.status_code == 204 and "max-age=0" in signed_out.headers["set-cookie"].lower()
        assert DASHBOARD_COOKIE not in browser_like.cookies
        assert browser_like.get("/api/v1/summary").status_code == 401


def test_signing_in_is_refused_with_a_reason_and_never_echoes_the_token(
    sandbox: Sandbox, start_corral: StartCorral
) -> None:
    corral = start_corral({"small": pool_spec(["small"])})
    metrics_token = corral.create_token("scraper", "metrics")[1]
    with httpx.Client(base_url=corral.url, timeout=10) as client:
        wrong = sign_in(client, "corral_wrong_token")
        scoped = sign_in(client, metrics_token)
        as_form = client.post("/dashboard/session", data={"token": metrics_token})
        empty = client.post("/dashboard/session", json={"token": " "})
        assert [wrong.status_code, scoped.status_code, as_form.status_code, empty.status_code] == [401, 403, 415, 400]
        assert wrong.json()["detail"] == "invalid or revoked token"
        assert scoped.json()["detail"] == "this token's scope (metrics) does not allow read"
        assert (
            as_form.json()["detail"]
            == empty.json()["detail"]
            == ('the body must be JSON: {"token": "<an API token with the read scope>"}')
        )
        for answer in (wrong, scoped, as_form, empty):
            assert "set-cookie" not in answer.headers
            assert metrics_token not in answer.text and "corral_wrong_token" not in answer.text


# -- the page in a browser --------------------------------------------------------------------------------


def elements(dom: str, attribute: str) -> list[str]:
    return re.findall(rf'{attribute}="([^"]*)"', dom)


def open_signed_in(page: Page, url: str, token: str) -> str:
    """Open the dashboard, sign in through its form as a person would, and return the DOM once it rendered
    data from the API (or the form came back with a reason)."""
    page.goto(url)
    expect(page.locator("#login"), "the sign-in form").to_be_visible()
    page.locator("#token-input").fill(token)  # typed in as keyboard input: the value never goes through a script
    page.locator("#login-form button[type=submit]").click()
    rendered_or_refused = page.locator("body[data-rendered='true']").or_(page.locator("#login-error:not(:empty)"))
    expect(rendered_or_refused.first, "the dashboard rendered, or the form's reason").to_be_attached()
    return page.content()


@needs_chromium
def test_the_dashboard_renders_pools_and_runners_in_a_browser(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Path
) -> None:
    control.put("/quota", json={"instances": 10}).raise_for_status()
    corral = start_corral(
        {
            "small": pool_spec(["small"], min_idle=2),
            "large": pool_spec(["large"], min_idle=1, flavor="m1.large", cache_volumes={"size_gb": 5, "max": 2}),
        },
        default_pool="small",
    )
    warm(corral, {"small": 2, "large": 1})
    token = corral.create_token("browser", "read")[1]

    with browser(tmp_path / "profile") as chromium:
        page = chromium.new_page()
        dom = open_signed_in(page, f"{corral.url}/", token)
        cookies = {cookie["name"]: cookie for cookie in page.context.cookies()}
        script_sees = page.evaluate("document.cookie + JSON.stringify(sessionStorage) + JSON.stringify(localStorage)")

    assert 'data-rendered="true"' in dom, "the page rendered data from the API"
    assert sorted(elements(dom, "data-pool")) == ["large", "small"]
    assert elements(dom, "data-state").count("idle") == 3, "one table row per idle runner"
    assert re.search(r'data-pool="small".*?>default<', dom, re.S), "the default pool is marked"
    assert ">ready<" in dom and "not ready" not in dom
    assert "corral-small-" in dom and "corral-large-" in dom
    assert re.search(r"quota left: <b>\d+</b> instances", dom), "the project's headroom is in the header"
    # The warm runner of `large` holds the pool's first cache volume, new to it.
    assert "cache volumes: 1 in use, 0 free, of 2 (0% started warm)" in dom
    assert token not in dom, "the token never appears in the page"
    session = cookies[DASHBOARD_COOKIE]
    assert (session["httpOnly"], session["sameSite"], session["path"]) == (True, "Strict", "/")
    assert token not in script_sees and script_sees == "{}{}", "the page's scripts hold no token"


@needs_chromium
def test_a_signed_in_browser_stays_signed_in_until_it_signs_out(
    sandbox: Sandbox, start_corral: StartCorral, tmp_path: Path
) -> None:
    corral = start_corral({"small": pool_spec(["small"], min_idle=1)})
    warm(corral, {"small": 1})
    token = corral.create_token("browser", "read")[1]

    with browser(tmp_path / "profile") as chromium:
        page = chromium.new_page()
        open_signed_in(page, f"{corral.url}/", token)
        page.goto(f"{corral.url}/")
        expect(page.locator("body"), "the reloaded page rendered, no form").to_have_attribute("data-rendered", "true")
        page.locator("#forget").click()
        expect(page.locator("#login-error"), "signed out").to_have_text("Signed out.")
        left = [cookie["name"] for cookie in page.context.cookies()]
        page.goto(f"{corral.url}/")
        expect(page.locator("#login"), "the form again after a reload").to_be_visible()
        reason = page.locator("#login-error").text_content()

    assert DASHBOARD_COOKIE not in left
    assert reason == "", "a browser that never signed in is simply asked, not told of a refusal"


@needs_chromium
def test_the_dashboard_asks_again_when_the_token_is_refused(
    sandbox: Sandbox, start_corral: StartCorral, tmp_path: Path
) -> None:
    corral = start_corral({"small": pool_spec(["small"], min_idle=1)})
    warm(corral, {"small": 1})

    with browser(tmp_path / "profile") as chromium:
        page = chromium.new_page()
        dom = open_signed_in(page, f"{corral.url}/", "corral_wrong_token")
        cookies = page.context.cookies()

    assert "the token was refused" in dom
    assert re.search(r'<section id="login" class="login">', dom), "the token form is shown"
    assert "data-pool" not in dom and "corral_wrong_token" not in dom
    assert cookies == [], "a refused token sets no cookie"


@needs_chromium
def test_a_job_link_opens_its_story_with_why_it_waits(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Path
) -> None:
    corral = start_corral({"small": pool_spec(["small"])}, default_pool="small")
    job = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["gpu"], "duration": 0}).json()["id"]
    wait_until(lambda: corral.api().get(f"/api/v1/jobs/{job}").status_code == 200, timeout=20, what="job recorded")
    token = corral.create_token("browser", "read")[1]

    with browser(tmp_path / "profile") as chromium:
        page = chromium.new_page()
        open_signed_in(page, f"{corral.url}/#job={job}", token)
        expect(page.locator("#job-story"), "the job's story").to_be_visible()
        dom = page.content()

    assert f"Job {job}: octo-org/app, queued, no pool" in dom
    assert "<b>no_pool</b>: no pool has every label it asks for (gpu)" in dom
    assert ">received<" in dom and ">unmatched<" in dom, "the timeline's steps are listed"


@needs_chromium
def test_scale_set_jobs_are_listed_and_their_story_opens(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Path
) -> None:
    control.put("/scalesets/settings", json={"long_poll_s": 0.2}).raise_for_status()
    pools = {"small": pool_spec(["small"]), "ci": pool_spec(["ci"], intake="scale_set")}
    corral = start_corral(pools, default_pool="small")
    control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["ci"], "duration": 0}).raise_for_status()

    def served() -> int | None:
        rows = corral.api().get("/api/v1/scale-set-jobs").json()
        return int(rows[0]["id"]) if rows and rows[0]["status"] == "completed" else None

    request = wait_until(served, timeout=30, what="the scale-set job served and recorded")
    token = corral.create_token("browser", "read")[1]

    with browser(tmp_path / "profile") as chromium:
        page = chromium.new_page()
        open_signed_in(page, f"{corral.url}/#scale-set-job={request}", token)
        expect(page.locator("#job-story"), "the scale-set job's story").to_be_visible()
        dom = page.content()

    assert '<div id="scale-set-jobs-section">' in dom, "the scale-set jobs' table is shown"
    assert f"Scale-set job request {request}: {ORG}/app, completed, ci" in dom
    assert ">started<" in dom and ">completed<" in dom
