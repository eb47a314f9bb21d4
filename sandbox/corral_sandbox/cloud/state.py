"""The cloud's state and the rules that change it: one project, its servers, ports, volumes and quotas.

Nova, Neutron and Cinder handlers all call in here, because one server touches all three services: a boot
allocates ports and creates volumes, a delete releases them. The HTTP modules only parse requests and
shape responses; every rule a client can observe through more than one service lives here.

It calls `world.server_active(server_id, user_data)` when a server reaches ACTIVE and
`world.server_gone(server_id)` when one is deleted or goes to ERROR. Everything runs on the world's
single event loop, so nothing here locks.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import secrets
import time
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral_sandbox.cloud import seed
from corral_sandbox.cloud.clock import iso_z, now
from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.records import (
    Attachment,
    Fault,
    Flavor,
    Image,
    Keypair,
    Network,
    Port,
    SecurityGroup,
    Server,
    ServerGroup,
    ServerLife,
    Subnet,
    Volume,
)

if TYPE_CHECKING:
    from corral_sandbox.world import World

NO_VALID_HOST = "No valid host was found. "
"""Nova's NoValidHost with an empty reason, trailing space included."""
POWER_NOSTATE, POWER_RUNNING, POWER_SHUTDOWN = 0, 1, 4
NOVA_QUOTAS = ("instances", "cores", "ram")
CINDER_QUOTAS = ("volumes", "gigabytes")
HISTORY_LIMIT = 100_000
"""Server lifetimes kept for `/_sandbox/servers`, oldest dropped first: a long demo must not grow without bound."""
DELETED_KEPT = 5_000
"""Deleted servers `changes-since` still lists (Nova keeps them until archived; bounded here the same way)."""


@dataclass(slots=True)
class NicRequest:
    """One entry of a create request's `networks`, resolved: a network to allocate on, or a port to use."""

    network_id: str | None = None
    port_id: str | None = None
    fixed_ip: str | None = None


@dataclass(slots=True)
class VolumeRequest:
    """One block device mapping that Cinder must satisfy: a new volume (from an image or blank) or an
    existing one."""

    size: int
    boot_index: int | None
    delete_on_termination: bool
    image_id: str | None = None
    volume_id: str | None = None
    volume_type: str | None = None
    device: str = ""
    """The guest's device name, in boot order (`/dev/vda` for the root disk); empty: by position."""
    tag: str | None = None


@dataclass
class ServerRequest:
    """A validated create request with every reference resolved to an object that exists."""

    name: str
    flavor: Flavor
    image_id: str
    nics: list[NicRequest]
    availability_zone: str
    security_groups: list[str]
    key_name: str | None = None
    user_data: str | None = None
    config_drive: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    volumes: list[VolumeRequest] = field(default_factory=list)
    server_group_id: str | None = None
    scheduler_hints: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    hostname: str | None = None


@dataclass
class Token:
    expires_at: str
    method: str


