"""What corral asks of GitHub, through githubkit: JIT configs, runner listings and deletions, jobs.

One client per corral process. With a GitHub App, each scope's owner (organisation, repository owner or
enterprise) has its own installation; its id is looked up once and githubkit caches the installation
token until shortly before it expires. Server errors are retried by githubkit with backoff; rate limits
are not waited out inside a call (that could stall a reconcile pass for an hour): they surface as
`GitHubRateLimited` with the time to wait, and the engine pauses GitHub work until then.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx
import orjson
from githubkit import AppAuthStrategy, AppInstallationAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.cache import MemCacheStrategy
from githubkit.exception import RateLimitExceeded, RequestError, RequestFailed
from githubkit.retry import RetryChainDecision, RetryServerError
from githubkit_schemas.latest.models import (
    HookDeliveryItem,
    Installation,
    Job,
    OrgsOrgActionsRunnerGroupsGetResponse200,
    OrgsOrgActionsRunnersGenerateJitconfigPostResponse201,
    ReposOwnerRepoActionsRunsGetResponse200,
    ReposOwnerRepoActionsRunsRunIdJobsGetResponse200,
)

from corral import secrets
from corral.config import MAX_JIT_CONCURRENCY, GitHubConfig, ScopeConfig
from corral.github.ratelimit import RateGate
from corral.metrics import GITHUB_CALL_SECONDS, GITHUB_CALLS, GITHUB_RATE_LIMIT_REMAINING

T = TypeVar("T")

PER_PAGE = 100
SERVER_ERROR_RETRIES = 2
OTHER_CALLS_AT_ONCE = 16
"""Connections beside the JIT configs' for the other calls a pass or a look makes at once (listings,
deregistrations, job checks)."""
KEPT_OPEN = 32
"""Idle connections kept for the next calls. httpcore looks at each connection in its pool (a readiness poll
of every idle one) as each request starts and ends, so the pool is sized for the most calls corral makes at
once but keeps no more idle than a steady load reuses."""
DEFAULT_RUNNER_GROUP_ID = 1
"""Repository-scoped runners have no runner groups; GitHub takes group 1 (Default) for them."""


class SharedTransport(httpx.AsyncHTTPTransport):
    """One connection pool for every call. githubkit opens an httpx client per call and closes it after,
    which would close (and so re-handshake) the transport each time: measured ~40 ms a call on loopback.
    Here closing is ignored until corral itself shuts the transport down."""

    async def aclose(self) -> None:
        """Left open: the client githubkit closes after each call is not the owner."""

    async def close_for_real(self) -> None:
        await super().aclose()


class GitHubError(Exception):
    """A GitHub call failed; the message says which call and why, never a token or JIT config."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GitHubRateLimited(GitHubError):
    """GitHub's primary or secondary rate limit was hit; wait `retry_after` seconds before calling again."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, status=429)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RegisteredRunner:
    """A self-hosted runner as GitHub lists it."""

    id: int
    name: str
    status: str
    busy: bool
    labels: tuple[str, ...]

    @property
    def online(self) -> bool:
        return self.status == "online"


@dataclass(frozen=True)
class _RunnerPage:
    """A page of a scope's runner listing as GitHub last gave it, kept to ask again conditionally."""

    etag: str
    runners: tuple[RegisteredRunner, ...]
    more: bool
    """Whether GitHub linked a next page."""


@dataclass(frozen=True)
class JitConfig:
    """A single-use runner configuration. `encoded` is a credential: never log it or store it."""

    runner_id: int
    runner_name: str
    encoded: str

    def __post_init__(self) -> None:
        secrets.register_encoded(self.encoded)

    def __repr__(self) -> str:
        return f"JitConfig(runner_id={self.runner_id}, runner_name={self.runner_name!r}, encoded=<secret>)"


@dataclass(frozen=True)
class JobStatus:
    id: int
    status: str
    conclusion: str | None
    runner_name: str | None
    completed_at: datetime | None = None


@dataclass(frozen=True)
class QueuedJob:
    """A job found by polling instead of by webhook."""

    id: int
    run_id: int
    repository: str
    labels: list[str]
    created_at: datetime | None
    workflow: str | None = None


