"""Keystone v3: version discovery, password and application-credential tokens, and the catalog.

openstacksdk (through keystoneauth) discovers the identity version at `/identity`, posts to
`/v3/auth/tokens`, takes the token from `X-Subject-Token` and finds every other service in the catalog
embedded in the token body. Every other service then checks `X-Auth-Token` against the tokens issued here.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from corral_sandbox.cloud.clock import now
from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.service import AUTH_REQUIRED, json_body, service_router
from corral_sandbox.cloud.state import Token, new_token

if TYPE_CHECKING:
    from corral_sandbox.cloud.state import CloudState
    from corral_sandbox.world import World

REGION = "RegionOne"
TOKEN_LIFETIME = timedelta(hours=1)
DOMAIN = {"id": "default", "name": "Default"}
IDENTITY_VERSION = "v3.14"
MEDIA_TYPES = [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}]

CATALOG_SERVICES = (
    ("identity", "keystone", "/identity"),
    ("compute", "nova", "/compute/v2.1"),
    ("image", "glance", "/image"),
    ("network", "neutron", "/network"),
    ("block-storage", "cinder", "/volume/v3/{project_id}"),
    ("volumev3", "cinderv3", "/volume/v3/{project_id}"),
)
"""DevStack's catalog: openstacksdk asks for `block-storage` and accepts its `volumev3` alias."""


def catalog(cloud: CloudState) -> list[dict[str, Any]]:
    entries = []
    for service_type, name, path in CATALOG_SERVICES:
        url = cloud.url + path.format(project_id=cloud.project_id)
        endpoints = [
            {
                "id": uuid.uuid5(uuid.NAMESPACE_URL, f"{service_type}/{interface}").hex,
                "interface": interface,
                "region_id": cloud.region,
                "url": url,
                "region": cloud.region,
            }
            for interface in ("public", "internal", "admin")
        ]
        entries.append(
            {
                "endpoints": endpoints,
                "id": uuid.uuid5(uuid.NAMESPACE_URL, service_type).hex,
                "type": service_type,
                "name": name,
            }
        )
    return entries


def _version(cloud: CloudState) -> dict[str, Any]:
    return {
        "id": IDENTITY_VERSION,
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": f"{cloud.url}/identity/v3/"}],
        "media-types": MEDIA_TYPES,
    }


def _timestamp(moment: Any) -> str:
    return str(moment.strftime("%Y-%m-%dT%H:%M:%S.000000Z"))


def _authenticate(world: World, cloud: CloudState, body: dict[str, Any]) -> str:
    """Check the identity in an auth request; returns the method, or raises Keystone's 401."""
    credentials = world.credentials
    auth = body.get("auth")
    identity = auth.get("identity") if isinstance(auth, dict) else None
    methods = identity.get("methods") if isinstance(identity, dict) else None
    if not isinstance(identity, dict) or not isinstance(methods, list) or not methods:
        raise ApiError(400, "Invalid input for field 'identity': 'methods' is a required property")
    method = str(methods[0])
    if method == "password":
        user = (identity.get("password") or {}).get("user") or {}
        domain = user.get("domain") or {}
        name_ok = user.get("name") == credentials.openstack_username or user.get("id") == cloud.user_id
        domain_ok = "id" in user or domain.get("name") == DOMAIN["name"] or domain.get("id") == DOMAIN["id"]
        secret_ok = secrets.compare_digest(str(user.get("password", "")), credentials.openstack_password)
        if name_ok and domain_ok and secret_ok:
            _check_scope(world, cloud, auth.get("scope") if isinstance(auth, dict) else None)
            return method
    elif method == "application_credential":
        app_cred = identity.get("application_credential") or {}
        if app_cred.get("id") == credentials.app_credential_id and secrets.compare_digest(
            str(app_cred.get("secret", "")), credentials.app_credential_secret
        ):
            return method
    raise ApiError(401, AUTH_REQUIRED)


def _check_scope(world: World, cloud: CloudState, scope: Any) -> None:
    if scope is None:
        return
    project = scope.get("project") if isinstance(scope, dict) else None
    if not isinstance(project, dict):
        raise ApiError(401, AUTH_REQUIRED)
    domain = project.get("domain") or {}
    by_name = project.get("name") == world.credentials.openstack_project and (
        domain.get("name") == DOMAIN["name"] or domain.get("id") == DOMAIN["id"]
    )
    if not (by_name or project.get("id") == cloud.project_id):
        raise ApiError(401, AUTH_REQUIRED)


def token_body(world: World, cloud: CloudState, token: Token, issued_at: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "methods": [token.method],
        "user": {
            "domain": DOMAIN,
            "id": cloud.user_id,
            "name": world.credentials.openstack_username,
            "password_expires_at": None,
        },
        "audit_ids": [secrets.token_urlsafe(16)],
        "expires_at": token.expires_at,
        "issued_at": issued_at,
        "project": {"domain": DOMAIN, "id": cloud.project_id, "name": world.credentials.openstack_project},
        "is_domain": False,
        "roles": [{"id": uuid.uuid5(uuid.NAMESPACE_URL, role).hex, "name": role} for role in ("member", "reader")],
        "catalog": catalog(cloud),
    }
    if token.method == "application_credential":
        body["application_credential"] = {
            "id": world.credentials.app_credential_id,
            "name": "corral",
            "restricted": True,
        }
    return {"token": body}


def build_keystone_router(world: World, cloud: CloudState) -> APIRouter:
    public = service_router(world, cloud, "identity", prefix="/identity", authenticated=False)
    protected = service_router(world, cloud, "identity", prefix="/identity")

    @public.get("")
    @public.get("/")
    async def versions(request: Request) -> Response:
        return JSONResponse({"versions": {"values": [_version(cloud)]}}, status_code=300)

    @public.get("/v3")
    @public.get("/v3/")
    async def version(request: Request) -> Response:
        return JSONResponse({"version": _version(cloud)})

    @public.post("/v3/auth/tokens")
    async def issue(request: Request) -> Response:
        method = _authenticate(world, cloud, await json_body(request))
        moment = now()
        token = Token(expires_at=_timestamp(moment + TOKEN_LIFETIME), method=method)
        value = new_token()
        cloud.tokens[value] = token
        world.stats.incr("openstack_tokens_issued")
        return JSONResponse(
            token_body(world, cloud, token, _timestamp(moment)), status_code=201, headers={"X-Subject-Token": value}
        )

    @protected.get("/v3/auth/tokens")
    async def validate(request: Request) -> Response:
        subject = request.headers.get("x-subject-token", "")
        token = cloud.tokens.get(subject)
        if token is None:
            raise ApiError(404, f"Could not find token: {subject}.")
        return JSONResponse(token_body(world, cloud, token, token.expires_at), headers={"X-Subject-Token": subject})

    @protected.head("/v3/auth/tokens")
    async def check(request: Request) -> Response:
        subject = request.headers.get("x-subject-token", "")
        if subject not in cloud.tokens:
            raise ApiError(404, f"Could not find token: {subject}.")
        return Response(status_code=200)

    @protected.delete("/v3/auth/tokens")
    async def revoke(request: Request) -> Response:
        subject = request.headers.get("x-subject-token", "")
        if cloud.tokens.pop(subject, None) is None:
            raise ApiError(404, f"Could not find token: {subject}.")
        return Response(status_code=204)

    router = APIRouter()
    router.include_router(public)
    router.include_router(protected)
    return router
