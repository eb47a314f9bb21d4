"""What an App's owner configures, as GitHub serves it: installation permissions and events (and what
installation tokens may then do), the App's hook configuration with its masked secret, GitHub's clock in
`Date` and in JWT checks, and a classic PAT's `X-OAuth-Scopes`. `corral doctor` reads all of these."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

import httpx
import pytest
from githubkit.exception import RequestFailed

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import app_client, installation_client, pat_client
from tests.waiting import wait_until
from tests.webhook_receiver import WebhookReceiver


def test_installation_permissions_and_events_are_what_the_owner_accepted(
    sandbox: Sandbox, control: httpx.Client
) -> None:
    app = app_client(sandbox)
    before = app.rest.apps.get_org_installation("octo-org").parsed_data
    assert before.permissions.organization_self_hosted_runners == "write"
    assert "workflow_job" in before.events

    control.put(
        "/installations/octo-org", json={"permissions": {"actions": "read", "metadata": "read"}, "events": []}
    ).raise_for_status()

    after = app.rest.apps.get_org_installation("octo-org").parsed_data
    assert after.permissions.model_dump(exclude_unset=True) == {"actions": "read", "metadata": "read"}
    assert after.events == []
    other = app.rest.apps.get_org_installation("other-org").parsed_data
    assert other.permissions.organization_self_hosted_runners == "write"


def test_an_installation_token_can_do_only_what_the_installation_was_granted(
    sandbox: Sandbox, control: httpx.Client
) -> None:
    control.put("/installations/octo-org", json={"permissions": {"actions": "read"}}).raise_for_status()
    gh = installation_client(sandbox, "octo-org")
    with pytest.raises(RequestFailed) as refused:
        gh.rest.actions.list_self_hosted_runners_for_org("octo-org")
    assert refused.value.response.status_code == 403
    assert refused.value.response.json()["message"] == "Resource not accessible by integration"
    assert gh.rest.actions.list_workflow_runs_for_repo("octo-org", "app").status_code == 200

    app = app_client(sandbox)
    installation = app.rest.apps.get_org_installation("octo-org").parsed_data
    with pytest.raises(RequestFailed) as more:
        app.rest.apps.create_installation_access_token(
            installation.id, data={"permissions": {"organization_self_hosted_runners": "write"}}
        )
    assert more.value.response.status_code == 422


def test_hook_config_masks_the_secret_and_unsigned_hooks_send_no_signature(
    sandbox: Sandbox, webhook_receiver: WebhookReceiver
) -> None:
    app = app_client(sandbox)
    config = app.rest.apps.get_webhook_config_for_app().parsed_data
    assert config.secret == "********"
    assert config.url == webhook_receiver.url
    assert config.content_type == "json" and config.insecure_ssl == "0"

    app.rest.apps.update_webhook_config_for_app(data={"secret": ""})
    assert "secret" not in app.request("GET", "/app/hook/config").json()
    webhook_receiver.clear()
    httpx.post(f"{sandbox.info.control_url}/jobs", json={"repo": "octo-org/app"}).raise_for_status()
    delivery = wait_until(lambda: webhook_receiver.snapshot(), what="an unsigned delivery")[0]
    assert "X-Hub-Signature-256" not in delivery.headers


def test_webhook_secret_is_switched_through_the_control_api(
    sandbox: Sandbox, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    control.put("/webhook", json={"url": webhook_receiver.url, "secret": None}).raise_for_status()
    app = app_client(sandbox)
    assert "secret" not in app.request("GET", "/app/hook/config").json()
    control.put("/webhook", json={"url": webhook_receiver.url, "secret": "another-secret-of-length"})
    assert app.request("GET", "/app/hook/config").json()["secret"] == "********"


def _github_time(sandbox: Sandbox) -> float:
    response = httpx.get(f"{sandbox.info.github_url}/rate_limit")
    dates = response.headers.get_list("date")
    assert len(dates) == 1, dates
    return parsedate_to_datetime(dates[0]).timestamp()


def test_githubs_clock_can_be_skewed_and_judges_app_jwts(sandbox: Sandbox, control: httpx.Client) -> None:
    assert abs(_github_time(sandbox) - time.time()) < 2

    control.put("/clock", json={"github_offset_s": -300}).raise_for_status()
    assert abs(_github_time(sandbox) - (time.time() - 300)) < 2
    ahead = app_client(sandbox)  # this machine is 300 s ahead: githubkit's `iat` is in GitHub's future
    with pytest.raises(RequestFailed) as refused:
        ahead.rest.apps.get_authenticated()
    assert refused.value.response.status_code == 401
    assert "'iat'" in refused.value.response.json()["message"]

    control.put("/clock", json={"github_offset_s": 120}).raise_for_status()
    behind = app_client(sandbox)  # 120 s behind: a fresh JWT (iat -60 s, exp +540 s) is still accepted
    assert behind.rest.apps.get_authenticated().status_code == 200

    control.post("/reset").raise_for_status()
    assert abs(_github_time(sandbox) - time.time()) < 2


def test_a_classic_pats_scopes_come_back_in_x_oauth_scopes(sandbox: Sandbox, control: httpx.Client) -> None:
    pat = pat_client(sandbox)
    response = pat.request("GET", "/rate_limit")
    assert {s.strip() for s in response.headers["x-oauth-scopes"].split(",")} >= {"admin:org", "repo"}
    installation = installation_client(sandbox, "octo-org")
    assert "x-oauth-scopes" not in installation.request("GET", "/rate_limit").headers

    control.put("/pat", json={"scopes": ["repo"]}).raise_for_status()
    assert pat.request("GET", "/rate_limit").headers["x-oauth-scopes"] == "repo"


def test_deliveries_to_an_unreachable_url_are_logged_as_failed(sandbox: Sandbox, control: httpx.Client) -> None:
    control.put("/webhook", json={"url": "http://127.0.0.1:9/webhook"}).raise_for_status()
    control.post("/jobs", json={"repo": "octo-org/app"}).raise_for_status()
    app = app_client(sandbox)

    def failed() -> list[object]:
        items = app.request("GET", "/app/hook/deliveries").json()
        return [item for item in items if item["event"] == "workflow_job" and item["status_code"] == 0]

    delivery = wait_until(failed, what="a failed delivery")[0]
    assert delivery["status"] == "failed to connect to host"  # type: ignore[index]
