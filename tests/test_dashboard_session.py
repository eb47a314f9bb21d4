"""The dashboard's sign-in takes its token from the JSON body only: one that also rides in the URL (where browser
history and proxy logs keep it) is refused, and no cookie is set. The rest of the sign-in is in test_dashboard."""

from __future__ import annotations

import httpx

from corral.api.auth import DASHBOARD_COOKIE
from corral_sandbox.local import pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral


def test_a_sign_in_with_a_token_in_its_url_is_refused_and_sets_no_cookie(
    sandbox: Sandbox, start_corral: StartCorral
) -> None:
    corral = start_corral({"small": pool_spec(["small"])})
    token = corral.create_token("linked", "read")[1]
    with httpx.Client(base_url=corral.url, timeout=10) as browser_like:
        refused = browser_like.post("/dashboard/session", params={"token": token}, json={"token": token})
        assert refused.status_code == 400
        assert "does not take a token in the URL" in refused.json()["detail"]
        assert "set-cookie" not in refused.headers and DASHBOARD_COOKIE not in browser_like.cookies
        assert token not in refused.text
