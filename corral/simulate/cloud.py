"""A cloud for `corral simulate`: corral's `CloudProvider`, answered from the simulated world in process.

Every call succeeds at once (the boot itself takes the world's boot time): the simulation asks what a
configuration does to waits and runner-hours, not how corral weathers a failing cloud (the sandbox and the
chaos tests do that). Quota is unlimited unless `instances` is given, so a config's `max_runners` is what
bounds it, as on a cloud sized for it.
"""

from __future__ import annotations

import dataclasses
import itertools

from corral.cloud.provider import (
    META_POOL,
    CacheVolumeSpec,
    CloudQuotaExceeded,
    CloudRequestRejected,
    CloudServer,
    CloudVolume,
    ServerSpec,
)
from corral.cloud.quota import Headroom, ServerCost
from corral.simulate.world import World

IMAGE_ID = "simulated-image"
"""Every server's image: a trace replays one image, so no rollout starts."""


class SimulatedCloud:
    """One of corral's clouds, in the world."""

    def __init__(self, world: World, name: str, installation: str, instances: int | None = None) -> None:
        self.world = world
        self.name = name
        self.installation = installation
        self.instances = instances
        """The project's instance quota (None: unlimited)."""
        self.volumes: dict[str, CloudVolume] = {}
        """The pools' cache volumes: made available at once, attached while a server holds one."""
        self._volume_ids = itertools.count(1)
        self._used: set[str] = set()
        """Cache volumes a server has had: the next one to get one starts warm."""

    def list_servers(self) -> list[CloudServer]:
        return self.world.list_servers(self.name)

    def create_server(self, spec: ServerSpec) -> CloudServer:
        if self.instances is not None and len(self.world.list_servers(self.name)) >= self.instances:
            raise CloudQuotaExceeded(f"Quota exceeded for instances: Requested 1, but already used {self.instances}")
        cache = self.volumes.get(spec.cache_volume or "")
        if spec.cache_volume and (cache is None or cache.status != "available"):
            raise CloudRequestRejected(f"Invalid volume: volume '{spec.cache_volume}' status must be 'available'")
        server = self.world.create_server(
            self.name, self.installation, spec.name, spec.metadata, spec.user_data, IMAGE_ID
        )
        if cache is not None:
            self.volumes[cache.id] = dataclasses.replace(cache, status="in-use", attached_to=(server.id,))
            server.cache = "warm" if cache.id in self._used else "cold"
            self._used.add(cache.id)
        return server.view()

    def delete_server(self, server_id: str) -> None:
        self.world.delete_server(server_id)
        for volume in list(self.volumes.values()):
            if server_id in volume.attached_to:
                self.volumes[volume.id] = dataclasses.replace(volume, status="available", attached_to=())

    def list_cache_volumes(self) -> list[CloudVolume]:
        return list(self.volumes.values())

    def create_cache_volume(self, spec: CacheVolumeSpec) -> CloudVolume:
        volume = CloudVolume(
            id=f"sim-volume-{next(self._volume_ids):08d}",
            name=spec.name,
            status="available",
            size_gb=spec.size_gb,
            installation=self.installation,
            pool=spec.metadata.get(META_POOL, ""),
        )
        self.volumes[volume.id] = volume
        return volume

    def volume(self, volume_id: str) -> CloudVolume | None:
        return self.volumes.get(volume_id)

    def delete_volume(self, volume_id: str) -> None:
        self.volumes.pop(volume_id, None)

    def detach_volume(self, volume_id: str, attachment_id: str) -> None:
        """Never needed: the simulated cloud detaches a volume with its server."""

    def check_pool(self, spec: ServerSpec) -> list[str]:
        return []

    def headroom(self, volumes: bool) -> Headroom:
        if self.instances is None:
            return Headroom()
        return Headroom(instances=max(self.instances - len(self.world.list_servers(self.name)), 0))

    def image_id(self, spec: ServerSpec) -> str:
        return IMAGE_ID

    def server_cost(self, spec: ServerSpec) -> ServerCost:
        return ServerCost(cores=1, ram_mb=1024)

    def close(self) -> None:
        """Nothing to close: the world lives as long as the simulation."""
