"""Control route `POST /_sandbox/accounts`: a GitHub account with the App installed and its repositories.

The sandbox makes organisations (and the App's installation on them) the first time anything names them,
which serves most tests. A user account with repositories cannot come about that way (naming a repository
makes its owner an organisation), nor can an organisation exist before anything names it: this route sets
either up, as an operator would by installing the App on their account.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from corral_sandbox.world import World

LOGIN_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$"
"""GitHub's rule for logins: 1-39 letters, digits and dashes, not starting or ending with a dash."""


class AccountRequest(BaseModel):
    login: str = Field(pattern=LOGIN_PATTERN, examples=["octocat"])
    type: Literal["Organization", "User"] = "Organization"
    repositories: list[str] = Field(default_factory=list, max_length=1000, examples=[["hello-world"]])


def register_account_routes(router: APIRouter, world: World) -> None:
    @router.post("/accounts", status_code=201)
    async def create_account(body: AccountRequest) -> dict[str, Any]:
        """The account (created if new, with the App installed) and the named repositories under it."""
        directory = world.github.directory
        existing = directory.accounts.get(body.login.lower())
        if existing is not None and existing.type != body.type:
            raise HTTPException(status_code=409, detail=f"{existing.login} already exists as a {existing.type}")
        account = directory.account(body.login, body.type)
        repos = [directory.repo(account.login, name).full_name for name in body.repositories]
        installation = directory.installation_of(account)
        return {
            "login": account.login,
            "type": account.type,
            "installation_id": installation.id if installation else None,
            "repositories": repos,
        }
