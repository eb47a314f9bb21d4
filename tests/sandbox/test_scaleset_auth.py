"""The scale-set protocol's credentials: the registration exchange and the admin token it hands out.

Pinned from `actions/scaleset` (client.go: `getActionsServiceAdminConnection`, `newActionsServiceRequest`,
`updateTokenIfNeeded`), the runner's `GitHubAuthResult`, and GitHub's 404 for a stale registration token.
"""

from __future__ import annotations

import httpx
import jwt
import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.scaleset_support import FAST, SCALE_SETS, ScaleSetClient, checked, error, validate
from tests.waiting import wait_until

GROUPS = "_apis/runtime/runnergroups/"


@pytest.fixture
def client(sandbox: Sandbox, control: httpx.Client) -> ScaleSetClient:
    control.put("/scalesets/settings", json=FAST).raise_for_status()
    return ScaleSetClient(sandbox)


@pytest.mark.parametrize("hosted_api", [False, True], ids=["api-v3", "github.com-shape"])
@pytest.mark.parametrize("config_path", ["octo-org", "octo-org/app", "enterprises/octo-ent"])
def test_exchange_hands_out_a_service_url_and_an_hour_long_admin_jwt(
    sandbox: Sandbox, control: httpx.Client, config_path: str, hosted_api: bool
) -> None:
    control.put("/scalesets/settings", json=FAST).raise_for_status()
    client = ScaleSetClient(sandbox, config_path, hosted_api=hosted_api)
    connection = checked(client.exchange(client.registration_token()), 201, "adminConnection")
    assert connection["url"].startswith(sandbox.info.github_url + "/_actions/")
    assert connection["url"].endswith("/")
    assert connection["token_schema"] == "OAuthAccessToken"
    claims = jwt.decode(connection["token"], options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 3600
    client.service_url, client.admin_token = connection["url"], connection["token"]
    groups = checked(client.call("GET", GROUPS, params={"groupName": "default"}), 200, "runnerGroupList")
    assert groups["value"] == [{"id": 1, "name": "Default", "size": 0, "isDefaultGroup": True}]


def test_each_scope_gets_its_own_service_url_and_the_same_scope_the_same(client: ScaleSetClient) -> None:
    first = client.exchange(client.registration_token()).json()["url"]
    again = client.exchange(client.registration_token()).json()["url"]
    repo = ScaleSetClient(client.sandbox, "octo-org/app")
    assert first == again != repo.exchange(repo.registration_token()).json()["url"]


def test_exchange_refuses_a_token_github_would_not_take(client: ScaleSetClient) -> None:
    token = client.registration_token()
    other_org = ScaleSetClient(client.sandbox, "other-org").config_url
    for response in (
        client.exchange("A" * 29),
        client.exchange(token, url=other_org),
        client.exchange(token, url=f"{client.sandbox.info.github_url}/octo-org/app/extra"),
        client.http.post(
            f"{client.api}/actions/runner-registration",
            headers={"Authorization": f"Bearer {token}"},
            json={"url": client.config_url, "runner_event": "register"},
        ),
    ):
        assert checked(response, 404, "gitHubError")["message"] == "Not Found"
    wrong_event = client.http.post(
        f"{client.api}/actions/runner-registration",
        headers={"Authorization": f"RemoteAuth {token}"},
        json={"url": client.config_url, "runner_event": "remove"},
    )
    assert wrong_event.status_code == 422
    assert client.exchange(token).status_code == 201


def test_the_admin_token_is_refused_unless_live_and_of_this_tenant(client: ScaleSetClient) -> None:
    client.connect()
    good = client.admin_token
    repo = ScaleSetClient(client.sandbox, "octo-org/app").connect()
    forged = jwt.encode({"sub": client.service_url.rstrip("/").rsplit("/", 1)[1], "exp": 2**31}, "x" * 32)
    for token in (forged, repo.admin_token, good[:-4] + "AAAA", "not-a-jwt"):
        error(client.call("GET", GROUPS, token=token), 401, "VssUnauthorizedException")
    error(client.http.get(client.url(GROUPS)), 401, "VssUnauthorizedException")
    assert client.call("GET", GROUPS).status_code == 200


def test_service_routes_want_a_preview_api_version(client: ScaleSetClient) -> None:
    client.connect()
    error(client.call("GET", SCALE_SETS, api_version=False), 400, "VssInvalidPreviewVersionException")
    error(client.call("GET", SCALE_SETS, params={"api-version": "6.0"}), 400, "VssInvalidPreviewVersionException")
    in_accept = client.http.get(
        client.url(SCALE_SETS, api_version=False),
        headers={
            "Authorization": f"Bearer {client.admin_token}",
            "Accept": "application/json; api-version=6.0-preview",
        },
    )
    assert checked(in_accept, 200, "runnerScaleSetList")["count"] == 0


def test_an_expired_admin_token_is_refused_and_a_new_exchange_serves_again(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    client.connect()
    assert control.post("/scalesets/admin-tokens/expire").json() == {"expired": 1}
    error(client.call("GET", GROUPS), 401, "VssUnauthorizedException")
    client.connect()
    assert client.call("GET", GROUPS).status_code == 200

    control.put("/scalesets/settings", json={"admin_token_ttl_s": 0.2}).raise_for_status()
    client.connect()
    claims = jwt.decode(client.admin_token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] <= 1
    wait_until(lambda: client.call("GET", GROUPS).status_code == 401, what="the short-lived admin token to expire")
    validate("actionsError", client.call("GET", GROUPS).json())
