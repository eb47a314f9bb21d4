"""Primary and secondary rate limits, as githubkit recognises them from GitHub's headers and bodies."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from githubkit.exception import PrimaryRateLimitExceeded, SecondaryRateLimitExceeded

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import installation_client, pat_client


def test_every_response_carries_rate_limit_headers(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    first = gh.rest.actions.list_self_hosted_runners_for_org("octo-org")
    second = gh.rest.actions.list_self_hosted_runners_for_org("octo-org")
    assert first.headers["x-ratelimit-limit"] == "5000"
    assert first.headers["x-ratelimit-resource"] == "core"
    assert int(first.headers["x-ratelimit-remaining"]) - 1 == int(second.headers["x-ratelimit-remaining"])
    assert int(second.headers["x-ratelimit-used"]) == 2
    missing = httpx.get(
        sandbox.info.github_url + "/orgs/octo-org/actions/runners/999",
        headers={"Authorization": f"token {sandbox.info.pat}"},
    )
    assert missing.status_code == 404
    assert missing.headers["x-ratelimit-remaining"] == "4997"


def test_a_conditional_request_answered_304_does_not_count(sandbox: Sandbox) -> None:
    """GitHub's REST best practices: a request with the ETag of an unchanged answer gets 304, no body, and is not
    counted against the primary rate limit. A stale ETag gets the whole answer, counted."""
    url = sandbox.info.github_url + "/orgs/octo-org/actions/runners"
    auth = {"Authorization": f"token {sandbox.info.pat}"}
    first = httpx.get(url, headers=auth)
    etag = first.headers["etag"]
    again = httpx.get(url, headers={**auth, "If-None-Match": etag})
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", etag)
    assert again.headers["x-ratelimit-remaining"] == first.headers["x-ratelimit-remaining"]
    stale = httpx.get(url, headers={**auth, "If-None-Match": 'W/"0000"'})
    assert stale.status_code == 200 and stale.json() == first.json()
    assert int(stale.headers["x-ratelimit-remaining"]) == int(first.headers["x-ratelimit-remaining"]) - 1


def test_rate_limit_endpoint_does_not_count(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    before = gh.rest.rate_limit.get().parsed_data.resources.core.remaining
    after = gh.rest.rate_limit.get().parsed_data.resources.core.remaining
    assert before == after == 5000


def test_budgets_are_per_credential(sandbox: Sandbox) -> None:
    pat = pat_client(sandbox)
    installation = installation_client(sandbox, "octo-org")
    for _ in range(3):
        pat.rest.actions.list_self_hosted_runners_for_org("octo-org")
    used = installation.rest.actions.list_self_hosted_runners_for_org("octo-org").headers["x-ratelimit-used"]
    assert used == "1"


def test_spent_budget_is_a_primary_rate_limit(sandbox: Sandbox, control: httpx.Client) -> None:
    control.put("/rate-limit", json={"remaining": 1, "reset_in": 120}).raise_for_status()
    gh = pat_client(sandbox)
    last = gh.rest.actions.list_self_hosted_runners_for_org("octo-org")
    assert last.headers["x-ratelimit-remaining"] == "0"
    with pytest.raises(PrimaryRateLimitExceeded) as limited:
        gh.rest.actions.list_self_hosted_runners_for_org("octo-org")
    response = limited.value.response
    assert response.status_code == 403
    assert response.json()["message"].startswith("API rate limit exceeded for user ID")
    assert timedelta(seconds=100) < limited.value.retry_after <= timedelta(seconds=120)


def test_injected_secondary_limit_has_retry_after(sandbox: Sandbox, control: httpx.Client) -> None:
    control.put(
        "/faults", json={"world": {"secondary_rate_limit_rate": 1.0, "secondary_retry_after": 42}}
    ).raise_for_status()
    gh = pat_client(sandbox)
    with pytest.raises(SecondaryRateLimitExceeded) as limited:
        gh.rest.actions.list_self_hosted_runners_for_org("octo-org")
    assert limited.value.retry_after == timedelta(seconds=42)
    assert "secondary rate limit" in limited.value.response.json()["message"]
