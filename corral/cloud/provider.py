"""What the engine needs from a cloud, independent of OpenStack's vocabulary.

The engine sees owned servers (identified by metadata, never by name), asks for servers to be created
from a `ServerSpec` and deleted by id, and learns about failures through three exception kinds that map to
three different reactions: wait (quota), retry later (transient), or mark the runner failed (rejected).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from corral.cloud.quota import Headroom, ServerCost
from corral.config import DEFAULT_CLOUD as DEFAULT_CLOUD  # the config names it; servers and specs default to it
from corral.images import ImageRef


class VolumeSpec(Protocol):
    """A blank volume attached to a server and deleted with it (a pool's `extra_volumes` entry)."""

    @property
    def name(self) -> str: ...

    @property
    def size_gb(self) -> int: ...

    @property
    def type(self) -> str | None: ...


META_INSTALLATION = "corral-installation"
META_POOL = "corral-pool"
META_RUNNER = "corral-runner"
META_CACHE = "corral-cache"
"""On a cache volume (besides the installation and the pool): the pool's cache it belongs to, always `1`."""


class CloudError(Exception):
    """A cloud call failed. Messages name the operation and the cloud's reason, never user data."""


class CloudQuotaExceeded(CloudError):
    """The project is out of quota: the pool waits and says so, rather than retrying in a storm."""


class CloudTransientError(CloudError):
    """A timeout, a dropped connection or a 5xx: worth retrying with backoff."""


class CloudRequestRejected(CloudError):
    """The cloud refused the request as made (bad flavor, unknown image...): retrying will not help."""


class CloudResourceMissing(CloudRequestRejected):
    """A name the pool uses (image, flavor, network...) does not exist: a definite answer, unlike an error."""


class CloudNameAmbiguous(CloudRequestRejected):
    """A name the pool uses matches several resources (two networks of one name, which an admin sees across
    projects): a definite answer too, which the pool's id for it fixes."""


@dataclass(frozen=True)
class ServerSpec:
    """Everything a pool declares about its servers, resolved for one runner."""

    name: str
    image: ImageRef
    """A name or id, or a filter for the newest matching image."""
    flavor: str
    networks: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    key_name: str | None = None
    availability_zone: str | None = None
    config_drive: bool = False
    boot_volume_gb: int | None = None
    boot_volume_type: str | None = None
    volumes: tuple[VolumeSpec, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    user_data: str = field(default="", repr=False)
    """Contains the JIT config: excluded from repr so it cannot reach a log line by accident."""
    cloud: str = DEFAULT_CLOUD
    """Which of corral's clouds it is made in (`CloudSet` routes the create; a provider is one cloud)."""
    cache_volume: str | None = None
    """The id of one of the pool's cache volumes to attach, kept when the server is deleted (None: none)."""


@dataclass(frozen=True)
class CloudServer:
    """A server corral owns, as the cloud reports it."""

    id: str
    name: str
    status: str
    installation: str
    pool: str
    runner_id: str
    created_at: datetime | None = None
    fault: str | None = None
    image_id: str | None = None
    """The image it was created from (None when the cloud does not say: a server booted from a volume)."""
    cloud: str = DEFAULT_CLOUD
    """Which of corral's clouds it is in (set by `CloudSet`)."""

    @property
    def is_error(self) -> bool:
        return self.status == "ERROR"

    @property
    def is_stopped(self) -> bool:
        """The guest shut down: for an ephemeral runner, its job is over."""
        return self.status in ("SHUTOFF", "STOPPED", "DELETED", "SOFT_DELETED")


@dataclass(frozen=True)
class CacheVolumeSpec:
    """A new cache volume of a pool: Cinder's create request (the metadata marks it corral's and the pool's)."""

    name: str
    size_gb: int
    metadata: dict[str, str]
    type: str | None = None
    availability_zone: str | None = None
    cloud: str = DEFAULT_CLOUD


@dataclass(frozen=True)
class CloudVolume:
    """A cache volume as Cinder reports it."""

    id: str
    name: str
    status: str
    """Cinder's: `creating`, `available`, `reserved`, `attaching`, `in-use`, `detaching`, `deleting`, `error`..."""
    size_gb: int
    installation: str
    pool: str
    attached_to: tuple[str, ...] = ()
    """The servers it is attached to (at most one for a cache volume)..."""
    attachment_ids: tuple[str, ...] = ()
    """...and Cinder's ids of those attachments, in the same order."""
    cloud: str = DEFAULT_CLOUD

    @property
    def is_error(self) -> bool:
        return self.status.startswith("error")


class CloudProvider(Protocol):
    """Blocking calls; the engine runs them in worker threads with a per-cloud concurrency limit."""

    def list_servers(self) -> list[CloudServer]:
        """Every server owned by this installation, in as few calls as the API allows."""
        ...

    def create_server(self, spec: ServerSpec) -> CloudServer: ...

    def delete_server(self, server_id: str) -> None:
        """Delete a server and the volumes created with it; an already-gone server is not an error."""
        ...

    def check_pool(self, spec: ServerSpec) -> list[str]:
        """Problems that would make every create fail (unknown image, flavor, network): empty when fine.

        Only definite answers are problems; a check the cloud could not answer (a 5xx, a refused token, a
        dropped connection) raises `CloudError`, so the caller retries it instead of disabling the pool.
        """
        ...

    def headroom(self, volumes: bool) -> Headroom:
        """The project's quota less its usage: Nova's limits, Neutron's port quota, and Cinder's limits when
        `volumes` (three calls at most)."""
        ...

    def image_id(self, spec: ServerSpec) -> str:
        """The id of the image `spec` names, as last resolved: a check (`check_pool`) resolves it afresh, so a
        new upload matching a filter, or rebuilt under the same name, is picked up then."""
        ...

    def server_cost(self, spec: ServerSpec) -> ServerCost:
        """What one server of `spec` takes from the quota (its flavor's size, looked up once)."""
        ...

    def list_cache_volumes(self) -> list[CloudVolume]:
        """Every cache volume of this installation (the pools' `cache_volumes`)."""
        ...

    def create_cache_volume(self, spec: CacheVolumeSpec) -> CloudVolume:
        """Ask Cinder for a new blank volume; it is `creating` until `volume` says `available`."""
        ...

    def volume(self, volume_id: str) -> CloudVolume | None:
        """One volume as Cinder reports it now; None when it does not exist."""
        ...

    def delete_volume(self, volume_id: str) -> None:
        """Delete a volume that is not attached; an already-gone volume is not an error."""
        ...

    def detach_volume(self, volume_id: str, attachment_id: str) -> None:
        """Free a volume Cinder still shows attached to a server that is gone (Nova's detach never reached it)."""
        ...

    def close(self) -> None: ...