@dataclass(frozen=True)
class RunJob:
    """One job of a workflow run, as a history reads it: when it was queued, started and completed."""

    id: int
    repository: str
    labels: tuple[str, ...]
    status: str
    conclusion: str | None
    created_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    runner_name: str | None
    workflow: str | None


@dataclass(frozen=True)
class FailedDelivery:
    id: int
    guid: str
    event: str
    delivered_at: datetime


def scope_path(scope: ScopeConfig) -> str:
    """The REST prefix of a scope's runner endpoints."""
    if scope.org:
        return f"/orgs/{scope.org}"
    if scope.repo:
        return f"/repos/{scope.repo}"
    return f"/enterprises/{scope.enterprise}"


class GitHubClient:
    """The calls corral makes, asynchronous, with timeouts, retries for 5xx and typed results."""

    def __init__(self, config: GitHubConfig) -> None:
        self._config = config
        retry = RetryChainDecision(RetryServerError(max_retry=SERVER_ERROR_RETRIES))
        # Room for every JIT config `tuning.jit_concurrency` allows at once (a fixed pool of 32 made a setting
        # above 32 wait in the pool's queue), and for the other calls beside them.
        limits = httpx.Limits(
            max_connections=MAX_JIT_CONCURRENCY + OTHER_CALLS_AT_ONCE, max_keepalive_connections=KEPT_OPEN
        )
        self._transport = SharedTransport(limits=limits)
        common: dict[str, Any] = {
            # Our own token cache, not githubkit's process-wide default: forgetting it (below) must not
            # touch another client's tokens.
            "cache_strategy": MemCacheStrategy(),
            "async_transport": self._transport,
            "base_url": config.url + "/",
            "timeout": config.timeout,
            "http_cache": False,
            "auto_retry": retry,
        }
        if config.uses_app:
            assert config.app_id is not None and config.private_key is not None
            self._app_auth = AppAuthStrategy(config.app_id, config.private_key.get_secret_value())
            self._root: GitHub[Any] = GitHub(self._app_auth, **common)
        else:
            assert config.token is not None
            self._root = GitHub(TokenAuthStrategy(config.token.get_secret_value()), **common)
        self._common = common
        self._per_installation: dict[str, GitHub[Any]] = {}
        self._group_ids: dict[tuple[str, str], int] = {}
        self._runner_pages: dict[tuple[str, int], _RunnerPage] = {}
        """Each scope's runner listing, by (scope path, page), with GitHub's ETag: a look asks with
        `If-None-Match`, and a page that did not change comes back 304, which GitHub does not count against
        the rate limit (its REST best practices), and costs no parsing."""
        self.rate_gate = RateGate()

    async def aclose(self) -> None:
        await self._transport.close_for_real()

    # -- plumbing ---------------------------------------------------------------------------------

    async def _client_for(self, scope: ScopeConfig) -> GitHub[Any]:
        if not self._config.uses_app:
            return self._root
        key = scope.installation_key
        client = self._per_installation.get(key)
        if client is None:
            installation_id = await self._installation_id(scope)
            auth = AppInstallationAuthStrategy(self._app_auth.app_id, self._app_auth.private_key, installation_id)
            client = GitHub(auth, **{**self._common, "cache_strategy": MemCacheStrategy()})
            self._per_installation[key] = client
        return client

    def _forget_installation(self, client: GitHub[Any]) -> None:
        """An installation token GitHub refuses (revoked, app reinstalled) is dropped with its client, so
        the next call looks the installation up again and gets a fresh token instead of 401s for an hour."""
        for key, known in list(self._per_installation.items()):
            if known is client:
                del self._per_installation[key]

    async def _installation_id(self, scope: ScopeConfig) -> int:
        """The App's installation for `scope`, by GitHub's direct lookup: one call however many accounts the
        App is installed on (paging `/app/installations` cost a page per 100 on every token refresh)."""
        try:
            response = await self._call(self._root, "GET", scope.installation_path, response_model=Installation)
        except GitHubError as exc:
            if exc.status == 404:
                raise GitHubError(
                    f"the GitHub App is not installed on {scope.target!r}; install it there", status=404
                ) from None
            raise
        return int(response.parsed_data.id)

    def paused_for(self, scope: ScopeConfig) -> float:
        """Seconds until calls for `scope` may be made again (0: now), without calling GitHub.

        With an App, a scope whose installation is not known yet (a fresh start) is reached through the App's
        own credential first, to look the installation up: until then the App's limit pauses the scope too.
        """
        if not self._config.uses_app:
            return self.rate_gate.wait_s("token")
        key = scope.installation_key
        paused = self.rate_gate.wait_s(f"installation:{key}")
        if key not in self._per_installation:
            paused = max(paused, self.rate_gate.wait_s("app"))
        return paused

    def _credential(self, client: GitHub[Any]) -> str:
        """Whose rate-limit budget a client draws on: the token or App itself, or one installation."""
        if client is self._root:
            return "app" if self._config.uses_app else "token"
        key = next((key for key, known in self._per_installation.items() if known is client), "?")
        return f"installation:{key}"

    async def _call(self, client: GitHub[Any], method: str, path: str, **kwargs: Any) -> Any:
        """One request with metrics (by endpoint and status, with duration) and errors made ours.

        A credential at its rate limit is not used again before the reset: the call fails at once.
        """
        endpoint = endpoint_label(method, path)
        credential = self._credential(client)
        paused_s = self.rate_gate.wait_s(credential)
        if paused_s > 0:
            GITHUB_CALLS.labels(endpoint, "paused").inc()
            raise GitHubRateLimited(f"{method} {path}: rate limited; paused for {paused_s:.0f}s more", paused_s)
        started = time.perf_counter()
        status = "error"
        try:
            response = await client.arequest(method, path, **kwargs)
            status = str(response.status_code)
            self._saw_headers(credential, response.headers)
            return response
        except RateLimitExceeded as exc:
            status = str(exc.response.status_code)
            self._saw_headers(credential, exc.response.headers)
            retry_after = exc.retry_after.total_seconds() if isinstance(exc.retry_after, timedelta) else 60.0
            self.rate_gate.close_for(credential, retry_after)
            raise GitHubRateLimited(f"{method} {path}: rate limited for {retry_after:.0f}s", retry_after) from None
        except RequestFailed as exc:
            status = str(exc.response.status_code)
            self._saw_headers(credential, exc.response.headers)
            code = exc.response.status_code
            if code == 401 and client is not self._root:
                self._forget_installation(client)
            raise GitHubError(f"{method} {path}: HTTP {code}: {_message(exc)}", status=code) from None
        except RequestError as exc:
            raise GitHubError(f"{method} {path}: {type(exc.exc).__name__}") from None
        finally:
            GITHUB_CALLS.labels(endpoint, status).inc()
            GITHUB_CALL_SECONDS.labels(endpoint).observe(time.perf_counter() - started)

    def _saw_headers(self, credential: str, headers: httpx.Headers) -> None:
        _record_rate_limit(headers)
        self.rate_gate.observe(credential, headers)

    # -- runners ----------------------------------------------------------------------------------

    async def runner_group_id(self, scope: ScopeConfig, name: str) -> int:
        """The id of a runner group by name (cached); repository scopes always use the default group."""
        if scope.repo:
            return DEFAULT_RUNNER_GROUP_ID
        key = (scope_path(scope).lower(), name.lower())
        if key not in self._group_ids:
            client = await self._client_for(scope)
            response = await self._call(
                client,
                "GET",
                f"{scope_path(scope)}/actions/runner-groups",
                params={"per_page": PER_PAGE},
                response_model=OrgsOrgActionsRunnerGroupsGetResponse200,
            )
            for group in response.parsed_data.runner_groups:
                # GitHub's OpenAPI types runner group ids as "number"; the JIT endpoint wants an integer.
                self._group_ids[(key[0], group.name.lower())] = int(group.id)
            if key not in self._group_ids:
                raise GitHubError(f"runner group {name!r} does not exist at {scope_path(scope)}; create it")
        return self._group_ids[key]

    async def generate_jit_config(
        self, scope: ScopeConfig, name: str, labels: list[str], runner_group: str
    ) -> JitConfig:
        client = await self._client_for(scope)
        group_id = await self.runner_group_id(scope, runner_group)
        response = await self._call(
            client,
            "POST",
            f"{scope_path(scope)}/actions/runners/generate-jitconfig",
            json={"name": name, "runner_group_id": group_id, "labels": labels, "work_folder": "_work"},
            response_model=OrgsOrgActionsRunnersGenerateJitconfigPostResponse201,
        )
        data = response.parsed_data
        return JitConfig(runner_id=data.runner.id, runner_name=data.runner.name, encoded=data.encoded_jit_config)

    async def registration_token(self, scope: ScopeConfig) -> str:
        """A runner registration token for the scope (valid an hour): what the scale-set protocol exchanges
        for its Actions service connection. A credential: never log it."""
        client = await self._client_for(scope)
        response = await self._call(client, "POST", f"{scope_path(scope)}/actions/runners/registration-token")
        token = response.json().get("token")
        if not isinstance(token, str) or not token:
            raise GitHubError(f"POST {scope_path(scope)}/actions/runners/registration-token: no token in the answer")
        return token

    @property
    def api_url(self) -> str:
        return self._config.url

    def web_url(self, scope: ScopeConfig) -> str:
        """The scope's address on GitHub's web side (`https://github.com/octo-org`), which the scale-set
        registration exchange names: the API URL without `api.` or Enterprise Server's `/api/v3`."""
        url = httpx.URL(self._config.url)
        host = url.host.removeprefix("api.")
        path = url.path.rstrip("/").removesuffix("/api/v3")
        target = scope.org or scope.repo or f"enterprises/{scope.enterprise}"
        return str(url.copy_with(host=host, path=f"{path}/{target}"))

    async def list_runners(self, scope: ScopeConfig) -> list[RegisteredRunner]:
        """Every self-hosted runner registered at the scope, all pages.

        Read as plain JSON rather than githubkit's models: validating each runner costs ~1.5 ms of CPU
        (measured: 30 runners, 52 ms), which is 7.5 s a pass at 5,000 runners for five fields we need.
        """
        client = await self._client_for(scope)
        path = f"{scope_path(scope)}/actions/runners"
        runners: list[RegisteredRunner] = []
        page = 1
        while True:
            listed = await self._runner_page(client, path, page)
            runners.extend(listed.runners)
            if not listed.more:
                for stale in [key for key in self._runner_pages if key[0] == path and key[1] > page]:
                    del self._runner_pages[stale]  # the listing got shorter: those pages are gone
                return runners
            page += 1

    async def _runner_page(self, client: GitHub[Any], path: str, page: int) -> _RunnerPage:
        """One page of a runner listing: the kept one if GitHub says it did not change (304), else read."""
        kept = self._runner_pages.get((path, page))
        headers = {"If-None-Match": kept.etag} if kept is not None else None
        response = await self._call(client, "GET", path, params={"per_page": PER_PAGE, "page": page}, headers=headers)
        if response.status_code == 304 and kept is not None:
            return kept
        body = orjson.loads(response.content)  # a 100-runner page: orjson a third of json's CPU
        batch = body.get("runners", []) if isinstance(body, dict) else []
        listed = _RunnerPage(
            etag=response.headers.get("etag", ""),
            runners=tuple(
                RegisteredRunner(
                    id=int(r["id"]),
                    name=str(r["name"]),
                    status=str(r["status"]),
                    busy=bool(r["busy"]),
                    labels=tuple(str(label["name"]) for label in r.get("labels", [])),
                )
                for r in batch
            ),
            more=len(batch) >= PER_PAGE and 'rel="next"' in response.headers.get("link", ""),
        )
        if listed.etag:
            self._runner_pages[(path, page)] = listed
        else:
            self._runner_pages.pop((path, page), None)
        return listed

    async def delete_runner(self, scope: ScopeConfig, runner_id: int) -> bool:
        """Remove a registration. True when it is gone (or already was); False while it runs a job."""
        client = await self._client_for(scope)
        try:
            await self._call(client, "DELETE", f"{scope_path(scope)}/actions/runners/{runner_id}")
        except GitHubError as exc:
            if exc.status == 404:
                return True
            if exc.status == 422:
                return False
            raise
        return True

    # -- jobs -------------------------------------------------------------------------------------

    async def get_job(self, scope: ScopeConfig, repository: str, job_id: int) -> JobStatus:
        client = await self._client_for(scope)
        response = await self._call(client, "GET", f"/repos/{repository}/actions/jobs/{job_id}", response_model=Job)
        job = response.parsed_data
        return JobStatus(
            id=job.id,
            status=job.status,
            conclusion=job.conclusion,
            runner_name=job.runner_name,
            completed_at=job.completed_at,
        )

    async def queued_jobs(
        self, scope: ScopeConfig, repository: str, *, created_before: datetime, concurrency: int = 8
    ) -> list[QueuedJob]:
        """Queued jobs of a repository's queued workflow runs (for when webhooks cannot be relied on).

        Runs created after `created_before` are skipped: their webhooks may still be on the way, and
        GitHub's API costs one call per run to see its jobs.
        """
        client = await self._client_for(scope)
        runs = await self._call(
            client,
            "GET",
            f"/repos/{repository}/actions/runs",
            params={"status": "queued", "per_page": PER_PAGE},
            response_model=ReposOwnerRepoActionsRunsGetResponse200,
        )
        slots = asyncio.Semaphore(concurrency)

        async def jobs_of(run_id: int) -> list[QueuedJob]:
            async with slots:
                jobs = await self._call(
                    client,
                    "GET",
                    f"/repos/{repository}/actions/runs/{run_id}/jobs",
                    params={"filter": "latest", "per_page": PER_PAGE},
                    response_model=ReposOwnerRepoActionsRunsRunIdJobsGetResponse200,
                )
            return [
                QueuedJob(
                    id=job.id,
                    run_id=run_id,
                    repository=repository,
                    labels=list(job.labels),
                    created_at=job.created_at,
                    workflow=job.workflow_name,
                )
                for job in jobs.parsed_data.jobs
                if job.status == "queued"
            ]

        old_enough = [run.id for run in runs.parsed_data.workflow_runs if run.created_at < created_before]
        batches = await asyncio.gather(*(jobs_of(run_id) for run_id in old_enough))
        return [job for batch in batches for job in batch]

    # -- history: what `corral trace import` reads ------------------------------------------------

    async def workflow_run_ids(self, scope: ScopeConfig, repository: str, *, created: str) -> tuple[int, list[int]]:
        """The ids of the repository's workflow runs whose creation matches `created` (GitHub's search syntax
        for dates: `2026-03-01T00:00:00Z..2026-03-01T23:59:59Z`), every page GitHub answers, with the total
        count it reports. GitHub answers at most 1,000 runs of a filtered list: a total above the ids returned
        says the range must be split."""
        client = await self._client_for(scope)
        total, ids, page = 0, [], 1
        while True:
            response = await self._call(
                client,
                "GET",
                f"/repos/{repository}/actions/runs",
                params={"created": created, "per_page": PER_PAGE, "page": page},
            )
            body = response.json()
            total = int(body.get("total_count", 0))
            batch = [int(run["id"]) for run in body.get("workflow_runs", [])]
            ids.extend(batch)
            if len(batch) < PER_PAGE or 'rel="next"' not in response.headers.get("link", ""):
                return total, ids
            page += 1

    async def run_jobs(self, scope: ScopeConfig, repository: str, run_id: int) -> list[RunJob]:
        """Every job of a run, every attempt's (`filter=all`: a re-run's jobs ran on runners too). Read as
        plain JSON: a history reads thousands, and five fields and four times are all it needs."""
        client = await self._client_for(scope)
        jobs: list[RunJob] = []
        page = 1
        while True:
            response = await self._call(
                client,
                "GET",
                f"/repos/{repository}/actions/runs/{run_id}/jobs",
                params={"filter": "all", "per_page": PER_PAGE, "page": page},
            )
            batch = response.json().get("jobs", [])
            jobs.extend(_run_job(repository, job) for job in batch)
            if len(batch) < PER_PAGE or 'rel="next"' not in response.headers.get("link", ""):
                return jobs
            page += 1

    # -- webhook deliveries (GitHub App only) -----------------------------------------------------

    async def failed_deliveries(self, newer_than: datetime) -> list[FailedDelivery]:
        """The App hook's deliveries since `newer_than` that never succeeded (not even on a redelivery)."""
        if not self._config.uses_app:
            return []
        succeeded: set[str] = set()
        failed: dict[str, FailedDelivery] = {}
        cursor: str | None = None
        while True:
            params: dict[str, str | int] = {"per_page": PER_PAGE}
            if cursor:
                params["cursor"] = cursor
            response = await self._call(
                self._root, "GET", "/app/hook/deliveries", params=params, response_model=list[HookDeliveryItem]
            )
            items = response.parsed_data
            for item in items:
                if item.delivered_at < newer_than:
                    continue
                if 200 <= item.status_code < 300:
                    succeeded.add(item.guid)
                elif item.guid not in failed:
                    failed[item.guid] = FailedDelivery(item.id, item.guid, item.event, item.delivered_at)
            cursor = _next_cursor(response.headers.get("link", ""))
            if not items or cursor is None or min(item.delivered_at for item in items) < newer_than:
                break
        return [delivery for guid, delivery in failed.items() if guid not in succeeded]

    async def rerun_job(self, scope: ScopeConfig, repository: str, job_id: int) -> None:
        """Ask GitHub to run a job of a completed run again (a new job in the run's next attempt)."""
        client = await self._client_for(scope)
        await self._call(client, "POST", f"/repos/{repository}/actions/jobs/{job_id}/rerun")

    async def redeliver(self, delivery_id: int) -> None:
        await self._call(self._root, "POST", f"/app/hook/deliveries/{delivery_id}/attempts")


