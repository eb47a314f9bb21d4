"""Self-hosted runners at organisation, repository and enterprise scope.

The same handlers serve `/orgs/{org}`, `/repos/{owner}/{repo}` and `/enterprises/{enterprise}`; list
pages link the way GitHub links them, through `/organizations/{id}` and `/repositories/{id}`, which
are served too so a client following `Link` keeps working.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from corral_sandbox.github import jitconfig, payloads
from corral_sandbox.github.actions.settings import REGISTRATION_TOKEN_TTL_S
from corral_sandbox.github.errors import GitHubError, invalid_request, not_found
from corral_sandbox.github.model import DEFAULT_GROUP_ID, DEFAULT_GROUP_NAME, Runner, Scope, ScopeKind
from corral_sandbox.github.routes.common import (
    NOT_ACCESSIBLE,
    authorize,
    json_body,
    paginated,
    path_int,
    principal,
    require_permission,
    urls,
)
from corral_sandbox.github.state import GitHubState

MAX_LABELS = 100
RUNNER_VERSION = "2.321.0"
DOWNLOADS = [
    ("linux", "x64"),
    ("linux", "arm64"),
    ("linux", "arm"),
    ("osx", "x64"),
    ("osx", "arm64"),
    ("win", "x64"),
    ("win", "arm64"),
]


@dataclass(frozen=True)
class Target:
    """A resolved scope: where runners live, what GitHub links list pages through, the JIT `GitHubUrl`."""

    scope: Scope
    list_url: str
    owner_path: str
    groups_url: str | None


def _resolve(state: GitHubState, request: Request, kind: ScopeKind) -> Target:
    """The scope a request names, once the caller may reach it: an installation token needs "Self-hosted
    runners" (organisations) or "Administration" (repositories), read to look and write to change."""
    who = principal(request)
    api = urls(request, state).api
    params = request.path_params
    level = "read" if request.method in ("GET", "HEAD") else "write"
    if kind == "orgs":
        account = state.directory.account(params["org"])
        authorize(who, account)
        require_permission(who, "organization_self_hosted_runners", level)
        return Target(
            Scope("orgs", account.login.lower()),
            f"{api}/organizations/{account.id}/actions/runners",
            account.login,
            f"{api}/orgs/{account.login}/actions/runner-groups",
        )
    if kind == "repos":
        repo = state.directory.repo(params["owner"], params["repo"])
        authorize(who, repo.owner, repository=True)
        require_permission(who, "administration", level)
        return Target(
            Scope("repos", repo.full_name.lower()),
            f"{api}/repositories/{repo.id}/actions/runners",
            repo.full_name,
            None,
        )
    enterprise = state.directory.account(params["enterprise"], "Enterprise")
    if who.installation is not None:
        raise GitHubError(403, NOT_ACCESSIBLE)
    return Target(
        Scope("enterprises", enterprise.login.lower()),
        f"{api}/enterprises/{enterprise.login}/actions/runners",
        f"enterprises/{enterprise.login}",
        f"{api}/enterprises/{enterprise.login}/actions/runner-groups",
    )


def _registration_token() -> dict[str, str]:
    """`registration-token` / `remove-token`: 29 upper-case characters, valid for an hour."""
    token = "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(29))
    expires = datetime.now(UTC) + timedelta(hours=1)
    return {"token": token, "expires_at": expires.isoformat(timespec="milliseconds")}


def _labels_json(runner: Runner) -> dict[str, Any]:
    return {"total_count": len(runner.labels), "labels": [payloads.runner_label(lbl) for lbl in runner.labels]}


def _label_names(body: dict[str, Any], minimum: int) -> list[str]:
    labels = body.get("labels")
    if labels is None:
        raise invalid_request('"labels" wasn\'t supplied.')
    if not isinstance(labels, list) or not all(isinstance(name, str) and name for name in labels):
        raise invalid_request("For 'properties/labels', the value is not an array of non-empty strings.")
    if not minimum <= len(labels) <= MAX_LABELS:
        raise invalid_request(
            f"For 'properties/labels', {len(labels)} items is not between {minimum} and {MAX_LABELS} items."
        )
    return labels


