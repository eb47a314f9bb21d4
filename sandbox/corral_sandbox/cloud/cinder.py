"""Cinder v3 volumes and volume types, with the status transitions clients wait on.

Volumes a server's block device mappings create live here too, so a client sees them go `in-use` with
the boot and disappear with the server when they were mapped `delete_on_termination`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from corral_sandbox.cloud import seed
from corral_sandbox.cloud.clock import iso_micro
from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.microversion import CINDER, Version
from corral_sandbox.cloud.records import Volume
from corral_sandbox.cloud.service import json_body, no_content, respond, service_router
from corral_sandbox.cloud.state import CloudState, detach

if TYPE_CHECKING:
    from corral_sandbox.world import World

TYPE_IDS = {name: type_id for type_id, (name, _) in seed.VOLUME_TYPES.items()}
VOLUME_FILTERS = ("name", "status", "bootable", "availability_zone")


def volume_links(base: str, volume: Volume) -> list[dict[str, str]]:
    project = base.rsplit("/", 1)[-1]
    root = base.rsplit("/v3/", 1)[0]
    return [
        {"rel": "self", "href": f"{base}/volumes/{volume.id}"},
        {"rel": "bookmark", "href": f"{root}/{project}/volumes/{volume.id}"},
    ]


def volume_body(state: CloudState, base: str, volume: Volume, version: Version) -> dict[str, Any]:
    attachments = []
    if volume.server_id and volume.status == "in-use":
        attachments.append(
            {
                "id": volume.id,
                "attachment_id": volume.attachment_id,
                "volume_id": volume.id,
                "server_id": volume.server_id,
                "host_name": None,
                "device": volume.device,
                "attached_at": iso_micro(volume.attached_at) if volume.attached_at else None,
            }
        )
    body: dict[str, Any] = {
        "id": volume.id,
        "status": volume.status,
        "size": volume.size,
        "availability_zone": volume.availability_zone,
        "created_at": iso_micro(volume.created_at),
        "updated_at": iso_micro(volume.updated_at) if volume.updated_at != volume.created_at else None,
        "name": volume.name,
        "description": volume.description,
        "volume_type": volume.volume_type,
        "snapshot_id": None,
        "source_volid": None,
        "metadata": volume.metadata,
        "links": volume_links(base, volume),
        "user_id": state.user_id,
        "bootable": "true" if volume.bootable else "false",
        "encrypted": False,
        "replication_status": None,
        "consistencygroup_id": None,
        "multiattach": False,
        "attachments": attachments,
        "migration_status": None,
    }
    if version >= (3, 13):
        body["group_id"] = None
    if version >= (3, 21):
        body["provider_id"] = None
    if version >= (3, 48):
        body.update(shared_targets=False, service_uuid=None)
    if version >= (3, 63):
        body["volume_type_id"] = TYPE_IDS.get(volume.volume_type)
    if version >= (3, 65):
        body["consumes_quota"] = True
    body["os-vol-tenant-attr:tenant_id"] = state.project_id
    image = state.images.get(volume.image_id or "")
    if image is not None:
        body["volume_image_metadata"] = {
            **{key: str(value) for key, value in image.properties.items()},
            "image_id": image.id,
            "image_name": image.name,
            "checksum": image.checksum,
            "container_format": image.container_format,
            "disk_format": image.disk_format,
            "min_disk": str(image.min_disk),
            "min_ram": str(image.min_ram),
            "size": str(image.size),
        }
    return body


def _size(value: Any) -> int:
    text = str(value)
    if not text.isdigit() or int(text) < 1:
        if text.isdigit():
            raise ApiError(
                400, f"Invalid input for field/attribute size. Value: {value}. {value} is less than the minimum of 1"
            )
        raise ApiError(
            400, f"Invalid input for field/attribute size. Value: {value}. '{value}' does not match '^[0-9]+$'"
        )
    return int(text)


def build_cinder_router(world: World, cloud: CloudState) -> APIRouter:
    public = service_router(world, cloud, "volume", prefix="/volume", authenticated=False, microversions=CINDER)
    router = service_router(world, cloud, "volume", prefix="/volume/v3/{project_id}", microversions=CINDER)
    state = cloud
    base = f"{cloud.url}/volume/v3/{state.project_id}"

    def versions(request: Request) -> Response:
        version = {
            "id": "v3.0",
            "status": "CURRENT",
            "version": CINDER.text(CINDER.maximum),
            "min_version": CINDER.text(CINDER.minimum),
            "updated": "2023-08-31T00:00:00Z",
            "links": [
                {"rel": "describedby", "type": "text/html", "href": "https://docs.openstack.org/"},
                {"rel": "self", "href": f"{cloud.url}/volume/v3/"},
            ],
            "media-types": [{"base": "application/json", "type": "application/vnd.openstack.volume+json;version=3"}],
        }
        return respond(request, {"versions": [version]}, 300)

    @public.get("")
    @public.get("/")
    async def discovery(request: Request) -> Response:
        return versions(request)

    @public.get("/v3")
    @public.get("/v3/")
    async def v3_discovery(request: Request) -> Response:
        response = versions(request)
        response.status_code = 200
        return response

    def check_project(project_id: str) -> None:
        if project_id != state.project_id:
            raise ApiError(400, "Malformed request url")

    def find(volume_id: str) -> Volume:
        volume = state.volumes.get(volume_id)
        if volume is None:
            raise ApiError(404, f"Volume {volume_id} could not be found.")
        return volume

    def listed(request: Request) -> list[Volume]:
        params = request.query_params
        volumes = sorted(state.volumes.values(), key=lambda volume: volume.created_at, reverse=True)
        wanted = {name: params[name] for name in VOLUME_FILTERS if name in params}
        return [
            volume
            for volume in volumes
            if all(
                str(volume_body(state, base, volume, (3, 0))[name]).lower() == value.lower()
                for name, value in wanted.items()
            )
        ]

    @router.get("/volumes")
    async def list_volumes(request: Request, project_id: str) -> Response:
        check_project(project_id)
        items = [{"id": v.id, "name": v.name, "links": volume_links(base, v)} for v in listed(request)]
        return respond(request, {"volumes": items})

    @router.get("/volumes/detail")
    async def list_volumes_detail(request: Request, project_id: str) -> Response:
        check_project(project_id)
        version = request.state.version
        return respond(request, {"volumes": [volume_body(state, base, v, version) for v in listed(request)]})

    @router.post("/volumes")
    async def create_volume(request: Request, project_id: str) -> Response:
        check_project(project_id)
        spec = (await json_body(request)).get("volume")
        if not isinstance(spec, dict):
            raise ApiError(400, "Missing required element 'volume' in request body.")
        size = _size(spec.get("size"))
        type_name = spec.get("volume_type") or seed.DEFAULT_VOLUME_TYPE
        if type_name not in TYPE_IDS and type_name not in seed.VOLUME_TYPES:
            raise ApiError(404, f"Volume type with name {type_name} could not be found.")
        type_name = seed.VOLUME_TYPES.get(type_name, (type_name, ""))[0]
        image_id = spec.get("imageRef") or spec.get("image_id")
        if image_id is not None and image_id not in state.images:
            raise ApiError(400, "Invalid image identifier or unable to access requested image.")
        metadata = spec.get("metadata") or {}
        volume = state.create_volume(
            name=spec.get("name"),
            size=size,
            volume_type=type_name,
            image_id=image_id,
            description=spec.get("description"),
            metadata={str(k): str(v) for k, v in metadata.items()},
        )
        return respond(request, {"volume": volume_body(state, base, volume, request.state.version)}, 202)

    @router.get("/volumes/{volume_id}")
    async def show_volume(request: Request, project_id: str, volume_id: str) -> Response:
        check_project(project_id)
        return respond(request, {"volume": volume_body(state, base, find(volume_id), request.state.version)})

    @router.post("/volumes/{volume_id}/action")
    async def volume_action(request: Request, project_id: str, volume_id: str) -> Response:
        """`os-detach` only, as its owner may send it: frees a volume still attached (to a server that may be
        gone), optionally naming the attachment."""
        check_project(project_id)
        volume = find(volume_id)
        body = await json_body(request)
        if set(body) != {"os-detach"}:
            raise ApiError(400, f"There is no such action: {', '.join(sorted(body)) or 'none'}")
        detach_args = body["os-detach"] or {}
        if not isinstance(detach_args, dict):
            raise ApiError(400, "Invalid input for field/attribute os-detach.")
        wanted = detach_args.get("attachment_id")
        if volume.server_id is None or volume.status not in ("in-use", "reserved", "attaching", "detaching"):
            raise ApiError(400, "Invalid volume: Volume must be attached in order to detach.")
        if wanted is not None and wanted != volume.attachment_id:
            raise ApiError(404, f"Volume attachment {wanted} could not be found.")
        detach(volume)
        return no_content(request, 202)

    @router.delete("/volumes/{volume_id}")
    async def delete_volume(request: Request, project_id: str, volume_id: str) -> Response:
        check_project(project_id)
        state.delete_volume(volume_id)
        return no_content(request, 202)

    def type_body(type_id: str) -> dict[str, Any]:
        name, description = seed.VOLUME_TYPES[type_id]
        return {
            "id": type_id,
            "name": name,
            "is_public": True,
            "description": description,
            "extra_specs": {},
            "qos_specs_id": None,
            "os-volume-type-access:is_public": True,
        }

    @router.get("/types")
    async def list_types(request: Request, project_id: str) -> Response:
        check_project(project_id)
        return respond(request, {"volume_types": [type_body(type_id) for type_id in seed.VOLUME_TYPES]})

    @router.get("/types/{type_id}")
    async def show_type(request: Request, project_id: str, type_id: str) -> Response:
        check_project(project_id)
        type_id = TYPE_IDS.get(type_id, type_id)
        if type_id not in seed.VOLUME_TYPES:
            raise ApiError(404, f"Volume type {type_id} could not be found.")
        return respond(request, {"volume_type": type_body(type_id)})

    @router.get("/limits")
    async def limits(request: Request, project_id: str) -> Response:
        check_project(project_id)
        quota, used = state.quota, state.used
        absolute = {
            "maxTotalVolumes": quota["volumes"],
            "maxTotalSnapshots": 10,
            "maxTotalVolumeGigabytes": quota["gigabytes"],
            "maxTotalBackups": 10,
            "maxTotalBackupGigabytes": 1000,
            "totalVolumesUsed": used["volumes"],
            "totalGigabytesUsed": used["gigabytes"],
            "totalSnapshotsUsed": 0,
            "totalBackupsUsed": 0,
            "totalBackupGigabytesUsed": 0,
        }
        return respond(request, {"limits": {"rate": [], "absolute": absolute}})

    @router.get("/os-quota-sets/{target}")
    async def quota_set(request: Request, project_id: str, target: str) -> Response:
        check_project(project_id)
        usage = request.query_params.get("usage", "false").lower() in ("true", "1")
        values = {
            "volumes": (state.quota["volumes"], state.used["volumes"]),
            "gigabytes": (state.quota["gigabytes"], state.used["gigabytes"]),
            "snapshots": (10, 0),
            "backups": (10, 0),
            "backup_gigabytes": (1000, 0),
            "groups": (10, 0),
            "per_volume_gigabytes": (-1, 0),
        }
        body: dict[str, Any] = {
            name: {"limit": limit, "in_use": in_use, "reserved": 0} if usage else limit
            for name, (limit, in_use) in values.items()
        }
        body["id"] = target
        return respond(request, {"quota_set": body})

    combined = APIRouter()
    combined.include_router(public)
    combined.include_router(router)
    return combined
