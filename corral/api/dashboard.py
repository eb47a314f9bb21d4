"""The dashboard: a static page at `/` and the two read-only endpoints it needs beyond the REST API.

The page itself is public and holds no data: everything it shows comes from the authenticated API
(`/api/v1/summary`, `/api/v1/runners`, `/api/v1/jobs`, `/api/v1/failures`) with the token the operator
signs in with. So serving the page widens nothing, and what a `read` token may see is decided in one
place. Signing in (`POST /dashboard/session`, the token in a JSON body) checks the token and sets it as an
HttpOnly, SameSite=Strict cookie (`auth.DASHBOARD_COOKIE`), which the page's scripts cannot read and no
other site can make the browser send; signing out (`DELETE`) clears it. A token is never taken from the
URL, where browser history and proxy logs would keep it: `/?token=...` is refused.

The page loads nothing from outside corral (its Content-Security-Policy says so), because corral often runs
where the internet is not reachable and a dashboard must not leak the URL it was opened with.
"""

from __future__ import annotations

import statistics
from collections import Counter
from datetime import datetime
from importlib import resources
from typing import Annotated, Literal, TypedDict

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from pydantic import BaseModel

from corral.api.auth import DASHBOARD_COOKIE, URL_CREDENTIAL_REFUSAL, admit, requires, token_in_url
from corral.api.views import PoolView, pool_views
from corral.model import LIVE_STATES, RunnerState
from corral.service import Service
from corral.store import jobs, runners

SESSION_S = 12 * 3600
"""How long a dashboard sign-in lasts (the cookie's Max-Age): a browser left open asks again the next day.
Revoking the token ends it at once."""
SIGN_IN_BODY = 'the body must be JSON: {"token": "<an API token with the read scope>"}'
WAIT_SAMPLE_JOBS = 200
"""How many of the most recently received jobs the wait statistics are taken over."""

STATIC_FILES = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    # No request the page makes may carry its URL (a `#job=` link) elsewhere.
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


class DashboardPool(PoolView):
    """A pool as the dashboard shows it: the REST view plus whether an operator drained it."""

    drained: bool


class WaitStats(BaseModel):
    """Queued -> started over recent jobs, in seconds, from GitHub's own timestamps."""

    samples: int
    median_s: float | None
    p90_s: float | None
    max_s: float | None


class Summary(BaseModel):
    """Everything the dashboard's header and pool cards need, in one request."""

    generation: int
    default_pool: str | None
    reconcile_passes: int
    pools: list[DashboardPool]
    runners: dict[str, int]
    """Live runners by state; every live state is present, zero or not."""
    jobs: dict[str, int]
    """Jobs corral knows of, by status."""
    wait: WaitStats
    quota_headroom: dict[str, int] = {}
    """What the project's quota has left in the first cloud, per limited resource, as of the last look
    (empty: unlimited or not read yet): the same reading as `corral_quota_headroom`..."""
    quota_headroom_by_cloud: dict[str, dict[str, int]] = {}
    """...and in every cloud, by its name in `clouds` (a cloud whose quota is unlimited or unread maps to
    an empty map)."""


class FailureView(BaseModel):
    """One runner's move to `failed`, with the reason corral recorded."""

    at: datetime
    runner_id: str
    runner_name: str
    pool: str
    from_state: str | None
    reason: str
    """What happened, in the far end's words where it gave any."""
    code: str
    """The reason code (also the label of `corral_runner_failures_total`)."""


def wait_stats(waits: list[float]) -> WaitStats:
    if not waits:
        return WaitStats(samples=0, median_s=None, p90_s=None, max_s=None)
    ordered = sorted(waits)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return WaitStats(samples=len(ordered), median_s=statistics.median(ordered), p90_s=p90, max_s=ordered[-1])


async def sign_in_token(request: Request) -> str:
    """The token a sign-in carries. Only a JSON body is read: a page on another site can post a form here
    without asking, but not JSON, so it cannot sign this browser in as someone else."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise HTTPException(415, SIGN_IN_BODY)
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(400, SIGN_IN_BODY) from None
    text = body.get("token") if isinstance(body, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise HTTPException(400, SIGN_IN_BODY)
    return text.strip()


class SessionCookieFlags(TypedDict):
    """`Response.set_cookie` and `delete_cookie` keywords for the dashboard's session cookie."""

    path: str
    secure: bool
    httponly: bool
    samesite: Literal["strict"]


