"""Nova's server bodies, field for field as Nova 34 shows them to a project member at each microversion.

The fields that appear with a microversion are the ones Nova's view builder adds: `locked` at 2.9,
`description` at 2.19, `tags` at 2.26, the embedded flavor at 2.47, `trusted_image_certificates` at 2.63,
`server_groups` (show only) at 2.71, `locked_reason` at 2.73, `OS-EXT-SRV-ATTR:hostname` for members at
2.90, `pinned_availability_zone` at 2.96, image `properties` at 2.98 and `scheduler_hints` at 2.100.
Admin-only fields (`OS-EXT-SRV-ATTR:host`, `host_status`, fault `details`) are left out: the sandbox's
user is a member, as corral's should be.

A detail body only changes when the server does, so each one is serialized once per view and cached on
the record; a listing of a thousand servers joins cached bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from corral_sandbox.cloud.clock import iso_micro, iso_z
from corral_sandbox.cloud.microversion import Version
from corral_sandbox.cloud.records import Server
from corral_sandbox.cloud.state import CloudState

THRESHOLDS: tuple[Version, ...] = (
    (2, 3),
    (2, 9),
    (2, 19),
    (2, 26),
    (2, 47),
    (2, 63),
    (2, 71),
    (2, 73),
    (2, 90),
    (2, 96),
    (2, 98),
    (2, 100),
)
"""Microversions at which the server body changes; versions between two thresholds share a cached view."""

PROGRESS_STATUSES = frozenset({"ACTIVE", "BUILD", "REBUILD", "RESIZE", "VERIFY_RESIZE", "MIGRATING"})


def view_key(version: Version) -> Version:
    """The highest threshold at or below `version`: the cache key for its server body."""
    key: Version = (2, 1)
    for threshold in THRESHOLDS:
        if version >= threshold:
            key = threshold
    return key


def links(base: str, kind: str, item_id: str) -> list[dict[str, str]]:
    """Nova's self (versioned) and bookmark (unversioned) links."""
    return [
        {"rel": "self", "href": f"{base}/v2.1/{kind}/{item_id}"},
        {"rel": "bookmark", "href": f"{base}/{kind}/{item_id}"},
    ]


class ServerViews:
    """Builds server bodies for one cloud; `base` is Nova's unversioned URL (`.../compute`)."""

    def __init__(self, state: CloudState, base: str) -> None:
        self.state = state
        self.base = base
        self.host_id_salt = state.project_id

    def summary(self, server: Server) -> dict[str, Any]:
        return {"id": server.id, "name": server.name, "links": links(self.base, "servers", server.id)}

    def detail_bytes(self, server: Server, version: Version, *, show: bool = False) -> bytes:
        key = (view_key(version), show)
        cached = server.view_cache.get(key)
        if cached is None:
            cached = json.dumps(self.detail(server, version, show=show), separators=(",", ":")).encode()
            server.view_cache[key] = cached
        return cached

    def detail(self, server: Server, version: Version, *, show: bool = False) -> dict[str, Any]:
        state = self.state
        scheduled = server.status != "ERROR" or server.launched_at is not None
        body: dict[str, Any] = {
            "accessIPv4": "",
            "accessIPv6": "",
            "addresses": self.addresses(server),
            "created": iso_z(server.created),
            "flavor": self.flavor(server, version),
            "hostId": self.host_id() if server.launched_at is not None else "",
            "id": server.id,
            "image": self.image(server, version),
            "links": links(self.base, "servers", server.id),
            "metadata": server.metadata,
            "name": server.name,
            "status": server.status,
            "tenant_id": state.project_id,
            "user_id": state.user_id,
            "updated": iso_z(server.updated),
            "OS-DCF:diskConfig": "MANUAL",
        }
        if server.fault is not None:
            body["fault"] = {
                "code": server.fault.code,
                "created": server.fault.created,
                "message": server.fault.message,
            }
        if server.status in PROGRESS_STATUSES:
            body["progress"] = 0
        body["OS-EXT-AZ:availability_zone"] = server.availability_zone if scheduled else ""
        body["config_drive"] = "True" if server.config_drive else ""
        body["key_name"] = server.key_name
        body["OS-SRV-USG:launched_at"] = iso_micro(server.launched_at) if server.launched_at else None
        body["OS-SRV-USG:terminated_at"] = None
        ports = state.server_ports(server)
        if ports:
            # Nova asks Neutron and lists each port's groups, so a group shows once per network.
            groups = state.security_groups
            body["security_groups"] = [
                {"name": groups[group_id].name} for port in ports for group_id in port.security_group_ids
            ]
        if version >= (2, 90):
            body["OS-EXT-SRV-ATTR:hostname"] = server.hostname
        body["OS-EXT-STS:task_state"] = server.task_state
        body["OS-EXT-STS:vm_state"] = server.vm_state
        body["OS-EXT-STS:power_state"] = server.power_state
        body["os-extended-volumes:volumes_attached"] = [
            {"id": attachment.volume_id, "delete_on_termination": attachment.delete_on_termination}
            if version >= (2, 3)
            else {"id": attachment.volume_id}
            for attachment in server.attachments
        ]
        if version >= (2, 9):
            body["locked"] = False
        if version >= (2, 19):
            body["description"] = server.description
        if version >= (2, 26):
            body["tags"] = server.tags
        if version >= (2, 63):
            body["trusted_image_certificates"] = None
        if version >= (2, 71) and show:
            body["server_groups"] = [server.server_group_id] if server.server_group_id else []
        if version >= (2, 73):
            body["locked_reason"] = None
        if version >= (2, 96):
            body["pinned_availability_zone"] = server.pinned_az
        if version >= (2, 100):
            body["scheduler_hints"] = server.scheduler_hints
        return body

    def host_id(self) -> str:
        """Nova's hostId: a per-project hash of the host name, so tenants cannot compare hosts."""
        return hashlib.sha224(f"{self.host_id_salt}sandbox".encode()).hexdigest()

    def addresses(self, server: Server) -> dict[str, list[dict[str, Any]]]:
        addresses: dict[str, list[dict[str, Any]]] = {}
        for port in self.state.server_ports(server):
            network = self.state.networks[port.network_id]
            addresses.setdefault(network.name, []).append(
                {
                    "version": 4,
                    "addr": port.ip_address,
                    "OS-EXT-IPS:type": "fixed",
                    "OS-EXT-IPS-MAC:mac_addr": port.mac_address,
                }
            )
        return addresses

    def flavor(self, server: Server, version: Version) -> dict[str, Any]:
        if version < (2, 47):
            return {
                "id": server.flavor_id,
                "links": [{"rel": "bookmark", "href": f"{self.base}/flavors/{server.flavor_id}"}],
            }
        flavor = self.state.flavors[server.flavor_id]
        return {
            "vcpus": flavor.vcpus,
            "ram": flavor.ram,
            "disk": flavor.disk,
            "ephemeral": flavor.ephemeral,
            "swap": flavor.swap,
            "original_name": flavor.name,
            "extra_specs": flavor.extra_specs,
        }

    def image(self, server: Server, version: Version) -> dict[str, Any] | str:
        if not server.image_id:
            return ""
        body: dict[str, Any] = {
            "id": server.image_id,
            "links": [{"rel": "bookmark", "href": f"{self.base}/images/{server.image_id}"}],
        }
        if version >= (2, 98):
            image = self.state.images.get(server.image_id)
            body["properties"] = dict(image.properties) if image else {}
        return body