def _jit_request(body: dict[str, Any]) -> tuple[str, int, list[str], str]:
    for key in ("name", "runner_group_id", "labels"):
        if key not in body:
            raise invalid_request(f'"{key}" wasn\'t supplied.')
    name, group_id, work_folder = body["name"], body["runner_group_id"], body.get("work_folder", "_work")
    if not isinstance(name, str) or not name.strip():
        raise invalid_request(f"For 'properties/name', {name!r} is not a non-empty string.")
    if not isinstance(group_id, int) or isinstance(group_id, bool):
        raise invalid_request(f"For 'properties/runner_group_id', {group_id!r} is not an integer.")
    if not isinstance(work_folder, str):
        raise invalid_request(f"For 'properties/work_folder', {work_folder!r} is not a string.")
    return name, group_id, _label_names(body, 1), work_folder


def _list(state: GitHubState, request: Request, where: Target) -> Response:
    runners = state.scheduler.in_scope(where.scope)
    name = request.query_params.get("name")
    if name is not None:
        runners = [r for r in runners if r.name == name]
    page = paginated(request, runners, payloads.runner, "runners", where.list_url)
    # GitHub tags each answer with an ETag; a request whose `If-None-Match` names the current one is answered
    # 304 with no body, and does not count against the rate limit ("Use conditional requests if appropriate",
    # GitHub's REST best practices).
    etag = 'W/"' + hashlib.sha256(bytes(page.body) + (page.headers.get("link") or "").encode()).hexdigest()[:40] + '"'
    if etag in {tag.strip() for tag in request.headers.get("if-none-match", "").split(",")}:
        who = request.state.principal
        request.state.rate_headers = state.rate_limits.refund(who.rate_key, who.rate_limit).headers()
        state.world.stats.incr("github_not_modified")
        return Response(status_code=304, headers={"ETag": etag})
    page.headers["ETag"] = etag
    return page


def register(router: APIRouter, state: GitHubState) -> None:
    for kind, prefix in (
        ("orgs", "/orgs/{org}"),
        ("repos", "/repos/{owner}/{repo}"),
        ("enterprises", "/enterprises/{enterprise}"),
    ):
        _register_scope(router, state, kind, prefix)  # type: ignore[arg-type]
    _register_id_aliases(router, state)


def _register_scope(router: APIRouter, state: GitHubState, kind: ScopeKind, prefix: str) -> None:
    base = f"{prefix}/actions/runners"

    def target(request: Request) -> Target:
        return _resolve(state, request, kind)

    def runner_of(request: Request) -> Runner:
        runner = state.scheduler.get(target(request).scope, path_int(request, "runner_id"))
        if runner is None:
            raise not_found()
        return runner

    async def list_runners(request: Request) -> Response:
        return _list(state, request, target(request))

    async def downloads(request: Request) -> JSONResponse:
        target(request)
        return JSONResponse(
            [
                {
                    "os": os_name,
                    "architecture": arch,
                    "download_url": "https://github.com/actions/runner/releases/download/"
                    f"v{RUNNER_VERSION}/actions-runner-{os_name}-{arch}-{RUNNER_VERSION}."
                    + ("zip" if os_name == "win" else "tar.gz"),
                    "filename": f"actions-runner-{os_name}-{arch}-{RUNNER_VERSION}."
                    + ("zip" if os_name == "win" else "tar.gz"),
                    "sha256_checksum": hashlib.sha256(f"{os_name}-{arch}".encode()).hexdigest(),
                }
                for os_name, arch in DOWNLOADS
            ]
        )

    async def generate_jitconfig(request: Request) -> JSONResponse:
        where = target(request)
        name, group_id, labels, work_folder = _jit_request(await json_body(request))
        if group_id != DEFAULT_GROUP_ID:
            raise not_found()
        runner = state.scheduler.register(where.scope, name, group_id, labels, work_folder)
        config = jitconfig.encode(runner, state.world.github_url, where.owner_path)
        state.jit_config_issued(config)
        return JSONResponse({"runner": payloads.runner(runner), "encoded_jit_config": config}, status_code=201)

    async def registration_token(request: Request) -> JSONResponse:
        token = _registration_token()
        # Remembered for the scale-set protocol's exchange (`POST /actions/runner-registration`).
        state.actions.tokens.remember_registration(token["token"], target(request).scope, REGISTRATION_TOKEN_TTL_S)
        return JSONResponse(token, status_code=201)

    async def remove_token(request: Request) -> JSONResponse:
        target(request)
        return JSONResponse(_registration_token(), status_code=201)

    async def get_runner(request: Request) -> JSONResponse:
        return JSONResponse(payloads.runner(runner_of(request)))

    async def delete_runner(request: Request) -> Response:
        state.scheduler.delete(runner_of(request))
        return Response(status_code=204)

    async def get_labels(request: Request) -> JSONResponse:
        return JSONResponse(_labels_json(runner_of(request)))

    async def add_labels(request: Request) -> JSONResponse:
        runner = runner_of(request)
        state.scheduler.add_labels(runner, _label_names(await json_body(request), 1))
        return JSONResponse(_labels_json(runner))

    async def set_labels(request: Request) -> JSONResponse:
        runner = runner_of(request)
        names = _label_names(await json_body(request), 0)
        runner.labels = [label for label in runner.labels if label.type == "read-only"]
        state.scheduler.add_labels(runner, names)
        return JSONResponse(_labels_json(runner))

    async def clear_labels(request: Request) -> JSONResponse:
        runner = runner_of(request)
        runner.labels = [label for label in runner.labels if label.type == "read-only"]
        return JSONResponse(_labels_json(runner))

    async def remove_label(request: Request) -> JSONResponse:
        runner = runner_of(request)
        name = request.path_params["name"].lower()
        kept = [lbl for lbl in runner.labels if lbl.type == "read-only" or lbl.name.lower() != name]
        if len(kept) == len(runner.labels):
            raise not_found()
        runner.labels = kept
        return JSONResponse(_labels_json(runner))

    routes: list[tuple[str, str, Callable[[Request], Any]]] = [
        ("GET", base, list_runners),
        ("GET", f"{base}/downloads", downloads),
        ("POST", f"{base}/generate-jitconfig", generate_jitconfig),
        ("POST", f"{base}/registration-token", registration_token),
        ("POST", f"{base}/remove-token", remove_token),
        ("GET", f"{base}/{{runner_id}}", get_runner),
        ("DELETE", f"{base}/{{runner_id}}", delete_runner),
        ("GET", f"{base}/{{runner_id}}/labels", get_labels),
        ("POST", f"{base}/{{runner_id}}/labels", add_labels),
        ("PUT", f"{base}/{{runner_id}}/labels", set_labels),
        ("DELETE", f"{base}/{{runner_id}}/labels", clear_labels),
        ("DELETE", f"{base}/{{runner_id}}/labels/{{name}}", remove_label),
    ]
    if kind != "repos":
        routes += _group_routes(state, prefix, target)
    for method, path, handler in routes:
        router.add_api_route(path, handler, methods=[method])