def session_cookie_flags(request: Request) -> SessionCookieFlags:
    """The session cookie's attributes, the same when it is set and when it is cleared (a browser keeps a
    cookie that a clearing with other attributes does not match): HttpOnly, SameSite=Strict, and Secure when
    the request came over HTTPS (a browser would drop a Secure cookie set over plain HTTP)."""
    return SessionCookieFlags(path="/", secure=request.url.scheme == "https", httponly=True, samesite="strict")


def static_text(name: str) -> str:
    return resources.files("corral.api").joinpath("static", name).read_text(encoding="utf-8")


def build_dashboard_router(service: Service) -> APIRouter:
    """The page and its assets (public), and `/api/v1/summary` and `/api/v1/failures` (a `read` token)."""
    router = APIRouter()
    page = static_text("index.html")
    assets = {name: (static_text(name), media_type) for name, media_type in STATIC_FILES.items()}

    @router.get("/", include_in_schema=False)
    async def index(request: Request) -> Response:
        if token_in_url(request):
            return Response(URL_CREDENTIAL_REFUSAL + "\n", status_code=400, media_type="text/plain; charset=utf-8")
        return Response(page, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    @router.post("/dashboard/session", include_in_schema=False, status_code=204)
    async def sign_in(request: Request) -> Response:
        if token_in_url(request):
            raise HTTPException(400, URL_CREDENTIAL_REFUSAL)
        text = await sign_in_token(request)
        await admit(service.store, text, "read")
        response = Response(status_code=204)
        response.set_cookie(DASHBOARD_COOKIE, text, max_age=SESSION_S, **session_cookie_flags(request))
        return response

    @router.delete("/dashboard/session", include_in_schema=False, status_code=204)
    async def sign_out(request: Request) -> Response:
        response = Response(status_code=204)
        response.delete_cookie(DASHBOARD_COOKIE, **session_cookie_flags(request))
        return response

    @router.get("/dashboard/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in assets:
            raise HTTPException(status_code=404, detail=f"no dashboard file {name!r}")
        text, media_type = assets[name]
        return Response(text, media_type=media_type, headers=PAGE_HEADERS)

    api = APIRouter(prefix="/api/v1", tags=["dashboard"], dependencies=[Depends(requires(service.store, "read"))])

    @api.get("/summary")
    async def summary() -> Summary:
        drained = service.operator.drained
        latest = service.operator.latest
        views = await pool_views(service.config, service.operator)
        pools = [DashboardPool(**view.model_dump(), drained=view.name in drained) for view in views]
        counts = await service.store.run(runners.counts)
        live = Counter({state: 0 for state in LIVE_STATES})
        for (_, state), count in counts.items():
            live[state] += count
        recent = await service.store.run(jobs.listing, limit=WAIT_SAMPLE_JOBS)
        waits = [
            (job.started_at - job.queued_at).total_seconds()
            for job in recent
            if job.started_at is not None and job.queued_at is not None
        ]
        return Summary(
            generation=service.operator.generation,
            default_pool=service.config.default_pool,
            reconcile_passes=service.operator.passes,
            pools=pools,
            runners={state.value: live[state] for state in RunnerState if state in LIVE_STATES},
            jobs=await service.store.run(jobs.counts),
            wait=wait_stats(waits),
            quota_headroom=latest.headroom.limited() if latest is not None and latest.headroom else {},
            quota_headroom_by_cloud={
                cloud: headroom.limited() if headroom else {}
                for cloud, headroom in (latest.headrooms.items() if latest is not None else ())
            },
        )

    @api.get("/failures")
    async def failures(limit: Annotated[int, Query(ge=1, le=200)] = 20) -> list[FailureView]:
        return [
            FailureView(
                at=event.at,
                runner_id=runner.id,
                runner_name=runner.name,
                pool=runner.pool,
                from_state=event.from_state.value if event.from_state else None,
                reason=event.message or event.reason.value,
                code=event.reason.value,
            )
            for event, runner in await service.store.run(runners.recent_failures, limit)
        ]

    router.include_router(api)
    return router
