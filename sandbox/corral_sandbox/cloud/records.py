"""The cloud's resources as small slotted records.

Ten thousand servers must fit in a few tens of megabytes, so a record holds only what some response
shows or some rule needs; everything derivable (links, addresses, embedded flavors) is built by the views.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(slots=True)
class Flavor:
    id: str
    name: str
    vcpus: int
    ram: int
    disk: int
    ephemeral: int = 0
    swap: int = 0
    rxtx_factor: float = 1.0
    is_public: bool = True
    description: str | None = None
    extra_specs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Image:
    id: str
    name: str
    size: int
    min_disk: int = 0
    min_ram: int = 0
    status: str = "active"
    visibility: str = "public"
    disk_format: str = "qcow2"
    container_format: str = "bare"
    tags: list[str] = field(default_factory=list)
    properties: dict[str, Any] = field(default_factory=dict)
    checksum: str = ""
    os_hash_value: str = ""
    created_at: str = ""


@dataclass(slots=True)
class Subnet:
    id: str
    name: str
    network_id: str
    cidr: str
    gateway_ip: str
    allocation_start: str
    allocation_end: str
    created_at: str


@dataclass(slots=True)
class Network:
    id: str
    name: str
    subnet_ids: list[str]
    created_at: str
    mtu: int = 1442
    shared: bool = False
    external: bool = False


@dataclass(slots=True)
class SecurityGroup:
    id: str
    name: str
    description: str
    rules: list[dict[str, Any]]
    created_at: str


@dataclass(slots=True)
class Port:
    id: str
    network_id: str
    subnet_id: str
    ip_address: str
    mac_address: str
    security_group_ids: list[str]
    created_at: str
    updated_at: str
    name: str = ""
    device_id: str = ""
    device_owner: str = ""
    status: str = "DOWN"
    owned_by_server: bool = False
    """Nova created it for a `{"uuid": network}` request and deletes it with the server."""


@dataclass(slots=True)
class Keypair:
    name: str
    public_key: str
    fingerprint: str
    type: str
    created_at: str


@dataclass(slots=True)
class ServerGroup:
    id: str
    name: str
    policy: str
    rules: dict[str, Any]
    members: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Attachment:
    volume_id: str
    delete_on_termination: bool
    device: str
    tag: str | None = None
    bdm_uuid: str = ""
    """The block device mapping's own id, shown from 2.89."""


@dataclass(slots=True)
class Fault:
    code: int
    message: str
    created: str


@dataclass(slots=True)
class Server:
    id: str
    name: str
    flavor_id: str
    image_id: str
    """Empty for a server booted from a volume, which Nova shows as `"image": ""`."""
    availability_zone: str
    created: datetime
    updated: datetime
    key_name: str | None = None
    user_data: str | None = None
    """The base64 text as posted; Nova keeps it encoded."""
    config_drive: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    security_groups: list[str] = field(default_factory=list)
    port_ids: list[str] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    server_group_id: str | None = None
    scheduler_hints: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    hostname: str = ""
    pinned_az: str | None = None
    status: str = "BUILD"
    vm_state: str = "building"
    task_state: str | None = "scheduling"
    power_state: int = 0
    launched_at: datetime | None = None
    fault: Fault | None = None
    deleting: bool = False
    view_cache: dict[Any, bytes] = field(default_factory=dict)
    """Serialized bodies by view key, dropped whenever the server changes."""

    def touch(self, now: datetime) -> None:
        """Record a change: bump `updated` and forget cached bodies."""
        self.updated = now
        self.view_cache.clear()


@dataclass(slots=True)
class Volume:
    id: str
    name: str | None
    size: int
    volume_type: str
    created_at: datetime
    updated_at: datetime
    availability_zone: str = "nova"
    description: str | None = None
    status: str = "creating"
    image_id: str | None = None
    server_id: str | None = None
    device: str | None = None
    attachment_id: str | None = None
    attached_at: datetime | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    bootable: bool = False


@dataclass(slots=True)
class ServerLife:
    """When one server was created, came up, stopped and went away (epoch seconds; None: not yet).

    Kept after the server is gone, so a benchmark can replay how many servers each owner had at any
    moment, exactly, instead of sampling listings and missing the peaks between samples.
    """

    id: str
    name: str
    metadata: dict[str, str]
    created_s: float
    active_s: float | None = None
    stopped_s: float | None = None
    errored_s: float | None = None
    delete_requested_s: float | None = None
    gone_s: float | None = None
    image_id: str | None = None

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "metadata": dict(self.metadata),
            "created_s": self.created_s,
            "image_id": self.image_id,
            "active_s": self.active_s,
            "stopped_s": self.stopped_s,
            "errored_s": self.errored_s,
            "delete_requested_s": self.delete_requested_s,
            "gone_s": self.gone_s,
        }
