"""Control routes for the runner scale-set side: its settings, its state, and what GitHub does to a listener.

The rate faults (acknowledgements lost, runners that never pick their job up) are world faults, switched with
`PUT /_sandbox/faults` like the others; these routes are the one-off acts: GitHub evicting a session,
expiring tokens early, deleting a scale set it found inactive, and adding a runner group (the REST API has no
route that creates one).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException, Response
from pydantic import BaseModel, Field

from corral_sandbox.github.actions.model import ScaleSet
from corral_sandbox.github.actions.service import ActionsService

if TYPE_CHECKING:
    from corral_sandbox.world import World


class ScaleSetSettingsRequest(BaseModel):
    """A key left out keeps its value; durations in seconds."""

    requires_acquire: bool | None = None
    admin_token_ttl_s: float | None = Field(default=None, gt=0)
    queue_token_ttl_s: float | None = Field(default=None, gt=0)
    session_expiry_s: float | None = Field(default=None, gt=0)
    long_poll_s: float | None = Field(default=None, ge=0, le=600)
    reassign_after_s: float | None = Field(default=None, ge=0)


class RunnerGroupRequest(BaseModel):
    scope: str = Field(
        pattern=r"^(orgs/[A-Za-z0-9-]+|enterprises/[A-Za-z0-9-]+)$", examples=["orgs/octo-org", "enterprises/octo-ent"]
    )
    name: str = Field(min_length=1, max_length=100)


def register_scaleset_routes(router: APIRouter, world: World) -> None:
    def service() -> ActionsService:
        return world.github.actions

    def scale_set_or_404(scale_set_id: int) -> ScaleSet:
        scale_set = service().registry.scale_sets.get(scale_set_id)
        if scale_set is None:
            raise HTTPException(status_code=404, detail=f"no scale set {scale_set_id}")
        return scale_set

    def scale_set_id_or_404(scale_set_id: int) -> int:
        return scale_set_or_404(scale_set_id).id

    @router.get("/scalesets")
    async def scale_sets() -> list[dict[str, Any]]:
        """Every scale set: its tenant, labels, advertised capacity, session and statistics."""
        return service().view()

    @router.get("/scalesets/settings")
    async def get_settings() -> dict[str, Any]:
        return dataclasses.asdict(service().settings)

    @router.put("/scalesets/settings")
    async def put_settings(body: ScaleSetSettingsRequest) -> dict[str, Any]:
        """Change the Actions service's switches and timings (see `ActionsSettings`); answers all of them."""
        settings = service().settings
        for name, value in body.model_dump(exclude_none=True).items():
            setattr(settings, name, value)
        service().jobs.reconsider()
        return dataclasses.asdict(settings)

    @router.post("/scalesets/admin-tokens/expire")
    async def expire_admin_tokens() -> dict[str, int]:
        """Every admin token issued so far stops working (401) before its `exp`: the client must exchange again."""
        return {"expired": service().tokens.revoke_admin()}

    @router.post("/scalesets/{scale_set_id}/session/expire-token")
    async def expire_queue_token(scale_set_id: int) -> dict[str, int]:
        """The set's session keeps living, but its queue token stops working (401) until the session is refreshed."""
        session = service().sessions.active(scale_set_id_or_404(scale_set_id))
        if session is None:
            raise HTTPException(status_code=404, detail=f"scale set {scale_set_id} has no session")
        return {"expired": service().tokens.revoke_queue(session.id)}

    @router.post("/scalesets/{scale_set_id}/session/kill")
    async def kill_session(scale_set_id: int) -> dict[str, bool]:
        """GitHub evicts the set's session: its polls get 401, its refresh 404, its delete 400; a new one may open."""
        if not service().kill_session(scale_set_id_or_404(scale_set_id)):
            raise HTTPException(status_code=404, detail=f"scale set {scale_set_id} has no session")
        return {"killed": True}

    @router.delete("/scalesets/{scale_set_id}", status_code=204)
    async def delete_scale_set(scale_set_id: int) -> Response:
        """GitHub deletes the set, as it does one left inactive for days (its session and idle runners go)."""
        service().delete_scale_set(scale_set_or_404(scale_set_id))
        return Response(status_code=204)

    @router.post("/runner-groups", status_code=201)
    async def create_runner_group(body: RunnerGroupRequest) -> dict[str, Any]:
        """A runner group of an organisation or enterprise, for scale sets to be created in."""
        kind, _, login = body.scope.partition("/")
        tenant = service().registry.tenant_for(login if kind == "orgs" else body.scope)
        if tenant is None:
            raise HTTPException(status_code=404, detail=f"{body.scope} is not an organisation or enterprise")
        try:
            group = service().registry.add_group(tenant.scope, body.name)
        except ValueError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from exc
        return {"id": group.id, "name": group.name, "scope": body.scope}
