"""The app's own endpoints (JWT only): the app, its installations and installation access tokens."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from corral_sandbox.github import payloads
from corral_sandbox.github.auth import LEVELS
from corral_sandbox.github.clock import isoformat
from corral_sandbox.github.errors import GitHubError, invalid_request, not_found
from corral_sandbox.github.model import AccountType, Installation
from corral_sandbox.github.routes.common import json_body, paginated, path_int, urls
from corral_sandbox.github.state import GitHubState


def _granted(requested: dict[str, str], installation: Installation) -> bool:
    """A token may carry any subset of what the installation's owner accepted, never more."""
    for name, level in requested.items():
        have = installation.permissions.get(name)
        if have is None or LEVELS.get(level, 99) > LEVELS[have]:
            return False
    return True


def register(router: APIRouter, state: GitHubState) -> None:
    def installation_json(request: Request, installation: Installation) -> JSONResponse:
        return JSONResponse(payloads.installation(installation, state.app_identity, urls(request, state)))

    @router.get("/app")
    async def get_app(request: Request) -> JSONResponse:
        count = len(state.directory.installations)
        return JSONResponse(payloads.app(state.app_identity, count, urls(request, state)))

    @router.get("/app/installations")
    async def list_installations(request: Request) -> JSONResponse:
        u = urls(request, state)
        return paginated(
            request,
            list(state.directory.installations.values()),
            lambda i: payloads.installation(i, state.app_identity, u),
            None,
            f"{u.api}/app/installations",
        )

    @router.get("/app/installations/{installation_id}")
    async def get_installation(request: Request) -> JSONResponse:
        installation = state.directory.installations.get(path_int(request, "installation_id"))
        if installation is None:
            raise not_found()
        return installation_json(request, installation)

    @router.delete("/app/installations/{installation_id}", status_code=204)
    async def delete_installation(request: Request) -> Response:
        """Uninstall the app from an account: its tokens stop working and lookups answer 404 from now on."""
        installation = state.directory.installations.get(path_int(request, "installation_id"))
        if installation is None:
            raise not_found()
        state.uninstall(installation)
        return Response(status_code=204)

    @router.post("/app/installations/{installation_id}/access_tokens", status_code=201)
    async def create_access_token(request: Request) -> JSONResponse:
        installation = state.directory.installations.get(path_int(request, "installation_id"))
        if installation is None:
            raise not_found()
        body = await json_body(request)
        requested = body.get("permissions") or dict(installation.permissions)
        if not isinstance(requested, dict) or not _granted(requested, installation):
            raise GitHubError(422, "The permissions requested are not granted to this installation.")
        names = body.get("repositories")
        if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
            raise invalid_request("For 'properties/repositories', the value is not an array of strings.")
        token, expires_at = state.issue_token(installation, requested)
        response: dict[str, Any] = {
            "token": token,
            "expires_at": isoformat(datetime.fromtimestamp(expires_at, UTC)),
            "permissions": requested,
            "repository_selection": "selected" if names else "all",
        }
        if names:
            u = urls(request, state)
            login = installation.account.login
            response["repositories"] = [payloads.repository(state.directory.repo(login, n), u) for n in names]
        return JSONResponse(response, status_code=201)

    @router.get("/orgs/{org}/installation")
    async def org_installation(request: Request) -> JSONResponse:
        return installation_json(request, _installation(state, request.path_params["org"], "Organization"))

    @router.get("/users/{username}/installation")
    async def user_installation(request: Request) -> JSONResponse:
        return installation_json(request, _installation(state, request.path_params["username"], "User"))

    @router.get("/enterprises/{enterprise}/installation")
    async def enterprise_installation(request: Request) -> JSONResponse:
        # The sandbox never installs the app on an enterprise (enterprise runners take a PAT here): 404,
        # as GitHub answers for an enterprise the app is not installed on.
        state.directory.account(request.path_params["enterprise"], "Enterprise")
        raise not_found()

    @router.get("/repos/{owner}/{repo}/installation")
    async def repo_installation(request: Request) -> JSONResponse:
        repo = state.directory.repo(request.path_params["owner"], request.path_params["repo"])
        return installation_json(request, _installation(state, repo.owner.login, "Organization"))


def _installation(state: GitHubState, login: str, kind: AccountType) -> Installation:
    account = state.directory.account(login, kind)
    installation = state.directory.installation_of(account)
    if installation is None:
        raise not_found()
    return installation
