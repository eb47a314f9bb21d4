"""Nova's APIs around servers: version discovery, flavors, keypairs, availability zones, limits,
server groups and quota sets."""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import APIRouter, Request, Response

from corral_sandbox.cloud.clock import iso_micro, now
from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.microversion import NOVA
from corral_sandbox.cloud.nova_schema import invalid
from corral_sandbox.cloud.nova_views import links
from corral_sandbox.cloud.records import Flavor, Keypair, ServerGroup
from corral_sandbox.cloud.server_request import MAX_METADATA_ITEMS
from corral_sandbox.cloud.service import json_body, no_content, respond, service_router, version_at_least

if TYPE_CHECKING:
    from corral_sandbox.cloud.state import CloudState
    from corral_sandbox.world import World

POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")
FIXED_LIMITS = {"key_pairs": 100, "metadata_items": MAX_METADATA_ITEMS, "server_groups": 10, "server_group_members": 10}
LEGACY_LIMITS = {"injected_file_content_bytes": 10240, "injected_file_path_bytes": 255, "injected_files": 5}


def build_nova_versions_router(world: World, cloud: CloudState) -> APIRouter:
    """`/compute` and `/compute/v2.1`: answered without a token, as Nova does."""
    router = service_router(world, cloud, "compute", prefix="/compute", authenticated=False, microversions=NOVA)

    def version(request: Request) -> dict[str, Any]:
        return {
            "id": "v2.1",
            "status": "CURRENT",
            "version": NOVA.text(NOVA.maximum),
            "min_version": NOVA.text(NOVA.minimum),
            "updated": "2013-07-23T11:33:21Z",
            "links": [{"rel": "self", "href": f"{cloud.url}/compute/v2.1/"}],
        }

    @router.get("")
    @router.get("/")
    async def versions(request: Request) -> Response:
        return respond(request, {"versions": [version(request)]})

    @router.get("/v2.1")
    @router.get("/v2.1/")
    async def current(request: Request) -> Response:
        body = version(request)
        body["links"].append({"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"})
        body["media-types"] = [
            {"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2.1"}
        ]
        return respond(request, {"version": body})

    return router


def flavor_body(flavor: Flavor, base: str, request: Request) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": flavor.id,
        "name": flavor.name,
        "ram": flavor.ram,
        "disk": flavor.disk,
        "swap": flavor.swap if flavor.swap or version_at_least(request, (2, 75)) else "",
        "OS-FLV-EXT-DATA:ephemeral": flavor.ephemeral,
        "OS-FLV-DISABLED:disabled": False,
        "vcpus": flavor.vcpus,
        "os-flavor-access:is_public": flavor.is_public,
        "rxtx_factor": flavor.rxtx_factor,
        "links": links(base, "flavors", flavor.id),
    }
    if version_at_least(request, (2, 55)):
        body["description"] = flavor.description
    if version_at_least(request, (2, 61)):
        body["extra_specs"] = flavor.extra_specs
    return body


