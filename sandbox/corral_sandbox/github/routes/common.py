"""What every REST handler needs: the caller, the URLs to answer with, bodies, pages and access checks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from corral_sandbox.github.auth import Principal
from corral_sandbox.github.errors import GitHubError, not_found
from corral_sandbox.github.model import Account
from corral_sandbox.github.pagination import Page
from corral_sandbox.github.payloads import Urls
from corral_sandbox.github.state import GitHubState
from corral_sandbox.http import API_V3_PREFIX

NOT_ACCESSIBLE = "Resource not accessible by integration"


def urls(request: Request, state: GitHubState) -> Urls:
    """The API root the caller used (github.com shape, or Enterprise Server's `/api/v3`)."""
    root = state.world.github_url
    api = root + API_V3_PREFIX if request.url.path.startswith(API_V3_PREFIX + "/") else root
    return Urls(api=api, html=root)


def principal(request: Request) -> Principal:
    found: Principal = request.state.principal
    return found


async def json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise GitHubError(400, "Problems parsing JSON") from exc
    if not isinstance(body, dict):
        raise GitHubError(400, "Body should be a JSON object")
    return body


def path_int(request: Request, name: str) -> int:
    try:
        return int(request.path_params[name])
    except ValueError as exc:
        raise not_found() from exc


def authorize(who: Principal, account: Account, *, repository: bool = False) -> None:
    """An installation token reaches only its own account: 404 for a repository, 403 elsewhere."""
    if who.installation is not None and who.installation.account.id != account.id:
        raise not_found() if repository else GitHubError(403, NOT_ACCESSIBLE)


def require_permission(who: Principal, permission: str, level: str) -> None:
    """An installation token without `permission` at `level` gets GitHub's 403."""
    if not who.may(permission, level):
        raise GitHubError(403, NOT_ACCESSIBLE)


def paginated(
    request: Request,
    items: Sequence[Any],
    render: Any,
    envelope: str | None,
    base_url: str,
    *,
    total: int | None = None,
) -> JSONResponse:
    """One page of `items` rendered by `render`, wrapped as `{total_count, <envelope>: [...]}` if named.
    `total`: what `total_count` says when GitHub answers fewer than it counts (a filtered list's first 1,000)."""
    page = Page.from_query(request.query_params)
    rendered = [render(item) for item in page.slice(items)]
    count = len(items) if total is None else total
    body: Any = rendered if envelope is None else {"total_count": count, envelope: rendered}
    link = page.link_header(base_url, request.query_params, len(items))
    return JSONResponse(body, headers={"Link": link} if link else None)
