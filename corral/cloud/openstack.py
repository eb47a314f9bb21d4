"""The OpenStack provider: openstacksdk, one connection reused for every call.

Ownership is metadata on the server (and a tag, where the compute API has tags) naming the installation,
the pool and the runner; names are for humans. Listing owned servers is one paginated call per pass:
filtered by tag on the server side when Nova supports it (tags on create need 2.52), by metadata otherwise.
"""

from __future__ import annotations

import base64
import threading
from datetime import datetime
from typing import Any

import openstack
import openstack.connection
from keystoneauth1 import exceptions as ks_exceptions
from openstack import exceptions as os_exceptions
from openstack import utils as os_utils

from corral.cloud.provider import (
    META_INSTALLATION,
    META_POOL,
    META_RUNNER,
    CloudError,
    CloudQuotaExceeded,
    CloudRequestRejected,
    CloudServer,
    CloudTransientError,
    ServerSpec,
)
from corral.config import CloudConfig

TAGS_MICROVERSION = "2.52"
"""Tags on create need 2.52 (filtering by tag works from 2.26); below that, ownership is metadata only."""
VOLUME_TYPE_MICROVERSION = "2.67"


def connect(config: CloudConfig) -> openstack.connection.Connection:
    """A connection as openstacksdk resolves it: a `clouds.yaml` entry by name, or the `OS_*` variables."""
    return openstack.connect(cloud=config.name, region_name=config.region)


def ownership_tag(installation: str) -> str:
    return f"corral.{installation}"


