"""GitHub App and token authentication as GitHub enforces it, seen through the real githubkit client."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import jwt
import pytest
from githubkit import GitHub, TokenAuthStrategy
from githubkit.exception import RequestFailed

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import app_client, installation_client, pat_client


def _jwt(sandbox: Sandbox, *, iat_offset: int = -60, lifetime: int = 600, iss: object = None) -> str:
    now = int(time.time())
    claims = {
        "iss": sandbox.info.app_id if iss is None else iss,
        "iat": now + iat_offset,
        "exp": now + iat_offset + lifetime,
    }
    # Signed as raw JSON: PyJWT's `encode` refuses an integer `iss`, which GitHub accepts.
    key = Path(sandbox.info.private_key_path).read_text()
    return jwt.api_jws.encode(json.dumps(claims).encode(), key, algorithm="RS256")


def _get(sandbox: Sandbox, path: str, token: str, scheme: str = "Bearer") -> httpx.Response:
    return httpx.get(sandbox.info.github_url + path, headers={"Authorization": f"{scheme} {token}"})


def test_pat_works_with_token_and_bearer_schemes(sandbox: Sandbox) -> None:
    for scheme in ("token", "Bearer"):
        response = _get(sandbox, "/orgs/octo-org/actions/runners", sandbox.info.pat, scheme)
        assert response.status_code == 200
        assert response.json() == {"total_count": 0, "runners": []}


def test_bad_token_is_refused_with_githubs_error_shape(sandbox: Sandbox) -> None:
    gh = GitHub(TokenAuthStrategy("ghp_not-a-real-token"), base_url=sandbox.info.github_url + "/", auto_retry=False)
    with pytest.raises(RequestFailed) as failure:
        gh.rest.actions.list_self_hosted_runners_for_org("octo-org")
    assert failure.value.response.status_code == 401
    body = failure.value.response.json()
    assert body["message"] == "Bad credentials"
    assert body["status"] == "401"
    assert body["documentation_url"].startswith("https://docs.github.com/")


def test_missing_credentials_require_authentication(sandbox: Sandbox) -> None:
    response = httpx.get(sandbox.info.github_url + "/orgs/octo-org/actions/runners")
    assert response.status_code == 401
    assert response.json()["message"] == "Requires authentication"


def test_app_jwt_reads_app_and_installations_created_on_first_use(sandbox: Sandbox) -> None:
    app = app_client(sandbox)
    me = app.rest.apps.get_authenticated().parsed_data
    assert me is not None and me.id == sandbox.info.app_id
    org = app.rest.apps.get_org_installation("octo-org").parsed_data
    repo = app.rest.apps.get_repo_installation("octo-org", "app").parsed_data
    user = app.rest.apps.get_user_installation("octo-user").parsed_data
    assert org.id == repo.id
    assert org.account is not None and org.account.login == "octo-org"  # type: ignore[union-attr]
    assert user.target_type == "User" and org.target_type == "Organization"
    assert org.app_id == sandbox.info.app_id
    listed = {i.id for i in app.rest.apps.list_installations().parsed_data}
    assert {org.id, user.id} <= listed
    assert app.rest.apps.get_installation(org.id).parsed_data.id == org.id


def test_installation_lookups_answer_404_the_way_github_does_where_the_app_is_not_installed(sandbox: Sandbox) -> None:
    """corral finds its installation by these lookups (one call per scope); the 404 must look like GitHub's."""
    app = app_client(sandbox)
    org = app.rest.apps.get_org_installation("octo-org").parsed_data
    token = app.rest.apps.create_installation_access_token(org.id).parsed_data.token
    assert app.request("DELETE", f"/app/installations/{org.id}").status_code == 204
    jwt = _jwt(sandbox)
    for path in (
        "/orgs/octo-org/installation",
        "/repos/octo-org/app/installation",
        "/enterprises/octo-enterprise/installation",
        f"/app/installations/{org.id}",
    ):
        response = _get(sandbox, path, jwt)
        assert response.status_code == 404, path
        body = response.json()
        assert (body["message"], body["status"]) == ("Not Found", "404"), path
        assert body["documentation_url"].startswith("https://docs.github.com/rest"), path
    assert org.id not in {i.id for i in app.rest.apps.list_installations().parsed_data}
    response = _get(sandbox, "/orgs/octo-org/actions/runners", token, "token")
    assert response.status_code == 401, "an uninstalled app's installation tokens stop working"
    assert app.rest.apps.get_org_installation("other-org").parsed_data.account is not None


