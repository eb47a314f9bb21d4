"""Workflow runs and jobs of a repository, as corral polls them when a webhook may have been lost."""

from __future__ import annotations

import operator
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral_sandbox.github import payloads
from corral_sandbox.github.errors import GitHubError, not_found
from corral_sandbox.github.model import Repository, WorkflowRun
from corral_sandbox.github.routes.common import authorize, paginated, path_int, principal, require_permission, urls
from corral_sandbox.github.state import GitHubState

RUN_STATUSES = {"queued", "in_progress", "completed", "waiting", "requested", "pending"}


FILTERED_RESULTS = 1000
"""GitHub answers at most this many runs of a list filtered by `created`, `status` and the like, while its
`total_count` counts them all."""


COMPARISONS: dict[str, Callable[[datetime, datetime], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}


def _moment(text: str, *, end: bool) -> datetime:
    """A `created` bound: a date (its first second, or its last when it ends a range) or an ISO 8601 time."""
    if len(text) == 10:
        day = datetime.fromisoformat(text).replace(tzinfo=UTC)
        return day + timedelta(days=1) - timedelta(microseconds=1) if end else day
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def created_filter(text: str) -> Callable[[datetime], bool]:
    """GitHub's search syntax for dates, as `?created=` takes it: `A..B` (`*` for an open side), `>=A`, `>A`,
    `<=A`, `<A`, or `A` (a date: that whole day). A ValueError for anything else."""
    if ".." in text:
        low, high = text.split("..", 1)
        start = None if low == "*" else _moment(low, end=False)
        finish = None if high == "*" else _moment(high, end=True)
        return lambda at: (start is None or at >= start) and (finish is None or at <= finish)
    for symbol, compare in COMPARISONS.items():
        if text.startswith(symbol):
            bound = _moment(text[len(symbol) :], end=symbol in ("<=", ">"))
            return lambda at: bool(compare(at, bound))
    if len(text) == 10:
        first, last = _moment(text, end=False), _moment(text, end=True)
        return lambda at: first <= at <= last
    exact = _moment(text, end=False)
    return lambda at: at == exact


def _matches(run: WorkflowRun, status: str | None) -> bool:
    """`?status=` takes a status (`queued`, `in_progress`, ...) or a conclusion (`success`, ...)."""
    if status is None:
        return True
    return run.status == status if status in RUN_STATUSES else run.conclusion == status


def register(router: APIRouter, state: GitHubState) -> None:
    def repository(request: Request) -> Repository:
        repo = state.directory.repo(request.path_params["owner"], request.path_params["repo"])
        authorize(principal(request), repo.owner, repository=True)
        require_permission(principal(request), "actions", "read")
        return repo

    def run_of(request: Request) -> WorkflowRun:
        repo = repository(request)
        run = state.scheduler.runs.get(path_int(request, "run_id"))
        if run is None or run.repo.id != repo.id:
            raise not_found()
        return run

    def list_runs(request: Request, repo: Repository) -> JSONResponse:
        u = urls(request, state)
        status = request.query_params.get("status")
        runs = [r for r in reversed(state.scheduler.runs_by_repo.get(repo.id, [])) if _matches(r, status)]
        created = request.query_params.get("created")
        if created is not None:
            try:
                within = created_filter(created)
            except ValueError:
                raise GitHubError(422, f"Validation Failed: created {created[:60]!r} is not a date query") from None
            runs = [run for run in runs if within(run.created_at)]
        actor = state.directory.pat_owner
        return paginated(
            request,
            runs[:FILTERED_RESULTS] if status is not None or created is not None else runs,
            lambda run: payloads.workflow_run(run, actor, u),
            "workflow_runs",
            f"{u.api}/repositories/{repo.id}/actions/runs",
            total=len(runs),
        )

    @router.get("/repos/{owner}/{repo}/actions/runs")
    async def runs_for_repo(request: Request) -> JSONResponse:
        return list_runs(request, repository(request))

    @router.get("/repositories/{repo_id}/actions/runs")
    async def runs_by_repo_id(request: Request) -> JSONResponse:
        repo = state.directory.existing_repo(path_int(request, "repo_id"))
        if repo is None:
            raise not_found()
        authorize(principal(request), repo.owner, repository=True)
        require_permission(principal(request), "actions", "read")
        return list_runs(request, repo)

    @router.get("/repos/{owner}/{repo}/actions/runs/{run_id}")
    async def get_run(request: Request) -> JSONResponse:
        run = run_of(request)
        return JSONResponse(payloads.workflow_run(run, state.directory.pat_owner, urls(request, state)))

    @router.get("/repos/{owner}/{repo}/actions/runs/{run_id}/jobs")
    async def jobs_for_run(request: Request) -> JSONResponse:
        """`?filter=latest` (GitHub's default): the latest attempt's jobs; `all`: every attempt's."""
        run = run_of(request)
        u = urls(request, state)
        which = request.query_params.get("filter", "latest")
        if which not in ("latest", "all"):
            raise GitHubError(422, f"Validation Failed: filter {which[:20]!r} is not one of latest, all")
        jobs = [state.scheduler.jobs[job_id] for job_id in run.job_ids]
        if which == "latest":
            jobs = [job for job in jobs if job.run_attempt == run.run_attempt]
        return paginated(
            request,
            jobs,
            lambda job: payloads.workflow_job(job, u),
            "jobs",
            f"{u.api}/repositories/{run.repo.id}/actions/runs/{run.id}/jobs",
        )

    @router.post("/repos/{owner}/{repo}/actions/runs/{run_id}/cancel", status_code=202)
    async def cancel_run(request: Request) -> JSONResponse:
        run = run_of(request)
        if run.status == "completed":
            raise GitHubError(409, "Cannot cancel a workflow run that is completed.")
        for job_id in run.job_ids:
            state.scheduler.cancel(state.scheduler.jobs[job_id])
        return JSONResponse({}, status_code=202)

    @router.post("/repos/{owner}/{repo}/actions/jobs/{job_id}/rerun", status_code=201)
    async def rerun_job(request: Request) -> JSONResponse:
        """Re-run a job of a completed run: 201 with an empty object, the new attempt's job queued."""
        repo = repository(request)
        require_permission(principal(request), "actions", "write")
        job = state.scheduler.jobs.get(path_int(request, "job_id"))
        if job is None or job.repo.id != repo.id:
            raise not_found()
        state.scheduler.rerun(job)
        return JSONResponse({}, status_code=201)

    @router.get("/repos/{owner}/{repo}/actions/jobs/{job_id}")
    async def get_job(request: Request) -> JSONResponse:
        repo = repository(request)
        job = state.scheduler.jobs.get(path_int(request, "job_id"))
        if job is None or job.repo.id != repo.id:
            raise not_found()
        return JSONResponse(payloads.workflow_job(job, urls(request, state)))