def _run_job(repository: str, job: dict[str, Any]) -> RunJob:
    def moment(key: str) -> datetime | None:
        value = job.get(key)
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) and value else None

    return RunJob(
        id=int(job["id"]),
        repository=repository,
        labels=tuple(str(label) for label in job.get("labels") or ()),
        status=str(job.get("status")),
        conclusion=job.get("conclusion"),
        created_at=moment("created_at"),
        started_at=moment("started_at"),
        completed_at=moment("completed_at"),
        runner_name=job.get("runner_name") or None,
        workflow=job.get("workflow_name") or None,
    )


def _next_cursor(link: str) -> str | None:
    """The `cursor` of the rel="next" link: GitHub pages hook deliveries by cursor, not page number."""
    for part in link.split(","):
        if 'rel="next"' in part and "cursor=" in part:
            url = part.split(";")[0].strip().strip("<>")
            cursor: str | None = httpx.URL(url).params.get("cursor")
            return cursor
    return None


def endpoint_label(method: str, path: str) -> str:
    """`GET /orgs/{owner}/actions/runners/{id}`: the path with names and ids folded, for bounded metrics."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    names = {"orgs": ["{owner}"], "enterprises": ["{owner}"], "users": ["{owner}"], "repos": ["{owner}", "{repo}"]}
    for offset, placeholder in enumerate(names.get(parts[0], []), start=1):
        if offset < len(parts):
            parts[offset] = placeholder
    return f"{method} /" + "/".join("{id}" if part.isdigit() else part for part in parts)


def _record_rate_limit(headers: httpx.Headers) -> None:
    remaining = headers.get("x-ratelimit-remaining")
    if remaining is not None and remaining.isdigit():
        GITHUB_RATE_LIMIT_REMAINING.labels(headers.get("x-ratelimit-resource", "core")).set(int(remaining))


def _message(exc: RequestFailed) -> str:
    try:
        body = exc.response.json()
    except ValueError:
        return exc.response.text[:200]
    return str(body.get("message", ""))[:200] if isinstance(body, dict) else ""