def classify(operation: str, exc: Exception) -> CloudError:
    """Map an openstacksdk/keystoneauth failure to the reaction it deserves."""
    if isinstance(exc, os_exceptions.HttpException):
        status = exc.status_code or 0
        detail = (exc.details or exc.message or "").strip()
        message = f"{operation}: HTTP {status}: {detail}"[:500]
        if status in (403, 413) and "quota" in detail.lower():
            return CloudQuotaExceeded(message)
        if status >= 500 or status in (408, 429):
            return CloudTransientError(message)
        return CloudRequestRejected(message)
    if isinstance(exc, ks_exceptions.ConnectionError | ks_exceptions.ClientException | TimeoutError):
        return CloudTransientError(f"{operation}: {type(exc).__name__}")
    return CloudTransientError(f"{operation}: {type(exc).__name__}: {exc}"[:500])


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class OpenStackProvider:
    """`CloudProvider` on openstacksdk. Name lookups (image, flavor, network) are cached per name."""

    def __init__(self, connection: openstack.connection.Connection, installation: str) -> None:
        self.connection = connection
        self.installation = installation
        self._ids: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._tags: bool | None = None

    # -- lookups ----------------------------------------------------------------------------------

    def _supports(self, microversion: str) -> bool:
        return bool(os_utils.supports_microversion(self.connection.compute, microversion))

    @property
    def supports_tags(self) -> bool:
        if self._tags is None:
            self._tags = self._supports(TAGS_MICROVERSION)
        return self._tags

    def _lookup(self, kind: str, name: str) -> str:
        key = (kind, name)
        with self._lock:
            cached = self._ids.get(key)
        if cached is not None:
            return cached
        finders = {
            "image": self.connection.image.find_image,
            "flavor": self.connection.compute.find_flavor,
            "network": self.connection.network.find_network,
        }
        try:
            found = finders[kind](name, ignore_missing=True)
        except Exception as exc:
            raise classify(f"find {kind} {name!r}", exc) from None
        if found is None:
            raise CloudRequestRejected(f"{kind} {name!r} does not exist in this cloud")
        with self._lock:
            self._ids[key] = found.id
        return str(found.id)

    def check_pool(self, spec: ServerSpec) -> list[str]:
        """Resolve every name the pool uses, refreshing the cache; the problems found, or none."""
        with self._lock:
            self._ids.clear()
        problems: list[str] = []
        lookups = [("image", spec.image), ("flavor", spec.flavor)] + [("network", n) for n in spec.networks]
        for kind, name in lookups:
            try:
                self._lookup(kind, name)
            except CloudError as exc:
                problems.append(str(exc))
        for group in spec.security_groups:
            try:
                if self.connection.network.find_security_group(group, ignore_missing=True) is None:
                    problems.append(f"security group {group!r} does not exist in this cloud")
            except Exception as exc:
                problems.append(str(classify(f"find security group {group!r}", exc)))
        if spec.key_name:
            try:
                if self.connection.compute.find_keypair(spec.key_name, ignore_missing=True) is None:
                    problems.append(f"key pair {spec.key_name!r} does not exist in this cloud")
            except Exception as exc:
                problems.append(str(classify(f"find key pair {spec.key_name!r}", exc)))
        return problems

    # -- servers ----------------------------------------------------------------------------------

    def _owned(self, server: Any) -> CloudServer | None:
        metadata = server.metadata or {}
        if metadata.get(META_INSTALLATION) != self.installation or META_RUNNER not in metadata:
            return None
        fault = server.fault or None
        return CloudServer(
            id=server.id,
            name=server.name,
            status=server.status,
            installation=self.installation,
            pool=metadata.get(META_POOL, ""),
            runner_id=metadata[META_RUNNER],
            created_at=_parse_time(server.created_at),
            fault=(fault.get("message") if isinstance(fault, dict) else str(fault)) if fault else None,
        )

    def list_servers(self) -> list[CloudServer]:
        filters: dict[str, Any] = {}
        if self.supports_tags:
            filters["tags"] = ownership_tag(self.installation)
        try:
            servers = list(self.connection.compute.servers(details=True, **filters))
        except Exception as exc:
            raise classify("list servers", exc) from None
        return [owned for server in servers if (owned := self._owned(server)) is not None]

    def _block_devices(self, spec: ServerSpec, image_id: str) -> list[dict[str, Any]]:
        devices: list[dict[str, Any]] = []
        if spec.boot_volume_gb:
            boot: dict[str, Any] = {
                "boot_index": 0,
                "uuid": image_id,
                "source_type": "image",
                "destination_type": "volume",
                "volume_size": spec.boot_volume_gb,
                "delete_on_termination": True,
            }
            if spec.boot_volume_type:
                boot["volume_type"] = spec.boot_volume_type
            devices.append(boot)
        for volume in spec.volumes:
            extra: dict[str, Any] = {
                "boot_index": -1,
                "source_type": "blank",
                "destination_type": "volume",
                "volume_size": volume.size_gb,
                "delete_on_termination": True,
                "tag": volume.name,
            }
            if volume.type:
                extra["volume_type"] = volume.type
            devices.append(extra)
        return devices

    def create_server(self, spec: ServerSpec) -> CloudServer:
        image_id = self._lookup("image", spec.image)
        flavor_id = self._lookup("flavor", spec.flavor)
        networks: Any = [{"uuid": self._lookup("network", name)} for name in spec.networks] or "auto"
        attrs: dict[str, Any] = {
            "name": spec.name,
            "flavor_id": flavor_id,
            "networks": networks,
            "metadata": spec.metadata,
            "user_data": base64.b64encode(spec.user_data.encode()).decode(),
            "config_drive": spec.config_drive,
        }
        if not spec.boot_volume_gb:
            attrs["image_id"] = image_id
        devices = self._block_devices(spec, image_id)
        if devices:
            attrs["block_device_mapping"] = devices
        if spec.security_groups:
            attrs["security_groups"] = [{"name": group} for group in spec.security_groups]
        if spec.key_name:
            attrs["key_name"] = spec.key_name
        if spec.availability_zone:
            attrs["availability_zone"] = spec.availability_zone
        if self.supports_tags:
            attrs["tags"] = [ownership_tag(self.installation)]
        try:
            server = self.connection.compute.create_server(**attrs)
        except Exception as exc:
            raise classify(f"create server {spec.name}", exc) from None
        return CloudServer(
            id=server.id,
            name=spec.name,
            status=server.status or "BUILD",
            installation=self.installation,
            pool=spec.metadata.get(META_POOL, ""),
            runner_id=spec.metadata.get(META_RUNNER, ""),
        )

    def delete_server(self, server_id: str) -> None:
        try:
            self.connection.compute.delete_server(server_id, ignore_missing=True)
        except Exception as exc:
            raise classify(f"delete server {server_id}", exc) from None

    def close(self) -> None:
        self.connection.close()
