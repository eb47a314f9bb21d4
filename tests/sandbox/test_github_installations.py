"""The App's installations as a client discovers them: accounts set up through the control API, listed with
the App's JWT, and a user installation's repositories listed with its installation token (real githubkit)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from githubkit.exception import RequestFailed

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import app_client, pat_client


def _installations(sandbox: Sandbox) -> dict[str, Any]:
    app = app_client(sandbox)
    listed = app.rest.apps.list_installations().parsed_data
    return {i.account.login: i for i in listed}  # type: ignore[union-attr]


def test_a_user_account_with_repositories_is_an_installation_whose_token_lists_them(
    sandbox: Sandbox, control: httpx.Client
) -> None:
    created = control.post("/accounts", json={"login": "octocat", "type": "User", "repositories": ["b", "a", "c"]})
    assert created.status_code == 201
    assert created.json()["repositories"] == ["octocat/b", "octocat/a", "octocat/c"]
    installation = _installations(sandbox)["octocat"]
    assert installation.target_type == "User"
    assert installation.id == created.json()["installation_id"]
    app = app_client(sandbox)
    as_installation = app.with_auth(app.auth.as_installation(installation.id))
    first = as_installation.rest.apps.list_repos_accessible_to_installation(per_page=2).parsed_data
    assert first.total_count == 3 and first.repository_selection == "all"
    repos = as_installation.rest.paginate(
        as_installation.rest.apps.list_repos_accessible_to_installation,
        map_func=lambda response: response.parsed_data.repositories,
        per_page=2,
    )
    assert sorted(repo.full_name for repo in repos) == ["octocat/a", "octocat/b", "octocat/c"]


def test_an_organisation_set_up_ahead_is_listed_before_anything_names_it(
    sandbox: Sandbox, control: httpx.Client
) -> None:
    assert "octo-org" not in _installations(sandbox)
    assert control.post("/accounts", json={"login": "octo-org"}).status_code == 201
    assert _installations(sandbox)["octo-org"].target_type == "Organization"


def test_an_installation_token_lists_only_its_own_accounts_repositories(
    sandbox: Sandbox, control: httpx.Client
) -> None:
    control.post("/accounts", json={"login": "octocat", "type": "User", "repositories": ["mine"]}).raise_for_status()
    control.post("/accounts", json={"login": "other-org", "repositories": ["theirs"]}).raise_for_status()
    app = app_client(sandbox)
    installation = app.with_auth(app.auth.as_installation(_installations(sandbox)["octocat"].id))
    listed = installation.rest.apps.list_repos_accessible_to_installation().parsed_data
    assert [repo.full_name for repo in listed.repositories] == ["octocat/mine"]


def test_only_an_installation_token_may_list_installation_repositories(sandbox: Sandbox) -> None:
    pat = pat_client(sandbox)
    with pytest.raises(RequestFailed) as refused:
        pat.rest.apps.list_repos_accessible_to_installation()
    assert refused.value.response.status_code == 403
    assert "installation access token" in refused.value.response.json()["message"]


def test_an_account_cannot_change_kind(sandbox: Sandbox, control: httpx.Client) -> None:
    control.post("/accounts", json={"login": "octo-org"}).raise_for_status()
    conflict = control.post("/accounts", json={"login": "Octo-Org", "type": "User"})
    assert conflict.status_code == 409
    assert "Organization" in conflict.json()["message"]
    assert control.post("/accounts", json={"login": "-bad-"}).status_code == 422
