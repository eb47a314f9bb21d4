"""The app's webhook delivery log: list (cursor-paginated, newest first), inspect, redeliver."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral_sandbox.github.errors import GitHubError, not_found
from corral_sandbox.github.pagination import Page
from corral_sandbox.github.routes.common import path_int, urls
from corral_sandbox.github.state import GitHubState

CURSOR_PREFIX = "v1_"


def _cursor_id(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw.removeprefix(CURSOR_PREFIX))
    except ValueError as exc:
        raise GitHubError(400, "Invalid cursor") from exc


def register(router: APIRouter, state: GitHubState) -> None:
    @router.get("/app/hook/deliveries")
    async def list_deliveries(request: Request) -> JSONResponse:
        """GitHub pages this log with an opaque `cursor`, linking only `rel="next"`."""
        per_page = Page.from_query(request.query_params).per_page
        before = _cursor_id(request.query_params.get("cursor"))
        status = request.query_params.get("status")
        deliveries = state.webhooks.newest_first(status)
        if before is not None:
            deliveries = [d for d in deliveries if d.id < before]
        page = deliveries[:per_page]
        headers = {}
        if len(deliveries) > per_page:
            others = [(k, v) for k, v in request.query_params.multi_items() if k not in ("cursor", "per_page")]
            query = urlencode([*others, ("per_page", str(per_page)), ("cursor", f"{CURSOR_PREFIX}{page[-1].id}")])
            headers["Link"] = f'<{urls(request, state).api}/app/hook/deliveries?{query}>; rel="next"'
        return JSONResponse([d.item() for d in page], headers=headers)

    @router.get("/app/hook/deliveries/{delivery_id}")
    async def get_delivery(request: Request) -> JSONResponse:
        delivery = state.webhooks.log.get(path_int(request, "delivery_id"))
        if delivery is None:
            raise not_found()
        return JSONResponse(state.webhooks.detail(delivery))

    @router.post("/app/hook/deliveries/{delivery_id}/attempts", status_code=202)
    async def redeliver(request: Request) -> JSONResponse:
        if not state.webhooks.redeliver(path_int(request, "delivery_id")):
            raise not_found()
        return JSONResponse({}, status_code=202)
