"""corral finds its GitHub App installation with one direct lookup per scope (issue 16)."""

from __future__ import annotations

import httpx

from corral_sandbox.local import app_github, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.sandbox.github_support import app_client
from tests.test_lifecycle import converge, online_per_pool
from tests.test_resilience import runner_failures


def github_calls(control: httpx.Client) -> dict[str, int]:
    calls: dict[str, int] = control.get("/stats").json()["api_calls"]["github"]
    return calls


def test_a_warm_pool_comes_online_on_a_fresh_github_with_no_job_posted(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    """Found by a new user: with an App and no job yet, no warm runner ever came up, because the installation
    was looked for by paging `/app/installations`, which lists only accounts GitHub already knows."""
    corral = start_corral({"small": pool_spec(["small"], min_idle=2)}, github=app_github(sandbox.info))
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 2}, "two warm runners online", timeout=30)
    calls = github_calls(control)
    assert not any("/app/installations" in endpoint and "access_tokens" not in endpoint for endpoint in calls), calls
    lookups = sum(count for endpoint, count in calls.items() if endpoint.endswith("/installation"))
    assert lookups == 1, f"one lookup for the one scope, then the cached id: {calls}"


def test_a_scope_the_app_is_not_installed_on_gets_a_clear_reason(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    app = app_client(sandbox)
    installation = app.rest.apps.get_org_installation("octo-org").parsed_data
    app.request("DELETE", f"/app/installations/{installation.id}")
    corral = start_corral({"small": pool_spec(["small"], min_idle=1)}, github=app_github(sandbox.info))
    reason = "the GitHub App is not installed on 'octo-org'; install it there"
    converge(
        corral,
        lambda: any(reason in message for message in runner_failures(corral)),
        "the runner's failure names the scope and the fix",
    )
    assert online_per_pool(sandbox) == {}
