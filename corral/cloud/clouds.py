"""corral's clouds by name: the projects, in one region or provider each, that it owns servers in.

Each is a `CloudProvider` (one openstacksdk connection); this routes a call to the cloud it concerns: a
create to its spec's cloud, a delete to the cloud its runner recorded, a listing to every cloud, each server
named by the cloud that listed it. Server ids are the clouds' own, so a server is only ever known together
with its cloud.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from corral.cloud.provider import (
    CacheVolumeSpec,
    CloudProvider,
    CloudRequestRejected,
    CloudServer,
    CloudVolume,
    ServerSpec,
)
from corral.cloud.quota import Headroom, ServerCost
from corral.config import CloudConfig

Connector = Callable[[CloudConfig], CloudProvider]
"""Connects to a cloud as its settings say (a `clouds.yaml` entry or the `OS_*` variables)."""


class CloudSet:
    def __init__(self, providers: Mapping[str, CloudProvider], connect: Connector | None = None) -> None:
        """`providers` in the config's order: the first is where pools without placements go. `connect` makes
        the provider of a cloud a reload adds (None: clouds cannot be added at run time)."""
        if not providers:
            raise ValueError("corral needs at least one cloud")
        self._providers = dict(providers)
        self._connect = connect
        self._named: dict[str, dict[str, tuple[CloudServer, CloudServer]]] = {}
        """Per cloud, by server id: the provider's last listed object and its copy named with the cloud."""

    @property
    def can_add(self) -> bool:
        return self._connect is not None

    def add(self, cloud: str, settings: CloudConfig) -> None:
        """Connect a cloud a reload added (a `CloudError` if it cannot be reached: the reload fails)."""
        if self._connect is None:
            raise CloudRequestRejected("this corral was given its clouds and cannot connect another")
        try:
            self._providers[cloud] = self._connect(settings)
        except Exception as exc:  # openstacksdk's config errors are not CloudErrors: say which cloud failed
            raise CloudRequestRejected(f"cloud {cloud}: {type(exc).__name__}: {exc}") from None

    def remove(self, cloud: str) -> None:
        """A cloud that left the config and has nothing of corral's left in it: no more calls to it."""
        provider = self._providers.pop(cloud, None)
        self._named.pop(cloud, None)
        if provider is not None:
            provider.close()

    @property
    def names(self) -> list[str]:
        return list(self._providers)

    def provider(self, cloud: str) -> CloudProvider:
        provider = self._providers.get(cloud)
        if provider is None:
            raise CloudRequestRejected(f"no cloud named {cloud!r} is configured (clouds: {self.names})")
        return provider

    def list_servers(self, cloud: str) -> list[CloudServer]:
        """Every server this installation owns in `cloud`, each named with it. A provider that keeps its
        servers between listings (`ServerListing`) hands back the same objects while they do not change: each
        keeps its named copy too (at 10,000 servers, copying them all was a tenth of a look's CPU)."""
        known = self._named.get(cloud, {})
        named: dict[str, tuple[CloudServer, CloudServer]] = {}
        for server in self.provider(cloud).list_servers():
            seen = known.get(server.id)
            named[server.id] = (
                seen if seen is not None and seen[0] is server else (server, dataclasses.replace(server, cloud=cloud))
            )
        self._named[cloud] = named
        return [copy for _, copy in named.values()]

    def create_server(self, spec: ServerSpec) -> CloudServer:
        return dataclasses.replace(self.provider(spec.cloud).create_server(spec), cloud=spec.cloud)

    def delete_server(self, server_id: str, cloud: str) -> None:
        self.provider(cloud).delete_server(server_id)

    def check_pool(self, spec: ServerSpec) -> list[str]:
        return self.provider(spec.cloud).check_pool(spec)

    def image_id(self, spec: ServerSpec) -> str:
        return self.provider(spec.cloud).image_id(spec)

    def server_cost(self, spec: ServerSpec) -> ServerCost:
        return self.provider(spec.cloud).server_cost(spec)

    def headroom(self, cloud: str, volumes: bool) -> Headroom:
        return self.provider(cloud).headroom(volumes)

    def list_cache_volumes(self, cloud: str) -> list[CloudVolume]:
        """Every cache volume of this installation in `cloud`, each named with it."""
        return [dataclasses.replace(volume, cloud=cloud) for volume in self.provider(cloud).list_cache_volumes()]

    def create_cache_volume(self, spec: CacheVolumeSpec) -> CloudVolume:
        return dataclasses.replace(self.provider(spec.cloud).create_cache_volume(spec), cloud=spec.cloud)

    def volume(self, volume_id: str, cloud: str) -> CloudVolume | None:
        found = self.provider(cloud).volume(volume_id)
        return dataclasses.replace(found, cloud=cloud) if found is not None else None

    def delete_volume(self, volume_id: str, cloud: str) -> None:
        self.provider(cloud).delete_volume(volume_id)

    def detach_volume(self, volume_id: str, attachment_id: str, cloud: str) -> None:
        self.provider(cloud).detach_volume(volume_id, attachment_id)

    def close(self) -> None:
        for provider in self._providers.values():
            provider.close()