def test_installation_token_is_a_ghs_token_valid_for_an_hour(sandbox: Sandbox) -> None:
    app = app_client(sandbox)
    installation = app.rest.apps.get_org_installation("octo-org").parsed_data
    response = app.rest.apps.create_installation_access_token(installation.id)
    assert response.status_code == 201
    token = response.parsed_data
    assert token.token.startswith("ghs_")
    expires = datetime.strptime(token.expires_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)
    assert response.json()["permissions"]["organization_self_hosted_runners"] == "write"
    runners = _get(sandbox, "/orgs/octo-org/actions/runners", token.token, "token")
    assert runners.status_code == 200


def test_permissions_beyond_the_installation_are_refused(sandbox: Sandbox) -> None:
    app = app_client(sandbox)
    installation = app.rest.apps.get_org_installation("octo-org").parsed_data
    with pytest.raises(RequestFailed) as failure:
        app.rest.apps.create_installation_access_token(installation.id, data={"permissions": {"contents": "write"}})
    assert failure.value.response.status_code == 422


def test_installation_token_reaches_only_its_own_organisation(sandbox: Sandbox) -> None:
    gh = installation_client(sandbox, "octo-org")
    assert gh.rest.actions.list_self_hosted_runners_for_org("octo-org").status_code == 200
    with pytest.raises(RequestFailed) as other_org:
        gh.rest.actions.list_self_hosted_runners_for_org("someone-else")
    assert other_org.value.response.status_code == 403
    with pytest.raises(RequestFailed) as other_repo:
        gh.rest.actions.list_self_hosted_runners_for_repo("someone-else", "app")
    assert other_repo.value.response.status_code == 404


def test_tokens_are_refused_on_app_endpoints_and_jwts_elsewhere(sandbox: Sandbox) -> None:
    for path in ("/app", "/app/installations", "/orgs/octo-org/installation"):
        response = _get(sandbox, path, sandbox.info.pat, "token")
        assert response.status_code == 401
        assert response.json()["message"] == "A JSON web token could not be decoded"
    response = _get(sandbox, "/orgs/octo-org/actions/runners", _jwt(sandbox))
    assert response.status_code == 403
    assert response.json()["message"] == "Resource not accessible by integration"


@pytest.mark.parametrize(
    ("iat_offset", "lifetime", "message"),
    [
        (0, 660, "'Expiration time' claim ('exp') is too far in the future"),
        (-700, 600, "'Expiration time' claim ('exp') must be a numeric value"),
        (120, 300, "'Issued at' claim ('iat') must be an Integer"),
    ],
)
def test_jwt_time_rules(sandbox: Sandbox, iat_offset: int, lifetime: int, message: str) -> None:
    response = _get(sandbox, "/app", _jwt(sandbox, iat_offset=iat_offset, lifetime=lifetime))
    assert response.status_code == 401
    assert response.json()["message"].startswith(message)


def test_jwt_issuer_may_be_an_integer_or_a_string_and_must_be_this_app(sandbox: Sandbox) -> None:
    assert _get(sandbox, "/app", _jwt(sandbox)).status_code == 200
    assert _get(sandbox, "/app", _jwt(sandbox, iss=str(sandbox.info.app_id))).status_code == 200
    wrong = _get(sandbox, "/app", _jwt(sandbox, iss=sandbox.info.app_id + 1))
    assert wrong.status_code == 401
    assert wrong.json()["message"] == "A JSON web token could not be decoded"


def test_enterprise_server_prefix_serves_the_same_api(sandbox: Sandbox) -> None:
    app = app_client(sandbox, enterprise=True)
    installation = app.rest.apps.get_org_installation("octo-org").parsed_data
    assert installation.access_tokens_url.startswith(sandbox.info.github_enterprise_url + "/app/installations/")
    gh = pat_client(sandbox, enterprise=True)
    assert gh.rest.actions.list_self_hosted_runners_for_org("octo-org").parsed_data.total_count == 0
