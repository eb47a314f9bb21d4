"""Nova's servers API: create, list (with Nova's filters and pagination), show, update, delete, actions,
volume attachments, metadata and tags."""

from __future__ import annotations

import heapq
import json
import re
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response

from corral_sandbox.cloud.clock import now, parse_iso
from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.microversion import NOVA
from corral_sandbox.cloud.nova_views import ServerViews, links
from corral_sandbox.cloud.records import Attachment, Server
from corral_sandbox.cloud.server_request import (
    parse_server_request,
    validate_metadata,
    validate_name,
    validate_single_tag,
    validate_tag,
)
from corral_sandbox.cloud.service import (
    json_body,
    no_content,
    raw_json,
    respond,
    service_router,
    version_at_least,
)

if TYPE_CHECKING:
    from corral_sandbox.cloud.state import CloudState
    from corral_sandbox.world import World

MAX_LIMIT = 1000
"""Nova's `[api] max_limit`: a page never holds more, whatever the client asks."""
STATUSES = frozenset(
    {
        "ACTIVE",
        "BUILD",
        "DELETED",
        "ERROR",
        "HARD_REBOOT",
        "MIGRATING",
        "PASSWORD",
        "PAUSED",
        "REBOOT",
        "REBUILD",
        "RESCUE",
        "RESIZE",
        "REVERT_RESIZE",
        "SHELVED",
        "SHELVED_OFFLOADED",
        "SHUTOFF",
        "SOFT_DELETED",
        "SUSPENDED",
        "UNKNOWN",
        "VERIFY_RESIZE",
    }
)
LIST_PARAMS = frozenset(
    {
        "name",
        "status",
        "tags",
        "tags-any",
        "not-tags",
        "not-tags-any",
        "changes-since",
        "changes-before",
        "image",
        "flavor",
        "ip",
        "ip6",
        "all_tenants",
        "limit",
        "marker",
        "sort_key",
        "sort_dir",
        "reservation_id",
        "availability_zone",
        "uuid",
        "key_name",
        "locked",
        "description",
        "config_drive",
        "created_at",
        "launched_at",
        "terminated_at",
        "power_state",
        "task_state",
        "vm_state",
        "progress",
        "user_id",
        "project_id",
        "tenant_id",
        "deleted",
        "host",
        "node",
        "hostname",
        "access_ip_v4",
        "access_ip_v6",
        "pinned_availability_zone",
        "launch_index",
        "root_device_name",
        "kernel_id",
        "ramdisk_id",
    }
)
"""Query parameters Nova's schema knows; from 2.75 anything else is a 400."""


class ServerFilter:
    """Nova's list filters, applied in memory: `name` and `ip` are regular expressions, tags match whole."""

    def __init__(self, params: dict[str, str], cloud: CloudState) -> None:
        self.name = _regex(params.get("name"))
        self.ip = _regex(params.get("ip"))
        status = params.get("status")
        if status is not None and status.upper() not in STATUSES:
            raise ApiError(400, "Invalid status value")
        self.status = status.upper() if status else None
        self.tags = _tag_set(params.get("tags"))
        self.tags_any = _tag_set(params.get("tags-any"))
        self.not_tags = _tag_set(params.get("not-tags"))
        self.not_tags_any = _tag_set(params.get("not-tags-any"))
        self.since = _time_param(params, "changes-since")
        self.before = _time_param(params, "changes-before")
        self.image = params.get("image")
        self.flavor = params.get("flavor")
        self.zone = params.get("availability_zone")
        self.uuid = params.get("uuid")
        self.cloud = cloud

    def __call__(self, server: Server) -> bool:
        if self.status and server.status != self.status:
            return False
        if self.name and not self.name.search(server.name):
            return False
        tags = set(server.tags)
        if self.tags and not self.tags <= tags:
            return False
        if self.tags_any and not self.tags_any & tags:
            return False
        if self.not_tags and self.not_tags <= tags:
            return False
        if self.not_tags_any and self.not_tags_any & tags:
            return False
        if self.since and server.updated < self.since:
            return False
        if self.before and server.updated > self.before:
            return False
        if self.image and server.image_id != self.image:
            return False
        if self.flavor and server.flavor_id != self.flavor:
            return False
        if self.zone and server.availability_zone != self.zone:
            return False
        if self.uuid and server.id != self.uuid:
            return False
        if self.ip:
            addresses = (port.ip_address for port in self.cloud.server_ports(server))
            return any(self.ip.search(address) for address in addresses)
        return True


