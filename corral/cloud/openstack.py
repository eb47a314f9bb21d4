"""The OpenStack provider: openstacksdk, one connection reused for every call.

Ownership is metadata on the server (and a tag, where the compute API has tags) naming the installation,
the pool and the runner; names are for humans. Listing owned servers is one paginated call per pass:
filtered by tag on the server side when Nova supports it (tags on create need 2.52), by metadata otherwise.

Idempotent calls (reads and deletes) are retried a couple of times when the connection drops or the API
answers 502/503/504, because a load balancer closing a pooled keep-alive connection is routine and should
not fail a whole reconcile pass. Creates are never retried blindly: a create whose answer was lost may have
made a server, and the engine's intent-first bookkeeping, not a second POST, is what settles that.
Those retries are corral's alone, bounded in number and in time (`call_retries`, `call_retry_time` of each
cloud): openstacksdk's own (5 for every Glance call, with pauses doubling from half a second) are turned off,
as on top of corral's they held a worker thread about 48 s for one Glance 503.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import openstack
import openstack.connection
import orjson
from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import session as ks_session
from openstack import exceptions as os_exceptions
from openstack import utils as os_utils
from openstack.compute.v2.server import Server

from corral.cloud.environment_once import read_environment_once
from corral.cloud.images import find_image
from corral.cloud.provider import (
    META_CACHE,
    META_INSTALLATION,
    META_POOL,
    META_RUNNER,
    CacheVolumeSpec,
    CloudError,
    CloudNameAmbiguous,
    CloudQuotaExceeded,
    CloudRequestRejected,
    CloudResourceMissing,
    CloudServer,
    CloudTransientError,
    CloudVolume,
    ServerSpec,
)
from corral.cloud.quota import Headroom, ServerCost, ports_per_server
from corral.cloud.raw_service import RawService
from corral.cloud.sdk_logs import keep_bodies_out_of_logs
from corral.cloud.server_listing import ServerListing, nova_time
from corral.images import ImageRef, not_found
from corral.images import describe as describe_image
from corral.metrics import SERVER_LISTINGS, SERVERS_LISTED

logger = logging.getLogger(__name__)

T = TypeVar("T")

TAGS_MICROVERSION = "2.52"
"""Tags on create need 2.52 (filtering by tag works from 2.26); below that, ownership is metadata only."""
VOLUME_TYPE_MICROVERSION = "2.67"
"""`volume_type` in a block device mapping needs 2.67; older clouds refuse the whole create."""
DEFAULT_TIMEOUT_S = 60.0
"""keystoneauth waits for ever by default: one hung API call would hold an engine worker thread for good."""
DEFAULT_RETRIES = 2
"""Retries of an idempotent call after a dropped connection or a 502/503/504 (`call_retries`)."""
DEFAULT_RETRY_TIME_S = 10.0
"""No retry of a call starts later than this after its first attempt did (`call_retry_time`)."""
RETRY_DELAY_FIRST_S = 0.2
RETRY_DELAY_FACTOR = 5.0
RETRY_DELAY_CAP_S = 5.0
"""Pauses before each retry: 0.2 s, 1 s, then 5 s; short, because the engine's next pass is the real retry
and a cloud that is down for longer should surface as `CloudTransientError` quickly."""
SDK_RETRY_KEYS = ("status_code_retries", "connect_retries")
"""openstacksdk's retry settings (`<service>_status_code_retries`... in clouds.yaml, or its own defaults)."""
RETRYABLE_STATUS = frozenset({502, 503, 504})
DEFAULT_CONNECTIONS = 32


class CloudSettings(Protocol):
    """Which cloud to connect to: a `clouds.yaml` entry (or the `OS_*` variables when `name` is None)."""

    @property
    def name(self) -> str | None: ...

    @property
    def region(self) -> str | None: ...


def connect(config: CloudSettings) -> openstack.connection.Connection:
    """A connection as openstacksdk resolves it: a `clouds.yaml` entry by name, or the `OS_*` variables."""
    return openstack.connect(cloud=config.name, region_name=config.region)


