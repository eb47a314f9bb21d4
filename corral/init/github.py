"""Where runners can register, from the GitHub App's installations (`GET /app/installations`).

An installation on an organisation gives an organisation scope. An installation on a user account gives
one repository scope per repository it covers (a user account has no organisation-level runners), listed
with an installation token (`GET /installation/repositories`). An enterprise installation gives an
enterprise scope. A personal access token cannot list what it reaches: with one, the scope is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from githubkit import AppAuthStrategy, GitHub
from githubkit.cache import MemCacheStrategy
from githubkit.exception import RequestError, RequestFailed

from corral import secrets
from corral.init.errors import InitError
from corral.init.prompt import Choice

PER_PAGE = 100


@dataclass(frozen=True)
class Installations:
    """The scopes the App's installations give (`org:...`, `repo:...`, `enterprise:...`), the organisations
    it is installed on (lower-cased: any of their repositories is a scope too), how many installations
    there are, and notes on those that give no scope."""

    scopes: list[Choice]
    organisations: set[str]
    count: int
    notes: list[str] = field(default_factory=list)

    def allows(self, key: str) -> bool:
        """Whether the scope `key` (`org:x`, `repo:x/y`, ...) is reachable through an installation."""
        if key.lower() in {scope.value.lower() for scope in self.scopes}:
            return True
        kind, _, target = key.partition(":")
        return kind == "repo" and target.split("/", 1)[0].lower() in self.organisations


def _failure(what: str, exc: Exception) -> InitError:
    if isinstance(exc, RequestFailed):
        status = exc.response.status_code
        try:
            message = str(exc.response.json().get("message", ""))
        except ValueError:
            message = ""
        fix = "; check --app-id and --private-key-file" if status == 401 else ""
        return InitError(secrets.redact(f"GitHub refused to {what} ({status}: {message}){fix}"[:500]))
    return InitError(secrets.redact(f"cannot reach GitHub to {what}: {type(exc).__name__}: {exc}"[:500]))


def _login(account: Any) -> str:
    return str(getattr(account, "login", None) or getattr(account, "slug", None) or "")


def app_installations(url: str, app_id: int, private_key: str, timeout: float) -> Installations:
    """Every installation of the App, turned into scopes (a user account's through its repositories)."""
    app: GitHub[Any] = GitHub(
        AppAuthStrategy(app_id, private_key),
        base_url=url + "/",
        timeout=timeout,
        auto_retry=False,
        http_cache=False,
        cache_strategy=MemCacheStrategy(),
    )
    try:
        installations = list(app.rest.paginate(app.rest.apps.list_installations, per_page=PER_PAGE))
    except (RequestFailed, RequestError) as exc:
        raise _failure("list the App's installations", exc) from None
    scopes: list[Choice] = []
    organisations: set[str] = set()
    notes: list[str] = []
    for installation in installations:
        login = _login(installation.account)
        kind = installation.target_type
        if installation.suspended_at is not None:
            notes.append(f"the installation on {login} is suspended; it gives no scope")
            continue
        if kind == "Organization":
            organisations.add(login.lower())
            scopes.append(Choice(f"org:{login}", "organisation: runners for all its repositories"))
        elif kind == "Enterprise":
            scopes.append(Choice(f"enterprise:{login}", "enterprise: runners for all its organisations"))
        else:
            names = _repositories(app, installation.id, login)
            if not names:
                notes.append(f"the installation on user {login} covers no repository; it gives no scope")
            scopes.extend(Choice(f"repo:{name}", f"repository of user {login}") for name in names)
    return Installations(scopes=scopes, organisations=organisations, count=len(installations), notes=notes)


def _repositories(app: GitHub[Any], installation_id: int, login: str) -> list[str]:
    assert isinstance(app.auth, AppAuthStrategy)
    installation = app.with_auth(app.auth.as_installation(installation_id))
    try:
        repos = installation.rest.paginate(
            installation.rest.apps.list_repos_accessible_to_installation,
            map_func=lambda response: response.parsed_data.repositories,
            per_page=PER_PAGE,
        )
        return sorted(repo.full_name for repo in repos)
    except (RequestFailed, RequestError) as exc:
        raise _failure(f"list the repositories of the installation on {login}", exc) from None