def _regex(pattern: str | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error:
        return re.compile(re.escape(pattern))


def _tag_set(value: str | None) -> set[str]:
    return {tag for tag in value.split(",") if tag} if value else set()


def _time_param(params: dict[str, str], name: str) -> Any:
    text = params.get(name)
    if text is None:
        return None
    moment = parse_iso(text)
    if moment is None:
        raise ApiError(400, f"Invalid input for query parameters {name}. Value: {text}. '{text}' is not a 'date-time'")
    return moment


def _limit(params: dict[str, str]) -> int:
    text = params.get("limit")
    if text is None:
        return MAX_LIMIT
    if not text.isdigit():
        raise ApiError(
            400, f"Invalid input for query parameters limit. Value: {text}. '{text}' does not match '^[0-9]*$'"
        )
    return min(int(text), MAX_LIMIT)


def build_server_router(world: World, cloud: CloudState) -> APIRouter:
    router = service_router(world, cloud, "compute", prefix="/compute/v2.1", microversions=NOVA)
    state = cloud
    views = ServerViews(state, f"{cloud.url}/compute")

    def page(request: Request, path: str) -> tuple[list[Server], list[dict[str, str]]]:
        params = dict(request.query_params)
        if version_at_least(request, (2, 75)):
            for key in params:
                if key not in LIST_PARAMS and not key.startswith("_"):
                    raise ApiError(400, f"'{key}' does not match any of the regexes: '^_'")
        keep = ServerFilter(params, state)
        limit = _limit(params)
        marker = params.get("marker")
        candidates: Iterator[Server] = reversed(state.servers.values())
        if keep.since is not None and state.deleted_servers:
            # Nova lists recently deleted servers (`DELETED`) to a `changes-since` query, newest first with
            # the rest: by creation time, as its default sort.
            deleted = sorted(state.deleted_servers.values(), key=lambda server: server.created, reverse=True)
            candidates = heapq.merge(candidates, deleted, key=lambda server: server.created, reverse=True)
        if marker is not None:
            candidates = _after(candidates, marker)
        found: list[Server] = []
        for server in candidates:
            if len(found) >= limit:
                break
            if keep(server):
                found.append(server)
        next_links = []
        if found and len(found) == limit:
            query = {key: value for key, value in params.items() if key not in ("marker", "limit")}
            query.update(limit=str(limit), marker=found[-1].id)
            href = f"{cloud.url}/compute/v2.1/{path}?{urlencode(query)}"
            next_links.append({"rel": "next", "href": href})
        return found, next_links

    @router.get("/servers")
    async def list_servers(request: Request) -> Response:
        servers, next_links = page(request, "servers")
        body: dict[str, Any] = {"servers": [views.summary(server) for server in servers]}
        if next_links:
            body["servers_links"] = next_links
        return respond(request, body)

    @router.get("/servers/detail")
    async def list_servers_detail(request: Request) -> Response:
        servers, next_links = page(request, "servers/detail")
        version = request.state.version
        parts = [views.detail_bytes(server, version) for server in servers]
        payload = b'{"servers":[' + b",".join(parts) + b"]"
        if next_links:
            payload += b',"servers_links":' + json.dumps(next_links, separators=(",", ":")).encode()
        return raw_json(request, payload + b"}")

    @router.post("/servers")
    async def create_server(request: Request) -> Response:
        spec = parse_server_request(state, await json_body(request), request.state.version)
        server = state.create_server(spec)
        server_links = links(views.base, "servers", server.id)
        body = {
            "server": {
                "id": server.id,
                "links": server_links,
                "OS-DCF:diskConfig": "MANUAL",
                "security_groups": [{"name": name} for name in server.security_groups],
                "adminPass": secrets.token_urlsafe(9)[:12],
            }
        }
        response = respond(request, body, 202)
        response.headers["Location"] = server_links[0]["href"]
        return response

    @router.get("/servers/{server_id}")
    async def show_server(request: Request, server_id: str) -> Response:
        server = state.server(server_id)
        detail = views.detail_bytes(server, request.state.version, show=True)
        return raw_json(request, b'{"server":' + detail + b"}")

    @router.put("/servers/{server_id}")
    async def update_server(request: Request, server_id: str) -> Response:
        server = state.server(server_id)
        changes = (await json_body(request)).get("server")
        if not isinstance(changes, dict):
            raise ApiError(400, "Malformed request body")
        if "name" in changes:
            server.name = validate_name(changes["name"])
        if "description" in changes and version_at_least(request, (2, 19)):
            server.description = changes["description"]
        if "hostname" in changes and version_at_least(request, (2, 90)):
            server.hostname = str(changes["hostname"])
        server.touch(now())
        detail = views.detail_bytes(server, request.state.version, show=True)
        return raw_json(request, b'{"server":' + detail + b"}")

    @router.delete("/servers/{server_id}")
    async def delete_server(request: Request, server_id: str) -> Response:
        state.delete_server(server_id)
        return no_content(request)

    @router.post("/servers/{server_id}/action")
    async def server_action(request: Request, server_id: str) -> Response:
        server = state.server(server_id)
        body = await json_body(request)
        action = next(iter(body), None)
        if action == "os-stop":
            if server.status != "ACTIVE":
                raise ApiError(409, f"Cannot 'stop' instance {server_id} while it is in vm_state {server.vm_state}")
            state.power_off(server_id)
        elif action == "os-start":
            if server.status != "SHUTOFF":
                raise ApiError(409, f"Cannot 'start' instance {server_id} while it is in vm_state {server.vm_state}")
            state.power_on(server_id)
        else:
            raise ApiError(400, f"There is no such action: {action}")
        return no_content(request, 202)

    # -- volume attachments --------------------------------------------------------------------

    def attachment_body(request: Request, server: Server, attachment: Attachment) -> dict[str, Any]:
        """Nova's view: the volume id doubles as `id` until 2.89, which adds the attachment's own ids."""
        version = request.state.version
        body: dict[str, Any] = {} if version >= (2, 89) else {"id": attachment.volume_id}
        body.update(volumeId=attachment.volume_id, serverId=server.id, device=attachment.device)
        if version >= (2, 70):
            body["tag"] = attachment.tag
        if version >= (2, 79):
            body["delete_on_termination"] = attachment.delete_on_termination
        if version >= (2, 89):
            volume = state.volumes.get(attachment.volume_id)
            body["attachment_id"] = volume.attachment_id if volume else None
            body["bdm_uuid"] = attachment.bdm_uuid
        return body

    @router.get("/servers/{server_id}/os-volume_attachments")
    async def list_volume_attachments(request: Request, server_id: str) -> Response:
        server = state.server(server_id)
        attachments = [attachment_body(request, server, attachment) for attachment in server.attachments]
        return respond(request, {"volumeAttachments": attachments})

    @router.get("/servers/{server_id}/os-volume_attachments/{volume_id}")
    async def show_volume_attachment(request: Request, server_id: str, volume_id: str) -> Response:
        server = state.server(server_id)
        attachment = next((a for a in server.attachments if a.volume_id == volume_id), None)
        if attachment is None:
            raise ApiError(404, f"Instance {server_id} is not attached to volume {volume_id}")
        return respond(request, {"volumeAttachment": attachment_body(request, server, attachment)})

    # -- metadata ------------------------------------------------------------------------------

    @router.get("/servers/{server_id}/metadata")
    async def get_metadata(request: Request, server_id: str) -> Response:
        return respond(request, {"metadata": state.server(server_id).metadata})

    async def _write_metadata(request: Request, server_id: str, *, replace: bool) -> Response:
        server = state.server(server_id)
        incoming = validate_metadata((await json_body(request)).get("metadata", {}))
        merged = incoming if replace else {**server.metadata, **incoming}
        validate_metadata(merged)
        server.metadata = merged
        server.touch(now())
        return respond(request, {"metadata": server.metadata})

    @router.post("/servers/{server_id}/metadata")
    async def update_metadata(request: Request, server_id: str) -> Response:
        return await _write_metadata(request, server_id, replace=False)

    @router.put("/servers/{server_id}/metadata")
    async def replace_metadata(request: Request, server_id: str) -> Response:
        return await _write_metadata(request, server_id, replace=True)

    @router.get("/servers/{server_id}/metadata/{key}")
    async def get_metadata_item(request: Request, server_id: str, key: str) -> Response:
        server = state.server(server_id)
        if key not in server.metadata:
            raise ApiError(404, "Metadata item was not found")
        return respond(request, {"meta": {key: server.metadata[key]}})

    @router.put("/servers/{server_id}/metadata/{key}")
    async def set_metadata_item(request: Request, server_id: str, key: str) -> Response:
        server = state.server(server_id)
        meta = (await json_body(request)).get("meta")
        if not isinstance(meta, dict) or len(meta) != 1:
            raise ApiError(
                400, "Request body contains too many items" if isinstance(meta, dict) else "Malformed request body"
            )
        if key not in meta:
            raise ApiError(400, "Request body and URI mismatch")
        merged = {**server.metadata, **validate_metadata(meta)}
        validate_metadata(merged)
        server.metadata = merged
        server.touch(now())
        return respond(request, {"meta": meta})

    @router.delete("/servers/{server_id}/metadata/{key}")
    async def delete_metadata_item(request: Request, server_id: str, key: str) -> Response:
        server = state.server(server_id)
        if key not in server.metadata:
            raise ApiError(404, "Metadata item was not found")
        server.metadata = {k: v for k, v in server.metadata.items() if k != key}
        server.touch(now())
        return no_content(request)

    # -- tags (2.26+) --------------------------------------------------------------------------

    def tagged(request: Request, server_id: str) -> Server:
        if not version_at_least(request, (2, 26)):
            raise ApiError(404, "The resource could not be found.")
        return state.server(server_id)

    @router.get("/servers/{server_id}/tags")
    async def list_tags(request: Request, server_id: str) -> Response:
        return respond(request, {"tags": tagged(request, server_id).tags})

    @router.put("/servers/{server_id}/tags")
    async def replace_tags(request: Request, server_id: str) -> Response:
        server = tagged(request, server_id)
        tags = (await json_body(request)).get("tags")
        if not isinstance(tags, list):
            raise ApiError(400, "Invalid input for field/attribute tags. Value: None. None is not of type 'array'")
        if len(tags) > 50:
            raise ApiError(400, f"Invalid input for field/attribute tags. Value: {tags}. {tags} is too long")
        server.tags = list(dict.fromkeys(validate_tag(tag, str(i)) for i, tag in enumerate(tags)))
        server.touch(now())
        return respond(request, {"tags": server.tags})

    @router.delete("/servers/{server_id}/tags")
    async def delete_tags(request: Request, server_id: str) -> Response:
        server = tagged(request, server_id)
        server.tags = []
        server.touch(now())
        return no_content(request)

    @router.get("/servers/{server_id}/tags/{tag}")
    async def check_tag(request: Request, server_id: str, tag: str) -> Response:
        server = tagged(request, server_id)
        if tag not in server.tags:
            raise ApiError(404, f"Server {server_id} has no tag '{tag}'")
        return no_content(request)

    @router.put("/servers/{server_id}/tags/{tag}")
    async def add_tag(request: Request, server_id: str, tag: str) -> Response:
        server = tagged(request, server_id)
        validate_single_tag(tag)
        if tag in server.tags:
            return no_content(request)
        if len(server.tags) >= 50:
            raise ApiError(400, "The number of tags exceeded the per-server limit 50")
        server.tags = [*server.tags, tag]
        server.touch(now())
        response = no_content(request, 201)
        response.headers["Location"] = f"{cloud.url}/compute/v2.1/servers/{server_id}/tags/{tag}"
        return response

    @router.delete("/servers/{server_id}/tags/{tag}")
    async def delete_tag(request: Request, server_id: str, tag: str) -> Response:
        server = tagged(request, server_id)
        if tag not in server.tags:
            raise ApiError(404, f"Instance {server_id} has no tag '{tag}'")
        server.tags = [existing for existing in server.tags if existing != tag]
        server.touch(now())
        return no_content(request)

    return router


def _after(servers: Iterator[Server], marker: str) -> Iterator[Server]:
    """The servers after `marker` in listing order; Nova's 400 if the marker is not among them."""
    for server in servers:
        if server.id == marker:
            return servers
    raise ApiError(400, f"marker [{marker}] not found")