def ownership_tag(installation: str) -> str:
    return f"corral.{installation}"


def _is_quota(status: int, detail: str) -> bool:
    """Nova says "Quota exceeded for instances: ..." for its own quotas but "Maximum number of ports exceeded"
    when Neutron's port quota is what ran out; both mean "wait", unlike "Maximum number of metadata items
    exceeds 128", which no amount of waiting fixes."""
    text = detail.lower()
    return status in (403, 413) and ("quota" in text or ("maximum number of" in text and "exceeded" in text))


def _from_status(operation: str, status: int, detail: str) -> CloudError:
    message = f"{operation}: HTTP {status}: {detail}"[:500]
    if _is_quota(status, detail):
        return CloudQuotaExceeded(message)
    if status >= 500 or status in (408, 429):
        return CloudTransientError(message)
    return CloudRequestRejected(message)


def classify(operation: str, exc: Exception) -> CloudError:
    """Map an openstacksdk/keystoneauth failure to the reaction it deserves."""
    if isinstance(exc, os_exceptions.HttpException):
        return _from_status(operation, exc.status_code or 0, (exc.details or exc.message or "").strip())
    if isinstance(exc, os_exceptions.DuplicateResource):
        return CloudNameAmbiguous(f"{operation}: {exc.message}; use a unique name or the id"[:500])
    if isinstance(exc, ks_exceptions.HttpError):
        # Raised by keystoneauth itself, e.g. a 401 from Keystone when the credentials are wrong.
        return _from_status(operation, exc.http_status or 0, (exc.message or "").strip())
    if isinstance(exc, ks_exceptions.ConnectionError | ks_exceptions.ClientException | TimeoutError):
        return CloudTransientError(f"{operation}: {type(exc).__name__}")
    return CloudTransientError(f"{operation}: {type(exc).__name__}: {exc}"[:500])


def _retryable(exc: Exception) -> bool:
    """A dropped connection or a gateway/overload answer. Not a timeout: repeating a call that already
    waited the whole timeout would multiply the stall it causes."""
    if isinstance(exc, ks_exceptions.ConnectFailure):
        return True
    return isinstance(exc, os_exceptions.HttpException) and (exc.status_code or 0) in RETRYABLE_STATUS


def retry_delay_s(attempt: int) -> float:
    """The pause before retry number `attempt` (0 for the first)."""
    return float(min(RETRY_DELAY_FIRST_S * RETRY_DELAY_FACTOR**attempt, RETRY_DELAY_CAP_S))


def turn_off_sdk_retries(connection: openstack.connection.Connection) -> None:
    """Make every API call of the connection one HTTP request: corral retries the calls that are safe to
    repeat itself, within bounds it sets (`OpenStackProvider._idempotent`). keystoneauth's own retries would
    come on top (each of corral's attempts retried 5 times for Glance, the pauses doubling from 0.5 s, or as
    long as a `Retry-After` says), unbounded in time, whatever clouds.yaml or openstacksdk's defaults set."""
    config = connection.config.config
    for key in [key for key in config if key.endswith(SDK_RETRY_KEYS)]:
        config[key] = 0
    for key in SDK_RETRY_KEYS:
        config[key] = 0
    # Service proxies made before this (an adapter each) keep the settings they were made with.
    for proxy in getattr(connection, "_proxies", {}).values():
        for key in SDK_RETRY_KEYS:
            if hasattr(proxy, key):
                setattr(proxy, key, 0)


def every_page(
    service: Any, path: str, key: str, params: dict[str, Any], microversion: str | None = None
) -> list[dict[str, Any]]:
    """`GET path` on an openstacksdk service proxy, every page (Nova's and Cinder's `marker` paging, to the
    last page a `<key>_links` `next` points past), as plain JSON.

    Measured: building openstacksdk `Server` resources costs ~5 ms of CPU per server (30 servers: 130 ms
    against 11 ms for the HTTP round trip of 1,000), which would make a pass over 5,000 runners spend 25 s in
    object construction. The request still goes through openstacksdk's authenticated adapter.
    """
    found: list[dict[str, Any]] = []
    query = dict(params)
    while True:
        response = service.get(path, params=query, microversion=microversion, raise_exc=False)
        os_exceptions.raise_from_response(response)
        body = orjson.loads(response.content)  # 1,000 servers: 5.0 ms, json's 7.3 ms
        page = body.get(key, [])
        found.extend(page)
        links = body.get(f"{key}_links") or []
        if not page or not any(link.get("rel") == "next" for link in links):
            return found
        query = {**params, "marker": page[-1]["id"]}