class CloudState:
    """Projects, flavors, images, networks, security groups, keypairs, servers, volumes and quotas.

    Interface the world and the control API rely on:
    - `power_off(server_id)`: the guest shut down (ACTIVE -> SHUTOFF); unknown ids are ignored.
    - `snapshot()`: counts for `/_sandbox/stats` (servers by status, created, deleted, volumes...).
    - `set_quota(**limits)`: instances, cores, ram, volumes, gigabytes for the sandbox project.
    - `quota_view()`: each quota's limit and what is in use.
    - `add_network(name, cidr)`: one more tenant network with a subnet.
    - `add_image(name, properties, tags)`: one more active image, the newest (an image pipeline's upload).
    - `history()`: every server's lifetime (`ServerLife.view()`), deleted ones included, oldest first.
    - `schedule_pending()`: run Nova's conductor now for every server accepted but not yet scheduled.
    - `reset()`: drop what was created at run time, restore default quotas and seeded resources.
    """

    def __init__(self, world: World, *, name: str = "one", url: str = "", region: str = "RegionOne") -> None:
        """`name`: which of the world's clouds this is (the first is `one`); `url`: where it is served."""
        self.world = world
        self.name = name
        self.url = url.rstrip("/")
        self.region = region
        self.side = "openstack" if name == "one" else f"openstack-{name}"
        """What its calls are counted and faulted as: `openstack` for the first cloud, `openstack-two`..."""
        self.project_id = seed.seeded_id("project", world.credentials.openstack_project).replace("-", "")
        self.user_id = seed.seeded_id("user", world.credentials.openstack_username).replace("-", "")
        self.tokens: dict[str, Token] = {}
        """Issued tokens survive `reset()`: a client's session belongs to the process, not the world."""
        self.reset()

    def reset(self) -> None:
        self.flavors: dict[str, Flavor] = {flavor.id: flavor for flavor in seed.flavors()}
        self.images: dict[str, Image] = {image.id: image for image in seed.images()}
        networks, subnets = seed.networks()
        self.networks: dict[str, Network] = {network.id: network for network in networks}
        self.subnets: dict[str, Subnet] = {subnet.id: subnet for subnet in subnets}
        self.security_groups: dict[str, SecurityGroup] = {sg.id: sg for sg in seed.security_groups()}
        self.keypairs: dict[str, Keypair] = {}
        self.server_groups: dict[str, ServerGroup] = {}
        self.servers: dict[str, Server] = {}
        """In creation order, which is the reverse of Nova's default listing order."""
        self.deleted_servers: OrderedDict[str, Server] = OrderedDict()
        """Servers deleted lately, oldest deletion first: Nova keeps their rows (soft-deleted, until an operator
        archives them) and lists them, status `DELETED`, to a `changes-since` query only."""
        self.lives: OrderedDict[str, ServerLife] = OrderedDict()
        self.ports: dict[str, Port] = {}
        self.ports_by_device: dict[str, list[str]] = {}
        self.volumes: dict[str, Volume] = {}
        self.quota: dict[str, int] = dict(seed.DEFAULT_QUOTA)
        self.used: Counter[str] = Counter()
        """Nova's usage: servers scheduled (instance records), those the quota recheck put in ERROR included."""
        self._over_quota: Counter[str] = Counter()
        """What the servers the quota recheck put in ERROR hold of `used`."""
        self._unscheduled: dict[str, str | None] = {}
        """Servers accepted but not yet scheduled (not counted by the quota yet), oldest first, each with the
        build failure its volumes met (None: none)."""
        self.counters: Counter[str] = Counter()
        self._free_ips: dict[str, list[str]] = {}
        self._next_ip: dict[str, int] = {
            subnet.id: int(ipaddress.IPv4Address(subnet.allocation_start)) for subnet in subnets
        }
        self._mac_serial = 0

    # -- the interface the world and control API use ------------------------------------------

    def power_off(self, server_id: str) -> None:
        server = self.servers.get(server_id)
        if server is None or server.status != "ACTIVE" or server.deleting:
            return
        server.status, server.vm_state, server.task_state = "SHUTOFF", "stopped", None
        server.power_state = POWER_SHUTDOWN
        server.touch(now())
        self._lived(server_id, "stopped_s")
        self.world.stats.incr("openstack_servers_powered_off")

    def power_on(self, server_id: str) -> None:
        """`os-start`: a SHUTOFF server runs again (its guest does not re-run its runner)."""
        server = self.server(server_id)
        server.status, server.vm_state, server.task_state = "ACTIVE", "active", None
        server.power_state = POWER_RUNNING
        server.touch(now())

    def set_quota(self, **limits: int) -> None:
        unknown = set(limits) - set(self.quota)
        if unknown:
            raise ValueError(f"unknown quotas {sorted(unknown)}; known: {sorted(self.quota)}")
        self.quota.update(limits)

    def add_network(self, name: str, cidr: str) -> Network:
        """A tenant network with one subnet, as an operator would add it (the sandbox's Neutron has no
        create call); for tests that need a second network. `reset()` forgets it."""
        block = ipaddress.IPv4Network(cidr)
        created = iso_z(now())
        network_id = str(uuid.uuid4())
        subnet = Subnet(
            id=str(uuid.uuid4()),
            name=f"{name}-subnet",
            network_id=network_id,
            cidr=cidr,
            gateway_ip=str(block[1]),
            allocation_start=str(block[2]),
            allocation_end=str(block[-2]),
            created_at=created,
        )
        network = Network(id=network_id, name=name, subnet_ids=[subnet.id], created_at=created)
        self.networks[network.id], self.subnets[subnet.id] = network, subnet
        self._next_ip[subnet.id] = int(block[2])
        return network

    def add_image(
        self,
        name: str,
        properties: dict[str, str] | None = None,
        tags: list[str] | None = None,
        image_id: str | None = None,
    ) -> Image:
        """An active image uploaded now, as an image pipeline would (the sandbox's Glance has no upload
        call); for tests of image filters and rollouts (`image_id`: known in advance, to break it first).
        `reset()` forgets it."""
        digest = secrets.token_hex(32)
        image = Image(
            id=image_id or str(uuid.uuid4()),
            name=name,
            size=2_361_393_152,
            min_disk=10,
            tags=list(tags or []),
            properties=dict(properties or {}),
            checksum=digest[:32],
            os_hash_value=digest * 2,
            created_at=iso_z(now()),
        )
        self.images[image.id] = image
        return image

    def history(self) -> list[dict[str, Any]]:
        return [life.view() for life in self.lives.values()]

    def _lived(self, server_id: str, moment: str) -> None:
        """Note the first time `server_id` reached `moment` (a `ServerLife` field)."""
        life = self.lives.get(server_id)
        if life is not None and getattr(life, moment) is None:
            setattr(life, moment, time.time())

    def quota_view(self) -> dict[str, dict[str, int]]:
        return {name: {"limit": limit, "in_use": self.used[name]} for name, limit in self.quota.items()}

    def snapshot(self) -> dict[str, Any]:
        by_status = Counter(server.status for server in self.servers.values())
        return {
            "servers": len(self.servers),
            "servers_by_status": dict(sorted(by_status.items())),
            "servers_created": self.counters["servers_created"],
            "servers_deleted": self.counters["servers_deleted"],
            "servers_errored": self.counters["servers_errored"],
            "volumes": len(self.volumes),
            "volumes_created": self.counters["volumes_created"],
            "volumes_deleted": self.counters["volumes_deleted"],
            "ports": len(self.ports),
            "keypairs": len(self.keypairs),
        }

    # -- lookups -------------------------------------------------------------------------------

    def server(self, server_id: str) -> Server:
        server = self.servers.get(server_id)
        if server is None:
            raise ApiError(404, f"Instance {server_id} could not be found.")
        return server

    def flavor(self, flavor_id: str) -> Flavor:
        flavor = self.flavors.get(flavor_id)
        if flavor is None:
            raise ApiError(404, f"Flavor {flavor_id} could not be found.")
        return flavor

    def server_ports(self, server: Server) -> list[Port]:
        return [self.ports[port_id] for port_id in server.port_ids if port_id in self.ports]

    # -- quotas --------------------------------------------------------------------------------

    def check_nova_quota(self, flavor: Flavor) -> None:
        """Nova checks instances, then cores, then ram, and names every quota that would be exceeded. It counts
        instance records, which its conductor makes when it schedules a server: creates accepted before then
        are not counted, and the conductor's recheck (`_schedule`) fails those that raced past the quota."""
        wanted = {"instances": 1, "cores": flavor.vcpus, "ram": flavor.ram}
        over = [
            name for name in NOVA_QUOTAS if self.quota[name] >= 0 and self.used[name] + wanted[name] > self.quota[name]
        ]
        if over:
            names = ", ".join(over)
            requested = ", ".join(str(wanted[name]) for name in over)
            used = ", ".join(str(self.used[name]) for name in over)
            limits = ", ".join(str(self.quota[name]) for name in over)
            raise ApiError(
                403,
                f"Quota exceeded for {names}: Requested {requested}, but already used {used} of {limits} {names}",
            )

    def ports_left(self) -> int | None:
        """Ports the project may still create (None: unlimited)."""
        limit = self.quota["ports"]
        return None if limit < 0 else max(limit - len(self.ports), 0)

    def check_port_quota_for_boot(self, needed: int) -> None:
        """Nova asks Neutron's quota before accepting a boot that creates ports, and refuses with 403 when
        they do not fit (`PortLimitExceeded`), before anything is created."""
        left = self.ports_left()
        if needed and left is not None and left < needed:
            raise ApiError(403, "Maximum number of ports exceeded")

    def volume_quota_error(self, size: int) -> ApiError | None:
        """Cinder's 413 for a volume that would not fit the project's volume or gigabyte quota."""
        if self.quota["volumes"] >= 0 and self.used["volumes"] + 1 > self.quota["volumes"]:
            return ApiError(
                413,
                f"VolumeLimitExceeded: Maximum number of volumes allowed ({self.quota['volumes']}) "
                "exceeded for quota 'volumes'.",
            )
        if self.quota["gigabytes"] >= 0 and self.used["gigabytes"] + size > self.quota["gigabytes"]:
            return ApiError(
                413,
                "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes "
                f"quota. Requested {size}G, quota is {self.quota['gigabytes']}G and "
                f"{self.used['gigabytes']}G has been consumed.",
            )
        return None

    # -- servers -------------------------------------------------------------------------------

    def create_server(self, request: ServerRequest) -> Server:
        """Accept a boot: the server is BUILD at once, scheduled after the schedule delay (at once by default)
        and ACTIVE (or ERROR) after the boot delay."""
        self.check_nova_quota(request.flavor)
        self.check_port_quota_for_boot(sum(1 for nic in request.nics if nic.port_id is None))
        moment = now()
        server = Server(
            id=str(uuid.uuid4()),
            name=request.name,
            flavor_id=request.flavor.id,
            image_id=request.image_id,
            availability_zone=request.availability_zone,
            created=moment,
            updated=moment,
            key_name=request.key_name,
            user_data=request.user_data,
            config_drive=request.config_drive,
            metadata=request.metadata,
            tags=request.tags,
            security_groups=request.security_groups,
            server_group_id=request.server_group_id,
            scheduler_hints=request.scheduler_hints,
            description=request.description,
            hostname=request.hostname or hostname_for(request.name),
        )
        server.port_ids = [self._plug(server, nic) for nic in request.nics]
        self.servers[server.id] = server
        self.lives[server.id] = ServerLife(
            server.id, server.name, dict(server.metadata), time.time(), image_id=server.image_id or None
        )
        while len(self.lives) > HISTORY_LIMIT:
            self.lives.popitem(last=False)
        if server.server_group_id:
            self.server_groups[server.server_group_id].members.append(server.id)
        self.counters["servers_created"] += 1
        self.world.stats.incr("openstack_servers_created")
        self._unscheduled[server.id] = self._attach_requested_volumes(server, request.volumes)
        if self.world.timings.schedule_delay > 0:
            self.world.call_later(self.world.timings.schedule_delay, self._schedule, server.id)
        else:
            self._schedule(server.id)
        return server

    def schedule_pending(self) -> None:
        """Nova's conductor, now, for every server accepted and not yet scheduled, oldest first: what
        `schedule_delay` does later (a test that makes creates race past the quota need not wait for it)."""
        for server_id in list(self._unscheduled):
            self._schedule(server_id)

    def _schedule(self, server_id: str) -> None:
        """Nova's conductor: the server becomes an instance record, counted by the quota, which is checked
        again; a server past it (creates that raced past the API's check) goes to ERROR with a 413 fault,
        as on Nova 34: "Quota exceeded for cores, instances: Requested 1, 1, but already used 3, 3 of 3, 3
        cores, instances". The others go on to boot."""
        if server_id not in self._unscheduled:
            return  # scheduled already (by `schedule_pending`), or deleted before
        failure = self._unscheduled.pop(server_id)
        server = self.servers[server_id]
        flavor = self.flavors.get(server.flavor_id)
        wanted = {"instances": 1, "cores": flavor.vcpus if flavor else 0, "ram": flavor.ram if flavor else 0}
        self.used.update(wanted)
        if server.deleting:
            return
        over = sorted(
            name
            for name in NOVA_QUOTAS
            if self.quota[name] >= 0 and self.used[name] - self._over_quota[name] > self.quota[name]
        )
        if over:
            self._over_quota.update(wanted)
            names = ", ".join(over)
            requested = ", ".join(str(wanted[name]) for name in over)
            used = ", ".join(str(self.used[name] - self._over_quota[name]) for name in over)
            limits = ", ".join(str(self.quota[name]) for name in over)
            message = f"Quota exceeded for {names}: Requested {requested}, but already used {used} of {limits} {names}"
            self._fail(server_id, message, code=413)
        elif failure is not None:
            self.world.call_later(self.world.timings.boot_delay, self._fail, server_id, failure)
        else:
            self.world.call_later(self.world.timings.boot_delay, self._finish_boot, server_id)

    def _attach_requested_volumes(self, server: Server, requests: list[VolumeRequest]) -> str | None:
        """Create and attach the mapped volumes; returns the build failure Cinder's quota causes, if any."""
        for index, request in enumerate(requests):
            volume_id = request.volume_id
            if volume_id is None:
                quota_error = self.volume_quota_error(request.size)
                if quota_error is not None:
                    return f"Build of instance {server.id} aborted: {quota_error.message}"
                volume = self.create_volume(
                    name="" if request.image_id else f"{server.id}-blank-vol",
                    size=request.size,
                    volume_type=request.volume_type,
                    image_id=request.image_id,
                )
                volume_id = volume.id
            device = request.device or "/dev/vd" + "abcdefghijklmnopqrstuvwxyz"[index % 26]
            volume = self.volumes[volume_id]
            volume.status, volume.server_id, volume.device = "reserved", server.id, device
            volume.attachment_id = str(uuid.uuid4())
            server.attachments.append(
                Attachment(volume_id, request.delete_on_termination, device, request.tag, str(uuid.uuid4()))
            )
        return None

    def _plug(self, server: Server, nic: NicRequest) -> str:
        if nic.port_id is not None:
            port = self.ports[nic.port_id]
        else:
            assert nic.network_id is not None
            port = self.create_port(nic.network_id, fixed_ip=nic.fixed_ip, security_group_names=server.security_groups)
            port.owned_by_server = True
        port.device_id, port.device_owner = server.id, f"compute:{server.availability_zone}"
        port.updated_at = iso_z(now())
        self.ports_by_device.setdefault(server.id, []).append(port.id)
        return port.id

    def _finish_boot(self, server_id: str) -> None:
        server = self.servers.get(server_id)
        if server is None or server.deleting:
            return
        broken = server.image_id and server.image_id in self.world.faults.world.failing_images
        if broken or self.world.faults.chance(self.world.faults.world.boot_failure_rate):
            self._fail(server_id, NO_VALID_HOST)
            return
        moment = now()
        server.status, server.vm_state, server.task_state = "ACTIVE", "active", None
        server.power_state, server.launched_at = POWER_RUNNING, moment
        for port in self.server_ports(server):
            port.status = "ACTIVE"
        for attachment in server.attachments:
            volume = self.volumes[attachment.volume_id]
            volume.status, volume.attached_at, volume.updated_at = "in-use", moment, moment
        server.touch(moment)
        self._lived(server.id, "active_s")
        self.world.stats.incr("openstack_servers_active")
        self.world.server_active(server.id, decode_user_data(server.user_data))

    def _fail(self, server_id: str, message: str, code: int = 500) -> None:
        """ERROR with a fault, as after a failed schedule or build: networking is torn down again."""
        server = self.servers.get(server_id)
        if server is None or server.deleting:
            return
        moment = now()
        server.status, server.vm_state, server.task_state = "ERROR", "error", None
        server.power_state = POWER_NOSTATE
        server.fault = Fault(code=code, message=message, created=iso_z(moment))
        self._unplug_all(server)
        server.touch(moment)
        self.counters["servers_errored"] += 1
        self._lived(server.id, "errored_s")
        self.world.stats.incr("openstack_servers_errored")
        self.world.server_gone(server.id)

    def crash(self, server_id: str) -> None:
        """An ACTIVE server's host fails: ERROR with a fault, as Nova shows a server its host took down (the
        ports stay, as after any failure of a running server); its runner loses its machine."""
        server = self.servers.get(server_id)
        if server is None or server.status != "ACTIVE" or server.deleting:
            return
        moment = now()
        server.status, server.vm_state, server.task_state = "ERROR", "error", None
        server.power_state = POWER_NOSTATE
        server.fault = Fault(code=500, message="Compute host failed: the instance is lost", created=iso_z(moment))
        server.touch(moment)
        self.counters["servers_errored"] += 1
        self._lived(server.id, "errored_s")
        self.world.stats.incr("openstack_servers_crashed")
        self.world.server_gone(server.id)

    def delete_server(self, server_id: str) -> None:
        """Nova answers 204 at once; the server leaves listings after the delete delay."""
        server = self.server(server_id)
        if not server.deleting:
            server.deleting, server.task_state = True, "deleting"
            server.touch(now())
            self._lived(server.id, "delete_requested_s")
            self.world.server_gone(server.id)
            self.world.call_later(self.world.timings.delete_delay, self._remove, server.id)

    def _remove(self, server_id: str) -> None:
        server = self.servers.pop(server_id, None)
        if server is None:
            return
        flavor = self.flavors.get(server.flavor_id)
        held = {"instances": 1, "cores": flavor.vcpus if flavor else 0, "ram": flavor.ram if flavor else 0}
        if server.id in self._unscheduled:
            # Deleted before it was scheduled: never counted, and only a build request in Nova's API database,
            # so no cell ever had its row and `changes-since` has nothing to report (measured on ministack).
            del self._unscheduled[server.id]
        else:
            self._keep_deleted(server)
            self.used.subtract(held)
            if server.fault is not None and server.fault.code == 413:
                self._over_quota.subtract(held)
        self._unplug_all(server)
        self.ports_by_device.pop(server.id, None)
        for attachment in server.attachments:
            volume = self.volumes.get(attachment.volume_id)
            if volume is None:
                continue
            if attachment.delete_on_termination:
                self._drop_volume(volume)
            elif not self.world.faults.chance(self.world.faults.world.stuck_attachment_rate):
                detach(volume)
            # else: Nova's call to Cinder failed, and the volume stays `in-use`, attached to a server that is gone
        group = self.server_groups.get(server.server_group_id or "")
        if group is not None and server.id in group.members:
            group.members.remove(server.id)
        self.counters["servers_deleted"] += 1
        self._lived(server.id, "gone_s")
        self.world.stats.incr("openstack_servers_deleted")

    def _keep_deleted(self, server: Server) -> None:
        """What Nova's `changes-since` shows of a deleted server: its row, `DELETED`, stamped now, with its
        metadata and tags gone (measured on a real Nova: `"metadata": {}`, `"tags": []`), so a listing filtered
        by tag never shows it. The newest `DELETED_KEPT` are kept, as if older ones had been archived."""
        tombstone = Server(
            id=server.id,
            name=server.name,
            flavor_id=server.flavor_id,
            image_id=server.image_id,
            availability_zone=server.availability_zone,
            created=server.created,
            updated=server.updated,
            key_name=server.key_name,
            config_drive=server.config_drive,
            status="DELETED",
            vm_state="deleted",
            task_state=None,
            power_state=server.power_state,
            launched_at=server.launched_at,
        )
        tombstone.touch(now())
        self.deleted_servers[server.id] = tombstone
        while len(self.deleted_servers) > DELETED_KEPT:
            self.deleted_servers.popitem(last=False)

    def _unplug_all(self, server: Server) -> None:
        """Delete the ports Nova made for this server; ports the user passed are only unbound."""
        for port in self.server_ports(server):
            if port.owned_by_server:
                self.delete_port(port.id)
            else:
                port.device_id, port.device_owner, port.status = "", "", "DOWN"
        server.port_ids = []

    # -- ports ---------------------------------------------------------------------------------

    def create_port(
        self,
        network_id: str,
        *,
        fixed_ip: str | None = None,
        security_group_names: list[str] | None = None,
        name: str = "",
    ) -> Port:
        left = self.ports_left()
        if left is not None and left < 1:
            raise ApiError(409, "Quota exceeded for resources: ['port'].", kind="OverQuota")
        network = self.networks[network_id]
        subnet = self.subnets[network.subnet_ids[0]]
        address = fixed_ip or self._allocate_ip(subnet)
        groups = security_group_names or ["default"]
        group_ids = [sg.id for sg in self.security_groups.values() if sg.name in groups]
        self._mac_serial += 1
        moment = iso_z(now())
        port = Port(
            id=str(uuid.uuid4()),
            network_id=network_id,
            subnet_id=subnet.id,
            ip_address=address,
            mac_address="fa:16:3e:{:02x}:{:02x}:{:02x}".format(*self._mac_serial.to_bytes(3, "big")),
            security_group_ids=group_ids,
            created_at=moment,
            updated_at=moment,
            name=name,
        )
        self.ports[port.id] = port
        return port

    def delete_port(self, port_id: str) -> None:
        port = self.ports.pop(port_id, None)
        if port is None:
            return
        self._free_ips.setdefault(port.subnet_id, []).append(port.ip_address)
        server = self.servers.get(port.device_id)
        if server is not None and port.id in server.port_ids:
            server.port_ids.remove(port.id)
            server.touch(now())

    def _allocate_ip(self, subnet: Subnet) -> str:
        free = self._free_ips.get(subnet.id)
        if free:
            return free.pop()
        value = self._next_ip[subnet.id]
        if value > int(ipaddress.IPv4Address(subnet.allocation_end)):
            raise ApiError(
                409,
                f"No more IP addresses available on network {subnet.network_id}.",
                kind="IpAddressGenerationFailure",
            )
        self._next_ip[subnet.id] = value + 1
        return str(ipaddress.IPv4Address(value))

    # -- volumes -------------------------------------------------------------------------------

    def create_volume(
        self,
        *,
        name: str | None,
        size: int,
        volume_type: str | None = None,
        image_id: str | None = None,
        description: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Volume:
        """Cinder's create: `creating` now, `available` on the loop's next turn."""
        quota_error = self.volume_quota_error(size)
        if quota_error is not None:
            raise quota_error
        moment = now()
        volume = Volume(
            id=str(uuid.uuid4()),
            name=name,
            size=size,
            volume_type=volume_type or seed.DEFAULT_VOLUME_TYPE,
            created_at=moment,
            updated_at=moment,
            description=description,
            image_id=image_id,
            bootable=image_id is not None,
            metadata=metadata or {},
        )
        self.volumes[volume.id] = volume
        self.used.update(volumes=1, gigabytes=size)
        self.counters["volumes_created"] += 1
        self.world.stats.incr("openstack_volumes_created")
        self.world.call_later(0, self._volume_ready, volume.id)
        return volume

    def _volume_ready(self, volume_id: str) -> None:
        volume = self.volumes.get(volume_id)
        if volume is not None and volume.status == "creating":
            volume.status, volume.updated_at = "available", now()

    def delete_volume(self, volume_id: str) -> None:
        volume = self.volumes.get(volume_id)
        if volume is None:
            raise ApiError(404, f"Volume {volume_id} could not be found.")
        if (
            volume.status not in ("available", "error", "error_restoring", "error_extending", "error_managing")
            or volume.server_id is not None
        ):
            raise ApiError(
                400,
                "Invalid volume: Volume status must be available or error or error_restoring or "
                "error_extending or error_managing and must not be migrating, attached, belong to a group, "
                "have snapshots, awaiting a transfer, or be disassociated from snapshots after volume "
                "transfer.",
            )
        volume.status, volume.updated_at = "deleting", now()
        self.world.call_later(0, self._drop_volume, volume)

    def _drop_volume(self, volume: Volume) -> None:
        if self.volumes.pop(volume.id, None) is None:
            return
        self.used.subtract({"volumes": 1, "gigabytes": volume.size})
        self.counters["volumes_deleted"] += 1
        self.world.stats.incr("openstack_volumes_deleted")

    # -- keypairs and server groups ------------------------------------------------------------

    def add_keypair(self, keypair: Keypair) -> None:
        if keypair.name in self.keypairs:
            raise ApiError(409, f"Key pair '{keypair.name}' already exists.")
        self.keypairs[keypair.name] = keypair

    def add_server_group(self, name: str, policy: str, rules: dict[str, Any]) -> ServerGroup:
        group = ServerGroup(id=str(uuid.uuid4()), name=name, policy=policy, rules=rules)
        self.server_groups[group.id] = group
        return group


def detach(volume: Volume) -> None:
    volume.status, volume.server_id, volume.device = "available", None, None
    volume.attachment_id, volume.attached_at, volume.updated_at = None, None, now()


def decode_user_data(text: str | None) -> bytes | None:
    """What the guest's metadata service hands it: the posted base64, decoded."""
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def hostname_for(name: str) -> str:
    """Nova's sanitised hostname: lower case, dashes for anything not alphanumeric, at most 63 chars."""
    cleaned = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name.lower().replace("_", "-"))
    return cleaned.strip("-.")[:63] or "server"


def new_token() -> str:
    """Fernet tokens start with `gAAAAA`; some tools sniff for it, so ours do too."""
    return "gAAAAA" + secrets.token_urlsafe(96)