def fingerprint(public_key: str) -> str:
    """Nova's fingerprint: MD5 over the key blob, colon separated; invalid keys are a 400."""
    parts = public_key.split()
    try:
        blob = base64.b64decode(parts[1], validate=True) if len(parts) >= 2 else b""
    except (binascii.Error, ValueError):
        blob = b""
    if not blob or not parts[0].startswith(("ssh-", "ecdsa-")):
        raise ApiError(400, "Keypair data is invalid: failed to generate fingerprint")
    digest = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def generate_keypair() -> tuple[str, str]:
    """What Nova generates before 2.92: an RSA key, PEM private part, OpenSSH public part."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, f"{public} Generated-by-Nova"


def build_nova_resources_router(world: World, cloud: CloudState) -> APIRouter:
    router = service_router(world, cloud, "compute", prefix="/compute/v2.1", microversions=NOVA)
    state = cloud
    base = f"{cloud.url}/compute"

    # -- flavors -------------------------------------------------------------------------------

    def sorted_flavors() -> list[Flavor]:
        return sorted(state.flavors.values(), key=lambda flavor: flavor.id)

    @router.get("/flavors")
    async def list_flavors(request: Request) -> Response:
        items = []
        for flavor in sorted_flavors():
            item: dict[str, Any] = {"id": flavor.id, "name": flavor.name, "links": links(base, "flavors", flavor.id)}
            if version_at_least(request, (2, 55)):
                item["description"] = flavor.description
            items.append(item)
        return respond(request, {"flavors": items})

    @router.get("/flavors/detail")
    async def list_flavors_detail(request: Request) -> Response:
        return respond(request, {"flavors": [flavor_body(flavor, base, request) for flavor in sorted_flavors()]})

    @router.get("/flavors/{flavor_id}")
    async def show_flavor(request: Request, flavor_id: str) -> Response:
        return respond(request, {"flavor": flavor_body(state.flavor(flavor_id), base, request)})

    @router.get("/flavors/{flavor_id}/os-extra_specs")
    async def flavor_extra_specs(request: Request, flavor_id: str) -> Response:
        return respond(request, {"extra_specs": state.flavor(flavor_id).extra_specs})

    # -- keypairs ------------------------------------------------------------------------------

    def keypair_body(keypair: Keypair, request: Request, *, full: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": keypair.name,
            "public_key": keypair.public_key,
            "fingerprint": keypair.fingerprint,
        }
        if full:
            body.update(
                user_id=state.user_id,
                created_at=keypair.created_at,
                deleted=False,
                deleted_at=None,
                id=abs(hash(keypair.name)) % 100000,
                updated_at=None,
            )
        if version_at_least(request, (2, 2)):
            body["type"] = keypair.type
        return body

    @router.get("/os-keypairs")
    async def list_keypairs(request: Request) -> Response:
        items = [{"keypair": keypair_body(kp, request, full=False)} for kp in state.keypairs.values()]
        return respond(request, {"keypairs": items})

    @router.post("/os-keypairs")
    async def create_keypair(request: Request) -> Response:
        body = await json_body(request)
        spec = body.get("keypair")
        if not isinstance(spec, dict) or "name" not in spec:
            raise invalid("keypair", spec, "'name' is a required property")
        if version_at_least(request, (2, 92)) and "public_key" not in spec:
            raise invalid("keypair", spec, "'public_key' is a required property")
        name = str(spec["name"])
        private_key = None
        public_key = spec.get("public_key")
        if public_key is None:
            private_key, public_key = generate_keypair()
        keypair = Keypair(
            name=name,
            public_key=str(public_key),
            fingerprint=fingerprint(str(public_key)),
            type=str(spec.get("type", "ssh")),
            created_at=iso_micro(now()),
        )
        state.add_keypair(keypair)
        result = {
            "name": keypair.name,
            "public_key": keypair.public_key,
            "fingerprint": keypair.fingerprint,
            "user_id": state.user_id,
        }
        if version_at_least(request, (2, 2)):
            result["type"] = keypair.type
        if private_key is not None:
            result["private_key"] = private_key
        status = 201 if version_at_least(request, (2, 2)) else 200
        return respond(request, {"keypair": result}, status)

    @router.get("/os-keypairs/{name}")
    async def show_keypair(request: Request, name: str) -> Response:
        keypair = state.keypairs.get(name)
        if keypair is None:
            raise ApiError(404, f"Keypair {name} not found for user {state.user_id}")
        return respond(request, {"keypair": keypair_body(keypair, request, full=True)})

    @router.delete("/os-keypairs/{name}")
    async def delete_keypair(request: Request, name: str) -> Response:
        if state.keypairs.pop(name, None) is None:
            raise ApiError(404, f"Keypair {name} not found for user {state.user_id}")
        return no_content(request, 204 if version_at_least(request, (2, 2)) else 202)

    # -- availability zones, limits, quotas ----------------------------------------------------

    @router.get("/os-availability-zone")
    async def availability_zones(request: Request) -> Response:
        zone = {"zoneName": "nova", "zoneState": {"available": True}, "hosts": None}
        return respond(request, {"availabilityZoneInfo": [zone]})

    @router.get("/limits")
    async def limits(request: Request) -> Response:
        quota, used = state.quota, state.used
        absolute: dict[str, int] = {"maxTotalCores": quota["cores"]}
        if not version_at_least(request, (2, 57)):
            absolute.update(maxPersonality=5, maxPersonalitySize=10240)
        absolute.update(
            maxTotalInstances=quota["instances"],
            maxTotalKeypairs=FIXED_LIMITS["key_pairs"],
            maxServerMeta=MAX_METADATA_ITEMS,
        )
        if not version_at_least(request, (2, 39)):
            absolute["maxImageMeta"] = MAX_METADATA_ITEMS
        absolute.update(
            maxTotalRAMSize=quota["ram"],
            maxServerGroups=FIXED_LIMITS["server_groups"],
            maxServerGroupMembers=FIXED_LIMITS["server_group_members"],
        )
        legacy_network = not version_at_least(request, (2, 36))
        if legacy_network:
            absolute.update(maxTotalFloatingIps=-1, maxSecurityGroups=-1, maxSecurityGroupRules=-1)
        absolute.update(totalRAMUsed=used["ram"], totalCoresUsed=used["cores"], totalInstancesUsed=used["instances"])
        if legacy_network:
            absolute.update(totalFloatingIpsUsed=0, totalSecurityGroupsUsed=0)
        absolute["totalServerGroupsUsed"] = len(state.server_groups)
        return respond(request, {"limits": {"rate": [], "absolute": absolute}})

    def quota_values(request: Request) -> dict[str, tuple[int, int]]:
        values = {"cores": (state.quota["cores"], state.used["cores"])}
        if not version_at_least(request, (2, 36)):
            values.update(fixed_ips=(-1, 0), floating_ips=(-1, 0))
        if not version_at_least(request, (2, 57)):
            values.update({name: (limit, 0) for name, limit in LEGACY_LIMITS.items()})
        values.update(
            instances=(state.quota["instances"], state.used["instances"]),
            key_pairs=(FIXED_LIMITS["key_pairs"], len(state.keypairs)),
            metadata_items=(MAX_METADATA_ITEMS, 0),
            ram=(state.quota["ram"], state.used["ram"]),
        )
        if not version_at_least(request, (2, 36)):
            values.update(security_group_rules=(-1, 0), security_groups=(-1, 0))
        values.update(
            server_group_members=(FIXED_LIMITS["server_group_members"], 0),
            server_groups=(FIXED_LIMITS["server_groups"], len(state.server_groups)),
        )
        return values

    def check_project(project_id: str) -> None:
        if project_id != state.project_id:
            raise ApiError(403, "Policy doesn't allow os_compute_api:os-quota-sets:show to be performed.")

    @router.get("/os-quota-sets/{project_id}")
    async def show_quota(request: Request, project_id: str) -> Response:
        check_project(project_id)
        body: dict[str, Any] = {"id": project_id}
        body.update({name: limit for name, (limit, _) in quota_values(request).items()})
        return respond(request, {"quota_set": body})

    @router.get("/os-quota-sets/{project_id}/detail")
    async def show_quota_detail(request: Request, project_id: str) -> Response:
        check_project(project_id)
        body: dict[str, Any] = {"id": project_id}
        body.update(
            {
                name: {"limit": limit, "in_use": in_use, "reserved": 0}
                for name, (limit, in_use) in quota_values(request).items()
            }
        )
        return respond(request, {"quota_set": body})

    @router.put("/os-quota-sets/{project_id}")
    async def update_quota(request: Request, project_id: str) -> Response:
        raise ApiError(403, "Policy doesn't allow os_compute_api:os-quota-sets:update to be performed.")

    # -- server groups -------------------------------------------------------------------------

    def group_body(group: ServerGroup, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = {"id": group.id, "name": group.name}
        if version_at_least(request, (2, 64)):
            body.update(policy=group.policy, rules=group.rules)
        else:
            body.update(policies=[group.policy], metadata={})
        body.update(members=group.members, project_id=state.project_id, user_id=state.user_id)
        return body

    @router.get("/os-server-groups")
    async def list_groups(request: Request) -> Response:
        return respond(request, {"server_groups": [group_body(g, request) for g in state.server_groups.values()]})

    @router.post("/os-server-groups")
    async def create_group(request: Request) -> Response:
        spec = (await json_body(request)).get("server_group")
        if not isinstance(spec, dict) or not spec.get("name"):
            raise invalid("server_group", spec, "'name' is a required property")
        if version_at_least(request, (2, 64)):
            policy, rules = spec.get("policy"), spec.get("rules", {})
        else:
            policies = spec.get("policies") or [None]
            policy, rules = policies[0], {}
        if policy not in POLICIES:
            raise invalid("policy", policy, f"{policy!r} is not one of {list(POLICIES)}")
        group = state.add_server_group(str(spec["name"]), str(policy), rules)
        return respond(request, {"server_group": group_body(group, request)})

    def find_group(group_id: str) -> ServerGroup:
        group = state.server_groups.get(group_id)
        if group is None:
            raise ApiError(404, f"Instance group {group_id} could not be found.")
        return group

    @router.get("/os-server-groups/{group_id}")
    async def show_group(request: Request, group_id: str) -> Response:
        return respond(request, {"server_group": group_body(find_group(group_id), request)})

    @router.delete("/os-server-groups/{group_id}")
    async def delete_group(request: Request, group_id: str) -> Response:
        state.server_groups.pop(find_group(group_id).id)
        return no_content(request)

    return router