def _show(service: Any, path: str) -> Any:
    """`GET path` on an openstacksdk service proxy: the answer, or None when the resource is gone (404)."""
    response = service.get(path, raise_exc=False)
    if response.status_code == 404:
        return None
    os_exceptions.raise_from_response(response)
    return response


def _delete(service: Any, path: str) -> None:
    """`DELETE path` on an openstacksdk service proxy; a resource already gone (404) is not an error."""
    response = service.delete(path, raise_exc=False)
    if response.status_code != 404:
        os_exceptions.raise_from_response(response)


@dataclass(frozen=True)
class _Resolved:
    """The ids a spec's names resolved to, and which of them came from the cache (and may be stale)."""

    image: str
    flavor: str
    networks: tuple[str, ...]
    cached: dict[tuple[str, ImageRef], str]


class OpenStackProvider:
    """`CloudProvider` on openstacksdk. Name lookups (image, flavor, network) are cached per name.

    A cached id goes stale when an image is rebuilt under the same name and the old one deleted; when Nova
    refuses a create made with cached ids, the provider resolves the names again and, if any now means
    another resource, retries once with the new ids, so an image rotation costs no failed runner.
    """

    def __init__(
        self,
        connection: openstack.connection.Connection,
        installation: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connections: int = DEFAULT_CONNECTIONS,
        retries: int = DEFAULT_RETRIES,
        retry_time_s: float = DEFAULT_RETRY_TIME_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`connections`: HTTP connections kept open per API endpoint; as many as calls run at once (the
        engine's create and cloud threads), or each call beyond them opens and closes a connection.
        `retries`, `retry_time_s`: how often, and until how long after its first attempt, an idempotent call
        is tried again; `sleep` and `clock` pace those retries (a test's own make them instant)."""
        self.connection = connection
        self.installation = installation
        self._retries = retries
        self._retry_time_s = retry_time_s
        self._sleep = sleep
        self._clock = clock
        keep_bodies_out_of_logs(connection)
        turn_off_sdk_retries(connection)
        if connection.session.timeout is None:
            connection.session.timeout = timeout_s
        adapter = ks_session.TCPKeepAliveAdapter(pool_maxsize=connections)
        for scheme in ("https://", "http://"):
            connection.session.session.mount(scheme, adapter)
        read_environment_once(connection.session.session)
        self._ids: dict[tuple[str, ImageRef], str] = {}
        self.listing = ServerListing(clock=clock)
        """The installation's servers as of the last listing: the next lists only what changed since."""
        self._flavor_sizes: dict[str, tuple[int, int]] = {}
        """Flavor name -> (vCPUs, RAM MiB), found with its id."""
        self._port_quota_unreadable = False
        self._lock = threading.Lock()
        self._tags: bool | None = None
        self._microversion: str | None = None
        self._raw: dict[str, RawService] = {}

    # -- plumbing ---------------------------------------------------------------------------------

    def _idempotent(self, operation: str, call: Callable[[], T]) -> T:
        """Run a call that is safe to repeat, retrying dropped connections and 502/503/504 briefly: at most
        `retries` times, and none that would start after `retry_time_s` from the first attempt."""
        deadline = self._clock() + self._retry_time_s
        attempt = 0
        while True:
            try:
                return call()
            except Exception as exc:
                pause = retry_delay_s(attempt)
                if attempt >= self._retries or not _retryable(exc) or self._clock() + pause > deadline:
                    raise classify(operation, exc) from None
                logger.info("%s: %s; retrying in %.1fs", operation, type(exc).__name__, pause)
                self._sleep(pause)
                attempt += 1

    def _compute_supports(self, microversion: str) -> bool:
        """Whether the compute API speaks `microversion`.

        keystoneauth answers a failed version discovery with endpoint data that has no microversions, which
        reads as "not supported". Cached for the process's life, that guess would make every server untagged,
        and a later, tag-filtered listing would never see them: so an unknown answer raises instead.
        """
        # The first use of the proxy authenticates and discovers versions: a Keystone that fails then must
        # surface as a cloud error like any other call's, not as keystoneauth's own exception.
        compute = self._idempotent("connect to the compute API", lambda: self.connection.compute)
        data = self._idempotent("discover the compute API", compute.get_endpoint_data)
        if data is None or data.max_microversion is None:
            raise CloudTransientError("discover the compute API: no version information (is Nova reachable?)")
        return bool(os_utils.supports_microversion(compute, microversion))

    @property
    def supports_tags(self) -> bool:
        if self._tags is None:
            self._tags = self._compute_supports(TAGS_MICROVERSION)
        return self._tags

    # -- lookups ----------------------------------------------------------------------------------

    def _lookup(self, kind: str, name: ImageRef) -> str:
        """The id `name` means (an image may be a filter), from the cache or asked once and cached."""
        key = (kind, name)
        with self._lock:
            cached = self._ids.get(key)
        if cached is not None:
            return cached
        finders: dict[str, Callable[[Any], Any]] = {
            "image": lambda ref: find_image(self.connection, ref),
            "flavor": lambda n: self.connection.compute.find_flavor(n, ignore_missing=True),
            "network": lambda n: self.connection.network.find_network(n, ignore_missing=True),
        }
        what = describe_image(name) if kind == "image" else f"{kind} {name!r}"
        found = self._idempotent(f"find {what}", lambda: finders[kind](name))
        if found is None:
            raise CloudResourceMissing(not_found(name) if kind == "image" else f"{what} does not exist in this cloud")
        with self._lock:
            self._ids[key] = found.id
            if kind == "flavor":
                self._flavor_sizes[str(name)] = (int(found.vcpus or 0), int(found.ram or 0))
        return str(found.id)

    def image_id(self, spec: ServerSpec) -> str:
        """The id of the image `spec` names as last resolved (a check refreshes it)."""
        return self._lookup("image", spec.image)

    def server_cost(self, spec: ServerSpec) -> ServerCost:
        with self._lock:
            size = self._flavor_sizes.get(spec.flavor)
        if size is None:  # never looked up: the lookup notes the size with the id
            self._lookup("flavor", spec.flavor)
            with self._lock:
                size = self._flavor_sizes[spec.flavor]
        disks = [volume.size_gb for volume in spec.volumes] + ([spec.boot_volume_gb] if spec.boot_volume_gb else [])
        return ServerCost(
            cores=size[0],
            ram_mb=size[1],
            volumes=len(disks),
            gigabytes=sum(disks),
            ports=ports_per_server(spec.networks),
        )

    def headroom(self, volumes: bool) -> Headroom:
        def absolute(service: Any) -> dict[str, Any]:
            response = service.get("/limits", raise_exc=False)
            os_exceptions.raise_from_response(response)
            limits: dict[str, Any] = response.json()["limits"]["absolute"]
            return limits

        compute = self._idempotent("read compute limits", lambda: absolute(self._service("compute")))
        volume = None
        if volumes:
            volume = self._idempotent("read volume limits", lambda: absolute(self._service("block_storage")))
        return Headroom.of(compute, volume, self._port_quota())

    def _port_quota(self) -> dict[str, Any] | None:
        """Neutron's port quota details; None when Neutron refuses them (a policy that hides the project's
        quota from its members, a Neutron without `quota_details`): ports then hold nothing back, and a
        refusal still backs the pool off. Logged once per provider, as it will not change by itself. A
        transient failure fails the reading, like the other services' (the look goes on without it)."""
        project = self._idempotent("read port quota", lambda: self.connection.current_project_id)
        if project is None:
            self._ports_unreadable("the credentials name no project")
            return None
        try:
            quota = self._idempotent(
                "read port quota", lambda: self.connection.network.get_quota(project, details=True)
            )
        except CloudTransientError:
            raise
        except CloudError as exc:
            self._ports_unreadable(str(exc))
            return None
        ports: dict[str, Any] = quota.ports or {}
        return ports

    def _ports_unreadable(self, why: str) -> None:
        """Said once per provider: a refusal of the quota will not change by itself."""
        if not self._port_quota_unreadable:
            self._port_quota_unreadable = True
            logger.warning("cannot read the project's port quota, so ports are not planned for: %s", why)

    def _resolve(self, spec: ServerSpec) -> _Resolved:
        keys: list[tuple[str, ImageRef]] = [("image", spec.image), ("flavor", spec.flavor)]
        keys += [("network", n) for n in spec.networks]
        with self._lock:
            cached = {key: self._ids[key] for key in keys if key in self._ids}
        return _Resolved(
            image=self._lookup("image", spec.image),
            flavor=self._lookup("flavor", spec.flavor),
            networks=tuple(self._lookup("network", name) for name in spec.networks),
            cached=cached,
        )

    def _forget(self, keys: Iterable[tuple[str, ImageRef]]) -> None:
        with self._lock:
            for key in keys:
                self._ids.pop(key, None)

    def _missing(self, kind: str, name: str, finder: tuple[str, str]) -> str | None:
        """A problem line when `<service proxy>.<find method>(name)` finds nothing, else None; errors raise."""
        service, method = finder

        def find() -> Any:
            return getattr(getattr(self.connection, service), method)(name, ignore_missing=True)

        try:
            found = self._idempotent(f"find {kind} {name!r}", find)
        except CloudNameAmbiguous as exc:
            return str(exc)
        return f"{kind} {name!r} does not exist in this cloud" if found is None else None

    def check_pool(self, spec: ServerSpec) -> list[str]:
        """Resolve every name the pool uses, refreshing the cache; the problems found, or none.

        A lookup that fails (rather than finding nothing) raises: that says nothing about the pool.
        """
        with self._lock:
            self._ids.clear()
        problems: list[str] = []
        lookups: list[tuple[str, ImageRef]] = [("image", spec.image), ("flavor", spec.flavor)]
        lookups += [("network", n) for n in spec.networks]
        for kind, name in lookups:
            try:
                self._lookup(kind, name)
            except (CloudResourceMissing, CloudNameAmbiguous) as exc:
                problems.append(str(exc))
        checks = [("security group", group, ("network", "find_security_group")) for group in spec.security_groups]
        if spec.key_name:
            checks.append(("key pair", spec.key_name, ("compute", "find_keypair")))
        volume_types = sorted({t for t in [spec.boot_volume_type, *(v.type for v in spec.volumes)] if t})
        checks.extend(("volume type", volume_type, ("block_storage", "find_type")) for volume_type in volume_types)
        problems.extend(problem for kind, name, finder in checks if (problem := self._missing(kind, name, finder)))
        if spec.availability_zone:
            problems.extend(self._check_zone(spec.availability_zone))
        if volume_types and not self._compute_supports(VOLUME_TYPE_MICROVERSION):
            problems.append(
                f"volume types need compute API {VOLUME_TYPE_MICROVERSION}, which this cloud lacks; "
                "remove boot_volume_type and the volumes' type"
            )
        return problems

    def _check_zone(self, zone: str) -> list[str]:
        zones = self._idempotent(
            "list availability zones", lambda: [z.name for z in self.connection.compute.availability_zones()]
        )
        if zone in zones:
            return []
        return [f"availability zone {zone!r} does not exist in this cloud; it has {sorted(zones)}"]

    # -- servers ----------------------------------------------------------------------------------

    def _owned(self, server: dict[str, Any]) -> CloudServer | None:
        metadata = server.get("metadata") or {}
        if metadata.get(META_INSTALLATION) != self.installation or META_RUNNER not in metadata:
            return None
        fault = server.get("fault") or None
        image = server.get("image")  # "" for a server booted from a volume
        return CloudServer(
            id=server["id"],
            name=server.get("name", ""),
            status=server.get("status", ""),
            installation=self.installation,
            pool=metadata.get(META_POOL, ""),
            runner_id=metadata[META_RUNNER],
            created_at=nova_time(server.get("created")),
            fault=(fault.get("message") if isinstance(fault, dict) else str(fault)) if fault else None,
            image_id=image.get("id") if isinstance(image, dict) else None,
        )

    def list_servers(self) -> list[CloudServer]:
        """Every server of this installation: in full now and then, otherwise only those Nova says changed
        since the last listing (`corral.cloud.server_listing`)."""
        since = self.listing.changes_since()
        if since is not None:
            try:
                changed = self._list("list servers changed lately", {"changes-since": since}, None)
            except CloudRequestRejected as refused:
                # A cloud that refuses `changes-since` (a proxy in front of Nova, an old release): full
                # listings from now on, as before, said once.
                self.listing.incremental = False
                logger.warning("the cloud refused changes-since (%s): listing every server on every look", refused)
            else:
                self._count_listing("changes", len(changed))
                for server_id in self.listing.unmentioned(changed):
                    if not self._exists(server_id):
                        self.listing.forget(server_id)
                return self.listing.apply_changes(changed, self._owned)
        params: dict[str, Any] = {}
        microversion = None
        if self.supports_tags:
            params["tags"] = ownership_tag(self.installation)
            microversion = TAGS_MICROVERSION
        servers = self._list("list servers", params, microversion)
        self._count_listing("full", len(servers))
        return self.listing.replace_all(servers, self._owned)

    def _list(self, operation: str, params: dict[str, Any], microversion: str | None) -> list[dict[str, Any]]:
        # The proxy is read inside the call: its first use authenticates, and a failure then is a cloud error.
        return self._idempotent(
            operation, lambda: every_page(self._service("compute"), "/servers/detail", "servers", params, microversion)
        )

    @staticmethod
    def _count_listing(kind: str, servers: int) -> None:
        SERVER_LISTINGS.labels(kind).inc()
        SERVERS_LISTED.labels(kind).inc(servers)

    def _block_devices(self, spec: ServerSpec, image_id: str) -> list[dict[str, Any]]:
        """The pool's disks as Nova's block device mappings, the boot device at index 0.

        Mappings replace the image's implicit root disk, and Nova refuses mappings without a boot device
        ("Boot sequence ... is not valid"): a pool with extra volumes but no boot volume maps the image's
        own local disk first. Nova accepts that mapping only next to `imageRef` naming the same image.
        """
        devices: list[dict[str, Any]] = []
        if not spec.boot_volume_gb and (spec.volumes or spec.cache_volume):
            devices.append(
                {
                    "boot_index": 0,
                    "uuid": image_id,
                    "source_type": "image",
                    "destination_type": "local",
                    "delete_on_termination": True,
                }
            )
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
        if spec.cache_volume:
            # An existing volume, kept when the server goes (`delete_on_termination` false): the pool's cache.
            devices.append(
                {
                    "boot_index": -1,
                    "uuid": spec.cache_volume,
                    "source_type": "volume",
                    "destination_type": "volume",
                    "delete_on_termination": False,
                }
            )
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

    def _body(self, spec: ServerSpec, ids: _Resolved) -> dict[str, Any]:
        """The `server` of Nova's create request, as openstacksdk's `create_server` would send it."""
        body: dict[str, Any] = {
            "name": spec.name,
            "flavorRef": ids.flavor,
            "networks": [{"uuid": network} for network in ids.networks] or "auto",
            "metadata": spec.metadata,
            "user_data": base64.b64encode(spec.user_data.encode()).decode(),
            "config_drive": spec.config_drive,
        }
        if not spec.boot_volume_gb:
            body["imageRef"] = ids.image  # also with a local image mapping, which Nova requires it for
        devices = self._block_devices(spec, ids.image)
        if devices:
            body["block_device_mapping_v2"] = devices
        if spec.security_groups:
            body["security_groups"] = [{"name": group} for group in spec.security_groups]
        if spec.key_name:
            body["key_name"] = spec.key_name
        if spec.availability_zone:
            body["availability_zone"] = spec.availability_zone
        if self.supports_tags:
            body["tags"] = [ownership_tag(self.installation)]
        return body

    def _post(self, spec: ServerSpec, ids: _Resolved) -> CloudServer:
        """`POST /servers` through openstacksdk's authenticated adapter, at the microversion it would pick.

        Measured: openstacksdk's `create_server` builds a `Server` resource from the request and again from
        the answer (~5 ms of CPU each), the largest part of a create's cost to corral; the answer carries
        only the new server's id, which is all corral needs.
        """
        compute = self._service("compute")
        try:
            response = compute.post(
                "/servers",
                json={"server": self._body(spec, ids)},
                microversion=self._create_microversion(),
                raise_exc=False,
            )
            os_exceptions.raise_from_response(response)
            server = response.json()["server"]
        except Exception as exc:
            raise classify(f"create server {spec.name}", exc) from None
        return CloudServer(
            id=server["id"],
            name=spec.name,
            status=server.get("status") or "BUILD",
            installation=self.installation,
            pool=spec.metadata.get(META_POOL, ""),
            runner_id=spec.metadata.get(META_RUNNER, ""),
            image_id=ids.image,
        )

    def create_request(self, spec: ServerSpec) -> tuple[dict[str, Any], str | None]:
        """The body and compute microversion of the `POST /servers` that `create_server(spec)` sends (names
        resolved through the cache, as it resolves them): for putting servers in place exactly as corral makes
        them without making each through the API (a far end seeded with a thousand runners at once)."""
        return {"server": self._body(spec, self._resolve(spec))}, self._create_microversion()

    def _create_microversion(self) -> str | None:
        """The compute microversion openstacksdk's `Server` negotiates with this cloud (cached)."""
        if self._microversion is None:
            self._microversion = Server._get_microversion(self.connection.compute) or ""
        return self._microversion or None

    def create_server(self, spec: ServerSpec) -> CloudServer:
        server = self._create(spec)
        self.listing.add(server)  # listed from now on, whether or not Nova has stamped its `updated` yet
        return server

    def _create(self, spec: ServerSpec) -> CloudServer:
        ids = self._resolve(spec)
        try:
            return self._post(spec, ids)
        except CloudRequestRejected as refused:
            # Nova's refusal does not say which id it could not find ("Can not find requested image"), so
            # ask the names again: if one now means another resource, the cached id was stale. A refused
            # create made nothing, so sending it again with the fresh ids is safe.
            if not ids.cached:
                raise
            self._forget(ids.cached)
            try:
                fresh = self._resolve(spec)
            except CloudTransientError:
                # The names cannot be checked just now; Nova's refusal is still the answer to this create.
                raise refused from None
            if (fresh.image, fresh.flavor, fresh.networks) == (ids.image, ids.flavor, ids.networks):
                raise
            logger.info("create server %s: names resolved to new ids; sending the create again", spec.name)
            return self._post(spec, fresh)

    def delete_server(self, server_id: str) -> None:
        """`DELETE /servers/{id}`; a server already gone (404) is not an error. Sent raw through openstacksdk's
        authenticated adapter: its `delete_server` builds a `Server` resource first, for nothing we need."""
        self._idempotent(
            f"delete server {server_id}", lambda: _delete(self._service("compute"), f"/servers/{server_id}")
        )
        self.listing.deleted(server_id)

    def _exists(self, server_id: str) -> bool:
        """`GET /servers/{id}`: whether Nova still has the server (a 404 says it does not)."""
        path = f"/servers/{server_id}"
        return self._idempotent(f"show server {server_id}", lambda: _show(self._service("compute"), path)) is not None

    # -- cache volumes ----------------------------------------------------------------------------

    def _cache_volume(self, volume: Any) -> CloudVolume | None:
        """One of this installation's cache volumes from Cinder's JSON; None for anything else, or for an
        entry too broken to read (no id): a listing is never refused whole for one odd entry."""
        if not isinstance(volume, dict) or not isinstance(volume.get("id"), str):
            return None
        metadata = volume.get("metadata")
        if not isinstance(metadata, dict):
            return None
        if metadata.get(META_INSTALLATION) != self.installation or META_CACHE not in metadata:
            return None
        size = volume.get("size")
        attachments = [a for a in volume.get("attachments") or [] if isinstance(a, dict) and a.get("server_id")]
        return CloudVolume(
            id=volume["id"],
            name=volume.get("name") or "",
            status=volume.get("status") or "",
            size_gb=size if isinstance(size, int) else 0,
            installation=self.installation,
            pool=metadata.get(META_POOL, ""),
            attached_to=tuple(str(attachment["server_id"]) for attachment in attachments),
            attachment_ids=tuple(str(attachment.get("attachment_id") or "") for attachment in attachments),
        )

    def list_cache_volumes(self) -> list[CloudVolume]:
        """`GET /volumes/detail`, every page, kept to this installation's cache volumes by their metadata
        (Cinder's `metadata` filter is one a deployment may turn off for its members: filtered here)."""

        listed = self._idempotent(
            "list volumes", lambda: every_page(self._service("block_storage"), "/volumes/detail", "volumes", {})
        )
        return [owned for volume in listed if (owned := self._cache_volume(volume)) is not None]

    def create_cache_volume(self, spec: CacheVolumeSpec) -> CloudVolume:
        """`POST /volumes`: not repeated on a dropped connection (it may have made one; the pool's keeper
        finds it by its metadata and deletes it, as a volume no row knows)."""
        body: dict[str, Any] = {"name": spec.name, "size": spec.size_gb, "metadata": spec.metadata}
        if spec.type:
            body["volume_type"] = spec.type
        if spec.availability_zone:
            body["availability_zone"] = spec.availability_zone
        try:
            response = self._service("block_storage").post("/volumes", json={"volume": body}, raise_exc=False)
            os_exceptions.raise_from_response(response)
            created = self._cache_volume(response.json()["volume"])
        except Exception as exc:
            raise classify(f"create volume {spec.name}", exc) from None
        if created is None:
            raise CloudRequestRejected(f"create volume {spec.name}: Cinder's answer lost the volume's metadata")
        return created

    def volume(self, volume_id: str) -> CloudVolume | None:
        def show() -> dict[str, Any] | None:  # read inside the retried call: a garbled answer is a cloud error
            found = _show(self._service("block_storage"), f"/volumes/{volume_id}")
            return found.json()["volume"] if found is not None else None

        volume = self._idempotent(f"show volume {volume_id}", show)
        return self._cache_volume(volume) if volume is not None else None

    def delete_volume(self, volume_id: str) -> None:
        self._idempotent(
            f"delete volume {volume_id}", lambda: _delete(self._service("block_storage"), f"/volumes/{volume_id}")
        )

    def detach_volume(self, volume_id: str, attachment_id: str) -> None:
        """Cinder's `os-detach` action, which a volume's owner may send (Nova's own detach is what failed)."""

        def detach() -> None:
            body = {"os-detach": {"attachment_id": attachment_id}}
            response = self._service("block_storage").post(f"/volumes/{volume_id}/action", json=body, raise_exc=False)
            os_exceptions.raise_from_response(response)

        self._idempotent(f"detach volume {volume_id}", detach)

    def _service(self, name: str) -> RawService:
        """The service proxy `name` (`compute`, `block_storage`) for corral's raw calls (`RawService`). Read
        inside the call that uses it: the first read authenticates, and a failure then is a cloud error."""
        raw = self._raw.get(name)
        if raw is None:
            raw = self._raw[name] = RawService(getattr(self.connection, name))
        return raw

    def close(self) -> None:
        self.connection.close()
