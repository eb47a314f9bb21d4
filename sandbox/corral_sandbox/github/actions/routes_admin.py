"""The Actions service's `_apis` routes, under `{service URL}` = `/_actions/{tenant}/`.

Runner groups and scale sets (`_apis/runtime/...`), runners (`_apis/distributedtask/pools/0/agents`), message
sessions and `acquirejobs`, with the paths, query parameters and status codes `actions/scaleset`'s client
uses. Every route takes `Authorization: Bearer <admin token>` for its tenant (401 otherwise) and an
`api-version` with `-preview` (400 otherwise), except `acquirejobs`, which takes the session's queue token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from corral_sandbox.github.actions import errors, views
from corral_sandbox.github.actions.errors import fault_response
from corral_sandbox.github.actions.http import bearer, json_object, json_value, path_id, require_preview_version
from corral_sandbox.github.actions.model import ScaleSet, Tenant
from corral_sandbox.github.actions.service import SERVICE_PREFIX, ActionsService
from corral_sandbox.github.model import DEFAULT_GROUP_ID, Runner
from corral_sandbox.http import instrumented_router

if TYPE_CHECKING:
    from corral_sandbox.world import World

BASE = SERVICE_PREFIX + "/{tenant}/_apis"
SCALE_SETS = BASE + "/runtime/runnerscalesets"
AGENTS = BASE + "/distributedtask/pools/0/agents"
SETTING_KEYS = {"ephemeral": "ephemeral", "iselastic": "is_elastic", "disableupdate": "disable_update"}


def _listing(items: list[dict[str, Any]]) -> JSONResponse:
    return JSONResponse({"count": len(items), "value": items})


def _name(body: dict[str, Any], key: str, *, required: bool) -> str | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise errors.bad_request(f"Value cannot be null or empty. (Parameter '{key}')")
    return value.strip()


def _labels(body: dict[str, Any]) -> list[str] | None:
    labels = body.get("labels")
    if labels is None:
        return None
    names = []
    for label in labels if isinstance(labels, list) else [None]:
        name = label.get("name") if isinstance(label, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise errors.bad_request("Each label must be an object with a non-empty 'name'.")
        names.append(name.strip())
    return names


def _settings(body: dict[str, Any]) -> dict[str, bool] | None:
    """`RunnerSetting` (the Go client's key) or `runnerSetting`; its keys matched case-insensitively, as Go does."""
    found = next((value for key, value in body.items() if key.lower() == "runnersetting"), None)
    if found is None:
        return None
    if not isinstance(found, dict):
        raise errors.bad_request("'runnerSetting' must be an object.")
    settings = dict.fromkeys(SETTING_KEYS.values(), False)
    for key, value in found.items():
        if key.lower() in SETTING_KEYS:
            settings[SETTING_KEYS[key.lower()]] = bool(value)
    return settings


def _group_id(body: dict[str, Any]) -> int | None:
    value = body.get("runnerGroupId")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise errors.bad_request("'runnerGroupId' must be an integer.")
    return value


def install(app: FastAPI, world: World) -> None:
    router = instrumented_router(world, "github", fault_response)

    def service() -> ActionsService:
        return world.github.actions

    def tenant_of(request: Request) -> Tenant:
        tenant = service().admin(bearer(request), request.path_params["tenant"])
        require_preview_version(request)
        return tenant

    def scale_set_of(request: Request, tenant: Tenant) -> ScaleSet:
        raw = request.path_params["scale_set_id"]
        return service().registry.get(tenant, path_id(request, "scale_set_id", errors.scale_set_not_found(raw)))

    def runner_of(request: Request, tenant: Tenant) -> Runner:
        raw = request.path_params["runner_id"]
        runner = service().state.scheduler.get(tenant.scope, path_id(request, "runner_id", errors.agent_not_found(raw)))
        if runner is None:
            raise errors.agent_not_found(raw)
        return runner

    # -- runner groups -------------------------------------------------------------------------

    async def runner_groups(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        wanted = request.query_params.get("groupName")
        runners = service().state.scheduler.in_scope(tenant.scope)
        groups = [
            views.runner_group(group, sum(1 for r in runners if r.group_id == group.id))
            for group in service().registry.groups_of(tenant.scope)
            if wanted is None or group.name.lower() == wanted.lower()
        ]
        return _listing(groups)

    # -- scale sets ----------------------------------------------------------------------------

    async def list_scale_sets(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        raw_group, name = request.query_params.get("runnerGroupId"), request.query_params.get("name")
        try:
            group_id = int(raw_group) if raw_group is not None else None
        except ValueError as exc:
            raise errors.bad_request("'runnerGroupId' must be an integer.") from exc
        found = [
            service().scale_set_json(s)
            for s in service().registry.in_tenant(tenant)
            if (group_id is None or s.group_id == group_id) and (name is None or s.name.lower() == name.lower())
        ]
        return _listing(found)

    async def create_scale_set(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        body = await json_object(request)
        name = _name(body, "name", required=True)
        assert name is not None
        group_id = _group_id(body) or DEFAULT_GROUP_ID
        scale_set = service().registry.create(tenant, name, group_id, _labels(body) or [], _settings(body) or {})
        service().created(scale_set)
        return JSONResponse(service().scale_set_json(scale_set))

    async def get_scale_set(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        return JSONResponse(service().scale_set_json(scale_set_of(request, tenant)))

    async def update_scale_set(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        scale_set = scale_set_of(request, tenant)
        body = await json_object(request)
        service().registry.update(
            scale_set, _name(body, "name", required=False), _group_id(body) or None, _labels(body), _settings(body)
        )
        service().created(scale_set)
        return JSONResponse(service().scale_set_json(scale_set))

    async def delete_scale_set(request: Request) -> Response:
        tenant = tenant_of(request)
        service().delete_scale_set(scale_set_of(request, tenant))
        return Response(status_code=204)

    async def generate_jit_config(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        scale_set = scale_set_of(request, tenant)
        body = await json_object(request)
        name = _name(body, "name", required=True)
        assert name is not None
        work_folder = body.get("workFolder") or "_work"
        if not isinstance(work_folder, str):
            raise errors.bad_request("'workFolder' must be a string.")
        runner, config = service().generate_jit(scale_set, name, work_folder)
        return JSONResponse({"runner": views.runner_reference(runner), "encodedJITConfig": config})

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        scale_set = scale_set_of(request, tenant)
        owner = _name(await json_object(request), "ownerName", required=True)
        assert owner is not None
        return JSONResponse(service().open_session(scale_set, owner))

    async def refresh_session(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        scale_set = scale_set_of(request, tenant)
        session = service().sessions.find(scale_set.id, request.path_params["session_id"])
        if session is None:
            raise errors.session_unknown()
        token = service().sessions.refresh(session)
        return JSONResponse(service().session_json(session, scale_set, token))

    async def delete_session(request: Request) -> Response:
        tenant = tenant_of(request)
        scale_set = scale_set_of(request, tenant)
        session = service().sessions.find(scale_set.id, request.path_params["session_id"])
        if session is None:
            raise errors.session_expired(request.path_params["session_id"])
        service().sessions.drop(session)
        return Response(status_code=204)

    async def acquire_jobs(request: Request) -> JSONResponse:
        session = service().sessions.authenticate(bearer(request))
        require_preview_version(request)
        tenant = service().registry.tenants.get(request.path_params["tenant"])
        if tenant is None:
            raise errors.unauthorized()
        scale_set = scale_set_of(request, tenant)
        if session.scale_set_id != scale_set.id:
            raise errors.unauthorized()
        ids = await json_value(request)
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise errors.bad_request("The request body must be a JSON array of runner request ids.")
        acquired = service().jobs.acquire(scale_set, ids)
        return JSONResponse({"count": len(acquired), "value": acquired})

    # -- runners -------------------------------------------------------------------------------

    async def list_agents(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        name = request.query_params.get("agentName")
        runners = service().state.scheduler.in_scope(tenant.scope)
        return _listing([views.runner_reference(r) for r in runners if name is None or r.name.lower() == name.lower()])

    async def get_agent(request: Request) -> JSONResponse:
        tenant = tenant_of(request)
        return JSONResponse(views.runner_reference(runner_of(request, tenant)))

    async def delete_agent(request: Request) -> Response:
        tenant = tenant_of(request)
        runner = runner_of(request, tenant)
        if runner.busy:
            raise errors.job_still_running(runner.name)
        service().state.scheduler.delete(runner)
        return Response(status_code=204)

    routes: list[tuple[str, str, Callable[[Request], Any]]] = [
        ("GET", BASE + "/runtime/runnergroups/", runner_groups),
        ("GET", BASE + "/runtime/runnergroups", runner_groups),
        ("GET", SCALE_SETS, list_scale_sets),
        ("POST", SCALE_SETS, create_scale_set),
        ("GET", SCALE_SETS + "/{scale_set_id}", get_scale_set),
        ("PATCH", SCALE_SETS + "/{scale_set_id}", update_scale_set),
        ("DELETE", SCALE_SETS + "/{scale_set_id}", delete_scale_set),
        ("POST", SCALE_SETS + "/{scale_set_id}/generatejitconfig", generate_jit_config),
        ("POST", SCALE_SETS + "/{scale_set_id}/sessions", create_session),
        ("PATCH", SCALE_SETS + "/{scale_set_id}/sessions/{session_id}", refresh_session),
        ("DELETE", SCALE_SETS + "/{scale_set_id}/sessions/{session_id}", delete_session),
        ("POST", SCALE_SETS + "/{scale_set_id}/acquirejobs", acquire_jobs),
        ("GET", AGENTS, list_agents),
        ("GET", AGENTS + "/{runner_id}", get_agent),
        ("DELETE", AGENTS + "/{runner_id}", delete_agent),
    ]
    for method, path, handler in routes:
        router.add_api_route(path, handler, methods=[method])
    app.include_router(router)
