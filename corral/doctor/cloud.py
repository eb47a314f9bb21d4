"""The cloud half of `corral doctor`: Keystone, the catalog, and every name each pool uses, with quota;
once per cloud of `clouds`, each pool checked in the clouds its placements name, with their settings.

Each pool's image, flavor, networks, security groups, key pair, availability zone and volume types are
looked up one by one, so the report names the one that is wrong, and the quota headroom (Nova's and, for
pools with volumes, Cinder's `limits`) is turned into "how many more of this pool's servers fit".
Every call is bounded by the doctor's call timeout; a Keystone that refuses the credentials or cannot be
reached makes every later item `skipped`, not a second failure with the same cause.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openstack
import openstack.connection
from keystoneauth1.access import AccessInfo
from openstack import utils as os_utils
from os_service_types import ServiceTypes

from corral.cloud.images import find_image
from corral.cloud.openstack import VOLUME_TYPE_MICROVERSION, classify, turn_off_sdk_retries
from corral.cloud.quota import Headroom, fit, ports_per_server
from corral.cloud.sdk_logs import keep_bodies_out_of_logs
from corral.config import CloudConfig, CorralConfig, Placement, PoolConfig, VolumeConfig
from corral.doctor.report import Section
from corral.images import ImageFilter, not_found
from corral.images import describe as describe_image

NEEDED_SERVICES = ("compute", "image", "network")
VOLUME_SERVICE = "block-storage"


class Abort(Exception):
    """A prerequisite failed and was reported; what depends on it is skipped."""


class CloudDoctor:
    def __init__(self, config: CorralConfig, section: Section, call_timeout_s: float, cloud: str) -> None:
        """`cloud`: the name in `clouds` of the cloud to check (`DEFAULT_CLOUD` for the single `cloud`)."""
        self.config = config
        self.section = section
        self.timeout_s = call_timeout_s
        self.cloud = cloud
        self.settings: CloudConfig = config.cloud_settings()[cloud]
        self.several = len(config.cloud_settings()) > 1
        self.connection: openstack.connection.Connection | None = None

    def _cloud_key(self, field: str) -> str:
        """Where the cloud's `field` is set in the configuration."""
        return f"clouds.{self.cloud}.{field}" if self.config.clouds else f"cloud.{field}"

    def _placements(self) -> list[tuple[str, PoolConfig, Placement]]:
        """Each pool's placements in this cloud."""
        return [
            (name, pool, placement)
            for name, pool in self.config.pools.items()
            for placement in self.config.placements(name)
            if placement.cloud == self.cloud
        ]

    # -- plumbing ---------------------------------------------------------------------------------

    def _call(self, operation: str, call: Callable[[], Any]) -> Any:
        """One cloud call; any failure becomes the `CloudError` corral itself would report."""
        try:
            return call()
        except Exception as exc:
            raise classify(operation, exc) from None

    @property
    def conn(self) -> openstack.connection.Connection:
        assert self.connection is not None
        return self.connection

    # -- the checks -------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._connect()
            access = self._authenticate()
            self._catalog(access)
        except Abort as abort:
            for name, _, placement in self._placements():
                self.section.skipped(f"pool {placement.key(name)}", str(abort))
            return
        headroom = self._headroom()
        for name, pool, placement in self._placements():
            self._pool(name, pool, placement, headroom)

    def _connect(self) -> None:
        which = f"clouds.yaml entry {self.settings.name!r}" if self.settings.name else "the OS_* variables"
        key = self._cloud_key("cloud" if self.config.clouds else "name")
        try:
            self.connection = openstack.connect(cloud=self.settings.name, region_name=self.settings.region)
        except Exception as exc:
            self.section.failed(
                "cloud configuration",
                f"openstacksdk cannot use {which}: {type(exc).__name__}: {exc}",
                f"fix {key} (an entry of clouds.yaml, found through OS_CLIENT_CONFIG_FILE or the usual places) "
                "or set the OS_* variables",
            )
            raise Abort("the cloud configuration could not be read") from None
        keep_bodies_out_of_logs(self.connection)
        turn_off_sdk_retries(self.connection)  # one Glance 503 would cost a check 15 s of openstacksdk's retries
        self.connection.session.timeout = self.timeout_s
        self.section.passed("cloud configuration", f"using {which}")

    def _authenticate(self) -> AccessInfo:
        auth_url = str((self.conn.config.config.get("auth") or {}).get("auth_url", "?"))
        try:
            self._call("authenticate with Keystone", self.conn.authorize)
            auth = self.conn.session.auth
            assert auth is not None and hasattr(auth, "get_access")
            access: AccessInfo = auth.get_access(self.conn.session)
        except Exception as exc:
            refused = " 401" in str(exc) or "HTTP 401" in str(exc)
            fix = (
                "check the username/password or application credential of the clouds.yaml entry (and that it "
                "has not expired)"
                if refused
                else f"check that {auth_url} is Keystone's URL and reachable from this machine"
            )
            self.section.failed("keystone authentication", f"{auth_url}: {exc}", fix)
            raise Abort("Keystone authentication failed") from None
        who = access.username or access.user_id
        project = access.project_name or access.project_id or "(no project)"
        if not access.project_id:
            self.section.failed(
                "keystone authentication",
                f"authenticated as {who}, but the token is not scoped to a project",
                "set project_name (or project_id) and its domain in the clouds.yaml entry",
            )
            raise Abort("Keystone gave no project-scoped token") from None
        self.section.passed("keystone authentication", f"{auth_url}: user {who}, project {project}")
        return access

    def _catalog(self, access: AccessInfo) -> None:
        needed = list(NEEDED_SERVICES)
        if self.config.uses_volumes():
            needed.append(VOLUME_SERVICE)
        interface = self.conn.config.get_interface() or "public"
        region = self.conn.config.get_region_name()
        types = ServiceTypes()
        missing: list[str] = []
        found: list[str] = []
        for service in needed:
            aliases = types.get_all_types(service) or [service]
            urls = [
                url
                for alias in aliases
                for url in access.service_catalog.get_urls(service_type=alias, interface=interface, region_name=region)
            ]
            (found if urls else missing).append(service)
        where = f"interface {interface}" + (f", region {region}" if region else "")
        if missing:
            self.section.failed(
                "service catalog",
                f"no {', '.join(missing)} endpoint ({where}); found {', '.join(found) or 'none'}",
                f"set {self._cloud_key('region')} (or region_name/interface in clouds.yaml) to where these "
                "services are, "
                "or ask the cloud's operators for them",
            )
            raise Abort("the service catalog lacks services corral needs") from None
        self.section.passed("service catalog", f"{', '.join(needed)} ({where})")

    def _volumes(self, pool_name: str) -> list[VolumeConfig]:
        return self.config.volumes_for(pool_name)

    def _headroom(self) -> Headroom | None:
        """Nova's (and Cinder's, if any pool uses volumes) absolute limits; None, after a failure, if unknown."""
        try:
            nova = self._call("read compute limits", lambda: self.conn.compute.get("/limits", raise_exc=True))
            volumes = None
            if self.config.uses_volumes():
                cinder = self._call(
                    "read volume limits", lambda: self.conn.block_storage.get("/limits", raise_exc=True)
                )
                volumes = cinder.json()["limits"]["absolute"]
            headroom = Headroom.of(nova.json()["limits"]["absolute"], volumes, self._port_quota())
        except Exception as exc:
            self.section.failed(
                "quota",
                f"the project's limits could not be read: {exc}",
                "check that the account may read its own limits (GET /limits on Nova and Cinder)",
            )
            return None
        return headroom

    def _port_quota(self) -> dict[str, Any] | None:
        """Neutron's port quota details, or None (with a warning) when Neutron will not say: corral then
        plans without ports, as it does at run time."""
        try:
            project = self.conn.current_project_id
            if project is None:
                raise ValueError("the credentials name no project")
            quota = self._call("read port quota", lambda: self.conn.network.get_quota(project, details=True))
        except Exception as exc:
            self.section.warned(
                "port quota",
                f"Neutron's port quota could not be read, so corral cannot plan for ports: {exc}",
                "allow the account to read its project's network quota (GET /v2.0/quotas/{project}/details)",
            )
            return None
        ports: dict[str, Any] = quota.ports or {}
        return ports

    # -- one pool ---------------------------------------------------------------------------------

    def _pool(self, name: str, pool: PoolConfig, placement: Placement, headroom: Headroom | None) -> None:
        item = f"pool {placement.key(name)}"

        def key(field: str) -> str:
            """Where the placement's `field` is set: its own override, else the pool's setting."""
            given = pool.placements[placement.index] if pool.placements else None
            if given is not None and getattr(given, field) is not None:
                return f"pools.{name}.placements.{placement.index}.{field}"
            return f"pools.{name}.{field}"

        self._image(f"{item}: image", placement, key("image"))
        flavor = self._look(
            f"{item}: flavor",
            "flavor",
            placement.flavor,
            lambda n: self.conn.compute.find_flavor(n, ignore_missing=True),
            key("flavor"),
        )
        for network in placement.networks:
            self._look(
                f"{item}: network {network}",
                "network",
                network,
                lambda n: self.conn.network.find_network(n, ignore_missing=True),
                key("networks"),
            )
        if not placement.networks:
            self.section.passed(f"{item}: networks", 'none named: Nova picks the project\'s network ("auto")')
        for group in placement.security_groups:
            self._look(
                f"{item}: security group {group}",
                "security group",
                group,
                lambda n: self.conn.network.find_security_group(n, ignore_missing=True),
                key("security_groups"),
            )
        if placement.key_name:
            self._look(
                f"{item}: key pair",
                "key pair",
                placement.key_name,
                lambda n: self.conn.compute.find_keypair(n, ignore_missing=True),
                key("key_name"),
            )
        if placement.availability_zone:
            self._zone(item, placement.availability_zone, key("availability_zone"))
        self._volume_types(item, name, pool)
        self._cache_volume_type(item, name, pool)
        if flavor is not None:
            self._quota(item, name, pool, placement, flavor, headroom)
        else:
            self.section.skipped(f"{item}: quota", "the flavor is unknown, so its size is too")

    def _image(self, item: str, placement: Placement, key: str) -> None:
        """The image the placement's `image` means now, found as corral finds it (`cloud.images.find_image`)."""
        ref = placement.image
        what = describe_image(ref)
        try:
            image = self._call(f"find {what}", lambda: find_image(self.conn, ref))
        except Exception as exc:
            self.section.failed(item, str(exc), "see the cloud's answer above; run the doctor again once it works")
            return
        if image is None:
            fix = (
                f"upload one, or change {key} (`openstack image list --long` shows images' properties)"
                if isinstance(ref, ImageFilter)
                else f"set {key} to the name or id of an existing image (`openstack image list`)"
            )
            self.section.failed(item, f"{not_found(ref)} (or this project cannot see it)", fix)
        elif getattr(image, "status", "active") != "active":
            self.section.failed(
                item,
                f"{what} is {image.status}, not active",
                f"wait for the upload to finish, or point {key} at an active image",
            )
        else:
            named = f"{image.name!r} ({image.id})" if isinstance(ref, ImageFilter) else image.id
            self.section.passed(item, f"{what} is {named}")

    def _look(
        self, item: str, kind: str, name: str, find: Callable[[str], Any], key: str, *, if_missing: str | None = None
    ) -> Any:
        """Find one named resource and report it; the resource, or None when missing or the lookup failed.
        `if_missing`: what its absence costs when that is not a failure (reported as a warning, with it)."""
        report = self.section.failed if if_missing is None else self.section.warned
        try:
            found = self._call(f"find {kind} {name!r}", lambda: find(name))
        except Exception as exc:
            report(item, str(exc), "see the cloud's answer above; run the doctor again once it works")
            return None
        if found is None:
            missing = f"{kind} {name!r} does not exist in this cloud (or this project cannot see it)"
            report(
                item,
                missing if if_missing is None else f"{missing}: {if_missing}",
                f"set {key} to the name or id of an existing {kind} "
                f"(`openstack {kind.replace('key pair', 'keypair')} list`)",
            )
            return None
        self.section.passed(item, f"{kind} {name!r} is {found.id}")
        return found

    def _zone(self, item: str, zone: str, key: str) -> None:
        try:
            zones = self._call(
                "list availability zones", lambda: [z.name for z in self.conn.compute.availability_zones()]
            )
        except Exception as exc:
            self.section.failed(f"{item}: availability zone", str(exc), "run the doctor again once the cloud answers")
            return
        if zone in zones:
            self.section.passed(f"{item}: availability zone", f"{zone!r} exists")
        else:
            self.section.failed(
                f"{item}: availability zone",
                f"availability zone {zone!r} does not exist; the cloud has {sorted(zones)}",
                f"set {key} to one of them, or remove it",
            )

    def _volume_types(self, item: str, pool_name: str, pool: PoolConfig) -> None:
        types = sorted({t for t in [pool.boot_volume_type, *(v.type for v in self._volumes(pool_name))] if t})
        for volume_type in types:
            self._look(
                f"{item}: volume type {volume_type}",
                "volume type",
                volume_type,
                lambda n: self.conn.block_storage.find_type(n, ignore_missing=True),
                f"pools.{pool_name}.boot_volume_type or the volumes' type",
            )
        if types:
            try:
                supported = self._call(
                    "discover the compute API",
                    lambda: os_utils.supports_microversion(self.conn.compute, VOLUME_TYPE_MICROVERSION),
                )
            except Exception as exc:
                self.section.failed(f"{item}: volume types", str(exc), "run the doctor again once the cloud answers")
                return
            if not supported:
                self.section.failed(
                    f"{item}: volume types",
                    f"volume types in a server create need compute API {VOLUME_TYPE_MICROVERSION}, which this "
                    "cloud lacks",
                    f"remove pools.{pool_name}.boot_volume_type and the volumes' type",
                )

    def _cache_volume_type(self, item: str, pool_name: str, pool: PoolConfig) -> None:
        """A warning, not a failure: Cinder refuses cache volumes of a type it lacks, and the pool's runners
        then start without one (slower jobs, no lost job)."""
        volume_type = pool.cache_volumes.type if pool.cache_volumes else None
        if volume_type:
            self._look(
                f"{item}: cache volume type {volume_type}",
                "volume type",
                volume_type,
                lambda n: self.conn.block_storage.find_type(n, ignore_missing=True),
                f"pools.{pool_name}.cache_volumes.type",
                if_missing="Cinder will refuse every cache volume, and the pool's runners will start without one",
            )

    def _quota(
        self, item: str, pool_name: str, pool: PoolConfig, placement: Placement, flavor: Any, headroom: Headroom | None
    ) -> None:
        if headroom is None:
            self.section.skipped(f"{item}: quota", "the project's limits could not be read")
            return
        disks = [v.size_gb for v in self._volumes(pool_name)] + ([pool.boot_volume_gb] if pool.boot_volume_gb else [])
        fits = {
            "instances": fit(headroom.instances, 1),
            "cores": fit(headroom.cores, int(flavor.vcpus or 0)),
            "RAM": fit(headroom.ram_mb, int(flavor.ram or 0)),
            "volumes": fit(headroom.volumes, len(disks)) if disks else None,
            "volume gigabytes": fit(headroom.gigabytes, sum(disks)) if disks else None,
            "ports": fit(headroom.ports, ports_per_server(placement.networks)),
        }
        limited = {name: count for name, count in fits.items() if count is not None}
        if not limited:
            self.section.passed(f"{item}: quota", "the project's quota is unlimited")
            return
        count = min(limited.values())
        short = sorted(name for name, value in limited.items() if value == count)
        each = f"{flavor.vcpus} vCPU, {flavor.ram} MiB"
        if disks:
            each += f", {len(disks)} volume(s) of {sum(disks)} GB"
        summary = f"{count} more of this pool's servers ({each} each) fit; max_runners is {pool.max_runners}"
        if count == 0:
            self.section.failed(
                f"{item}: quota",
                f"not one more server fits: no headroom left in {', '.join(short)} ({each} each)",
                f"raise the project's {', '.join(short)} quota, free some, or give pool {pool_name} a smaller flavor",
            )
        elif count < pool.max_runners:
            self.section.warned(
                f"{item}: quota",
                f"{summary} (limited by {', '.join(short)}; the headroom is shared by every pool)",
                f"raise the project's {', '.join(short)} quota or lower pools.{pool_name}.max_runners to {count}",
            )
        else:
            self.section.passed(f"{item}: quota", summary)


def check_cloud(config: CorralConfig, section: Section, call_timeout_s: float, cloud: str | None = None) -> None:
    """Run every check of one cloud (by its name in `clouds`; None: the first), appending to `section`;
    closes the connection it opened."""
    doctor = CloudDoctor(config, section, call_timeout_s, cloud or config.default_cloud)
    try:
        doctor.run()
    finally:
        if doctor.connection is not None:
            doctor.connection.close()
