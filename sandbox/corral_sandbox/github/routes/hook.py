"""The app's webhook configuration, `GET`/`PATCH /app/hook/config` (JWT only).

GitHub never gives the secret back: a hook with one answers `"secret": "********"`, a hook without one
leaves the key out. `insecure_ssl` is the string "0" or "1", as GitHub sends it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral_sandbox.github.errors import invalid_request
from corral_sandbox.github.routes.common import json_body
from corral_sandbox.github.state import GitHubState

MASKED_SECRET = "********"  # noqa: S105 (what GitHub shows in place of a secret)


def hook_config(state: GitHubState) -> dict[str, Any]:
    config: dict[str, Any] = {
        "content_type": "json",
        "insecure_ssl": state.hook_insecure_ssl,
        "url": state.webhook_url or "",
    }
    if state.webhooks.secret:
        config["secret"] = MASKED_SECRET
    return config


def register(router: APIRouter, state: GitHubState) -> None:
    @router.get("/app/hook/config")
    async def get_config() -> JSONResponse:
        return JSONResponse(hook_config(state))

    @router.patch("/app/hook/config")
    async def update_config(request: Request) -> JSONResponse:
        body = await json_body(request)
        for key in ("url", "secret", "content_type"):
            if key in body and not isinstance(body[key], str):
                raise invalid_request(f"For 'properties/{key}', {body[key]!r} is not a string.")
        if "insecure_ssl" in body:
            value = str(body["insecure_ssl"])
            if value not in ("0", "1"):
                raise invalid_request("For 'properties/insecure_ssl', the value is not one of 0 or 1.")
            state.hook_insecure_ssl = value
        if "secret" in body:
            state.webhooks.secret = body["secret"] or None
        if "url" in body:
            state.webhook_url = body["url"] or None
        return JSONResponse(hook_config(state))
