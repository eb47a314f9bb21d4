"""Glance v2 images: discovery, list with Glance's filters and pagination links, show."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.records import Image
from corral_sandbox.cloud.service import respond, service_router

if TYPE_CHECKING:
    from corral_sandbox.cloud.state import CloudState
    from corral_sandbox.world import World

CURRENT_MINOR = 18
"""Glance 33 (2026.2) reports v2.18 as CURRENT and every earlier v2.x as SUPPORTED."""
DEFAULT_LIMIT = 25
MAX_LIMIT = 1000
IMAGE_FILTERS = ("name", "status", "visibility", "disk_format", "container_format", "id", "owner")


def image_body(image: Image, owner: str) -> dict[str, Any]:
    body: dict[str, Any] = dict(image.properties)
    body.update(
        name=image.name,
        disk_format=image.disk_format,
        container_format=image.container_format,
        visibility=image.visibility,
        size=image.size,
        virtual_size=image.size,
        status=image.status,
        checksum=image.checksum,
        protected=False,
        min_ram=image.min_ram,
        min_disk=image.min_disk,
        owner=owner,
        os_hidden=False,
        os_hash_algo="sha512",
        os_hash_value=image.os_hash_value,
        id=image.id,
        created_at=image.created_at,
        updated_at=image.created_at,
        tags=image.tags,
        self=f"/v2/images/{image.id}",
        file=f"/v2/images/{image.id}/file",
        schema="/v2/schemas/image",
    )
    return body


def build_glance_router(world: World, cloud: CloudState) -> APIRouter:
    public = service_router(world, cloud, "image", prefix="/image", authenticated=False)
    router = service_router(world, cloud, "image", prefix="/image/v2")
    state = cloud

    def versions() -> dict[str, Any]:
        href = f"{cloud.url}/image/v2/"
        return {
            "versions": [
                {
                    "id": f"v2.{minor}",
                    "status": "CURRENT" if minor == CURRENT_MINOR else "SUPPORTED",
                    "links": [{"rel": "self", "href": href}],
                }
                for minor in range(CURRENT_MINOR, -1, -1)
            ]
        }

    @public.get("")
    @public.get("/")
    async def discovery(request: Request) -> Response:
        return JSONResponse(versions(), status_code=300)

    @public.get("/versions")
    async def version_list(request: Request) -> Response:
        return JSONResponse(versions())

    @router.get("/images")
    async def list_images(request: Request) -> Response:
        params = request.query_params
        wanted_tags = params.getlist("tag")
        limit_text = params.get("limit", str(DEFAULT_LIMIT))
        if not limit_text.isdigit():
            raise ApiError(400, "limit param must be an integer")
        limit = min(int(limit_text), MAX_LIMIT)
        images = sorted(state.images.values(), key=lambda image: (image.created_at, image.id), reverse=True)
        marker = params.get("marker")
        if marker is not None:
            ids = [image.id for image in images]
            if marker not in ids:
                raise ApiError(400, f"marker {marker} could not be found.")
            images = images[ids.index(marker) + 1 :]
        matching = [
            image
            for image in images
            if all(
                params.get(name) in (None, getattr(image, name, None) if name != "owner" else state.project_id)
                for name in IMAGE_FILTERS
            )
            and all(tag in image.tags for tag in wanted_tags)
        ]
        page = matching[:limit]
        body: dict[str, Any] = {
            "images": [image_body(image, state.project_id) for image in page],
            "first": "/v2/images",
            "schema": "/v2/schemas/images",
        }
        if page and len(page) == limit:
            query = [(key, value) for key, value in params.multi_items() if key != "marker"]
            query.append(("marker", page[-1].id))
            body["next"] = f"/v2/images?{urlencode(query)}"
        return respond(request, body)

    @router.get("/images/{image_id}")
    async def show_image(request: Request, image_id: str) -> Response:
        image = state.images.get(image_id)
        if image is None:
            raise ApiError(404, f"No image found with ID {image_id}")
        return respond(request, image_body(image, state.project_id))

    combined = APIRouter()
    combined.include_router(public)
    combined.include_router(router)
    return combined