def _group_routes(
    state: GitHubState, prefix: str, target: Callable[[Request], Target]
) -> list[tuple[str, str, Callable[[Request], Any]]]:
    """Runner groups: every organisation and enterprise has the `Default` group (id 1), nothing more."""

    def default_group(request: Request) -> dict[str, Any]:
        where = target(request)
        groups_url = where.groups_url or ""
        return payloads.runner_group(DEFAULT_GROUP_ID, DEFAULT_GROUP_NAME, f"{groups_url}/{DEFAULT_GROUP_ID}/runners")

    async def list_groups(request: Request) -> JSONResponse:
        return JSONResponse({"total_count": 1, "runner_groups": [default_group(request)]})

    async def get_group(request: Request) -> JSONResponse:
        if path_int(request, "runner_group_id") != DEFAULT_GROUP_ID:
            raise not_found()
        return JSONResponse(default_group(request))

    return [
        ("GET", f"{prefix}/actions/runner-groups", list_groups),
        ("GET", f"{prefix}/actions/runner-groups/{{runner_group_id}}", get_group),
    ]


def _register_id_aliases(router: APIRouter, state: GitHubState) -> None:
    """`/organizations/{id}/...` and `/repositories/{id}/...`: the addresses GitHub's `Link` headers use."""

    async def org_runners(request: Request) -> Response:
        account = state.directory.existing_account(path_int(request, "org_id"))
        if account is None or account.type != "Organization":
            raise not_found()
        request.path_params["org"] = account.login
        return _list(state, request, _resolve(state, request, "orgs"))

    async def repo_runners(request: Request) -> Response:
        repo = state.directory.existing_repo(path_int(request, "repo_id"))
        if repo is None:
            raise not_found()
        request.path_params.update(owner=repo.owner.login, repo=repo.name)
        return _list(state, request, _resolve(state, request, "repos"))

    router.add_api_route("/organizations/{org_id}/actions/runners", org_runners, methods=["GET"])
    router.add_api_route("/repositories/{repo_id}/actions/runners", repo_runners, methods=["GET"])
