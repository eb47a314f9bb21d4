"""`GET /installation/repositories`: the repositories an installation access token reaches.

GitHub serves this to installation tokens only (a PAT or the app's JWT is refused). It is how a client
learns which repositories an installation on a user account covers: a user has no organisation-level
runners, so its runners register per repository.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral_sandbox.github import payloads
from corral_sandbox.github.errors import GitHubError
from corral_sandbox.github.pagination import Page
from corral_sandbox.github.routes.common import principal, urls
from corral_sandbox.github.state import GitHubState

NEEDS_INSTALLATION_AUTH = (
    "You must authenticate with an installation access token in order to list repositories for an installation."
)


def register(router: APIRouter, state: GitHubState) -> None:
    @router.get("/installation/repositories")
    async def installation_repositories(request: Request) -> JSONResponse:
        installation = principal(request).installation
        if installation is None:
            raise GitHubError(403, NEEDS_INSTALLATION_AUTH)
        owner = installation.account.id
        repos = sorted((r for r in state.directory.repos.values() if r.owner.id == owner), key=lambda r: r.id)
        u = urls(request, state)
        page = Page.from_query(request.query_params)
        body = {
            "total_count": len(repos),
            "repositories": [payloads.repository(repo, u) for repo in page.slice(repos)],
            "repository_selection": "all",
        }
        link = page.link_header(f"{u.api}/installation/repositories", request.query_params, len(repos))
        return JSONResponse(body, headers={"Link": link} if link else None)
