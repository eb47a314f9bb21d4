"""What the OpenStack project offers a runner: images, flavors, networks, security groups, key pairs and
availability zones, listed through openstacksdk from the same `clouds.yaml` entry (or `OS_*` variables)
corral itself will use.

Which cloud follows openstacksdk's own rule, so that `corral serve` later connects to the same one:
`--cloud`, else `OS_CLOUD`, else the `OS_*` variables, else the only entry of `clouds.yaml`; only several
entries and none of those is a question.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import openstack
import openstack.config
import openstack.connection
from keystoneauth1 import exceptions as ks_exceptions
from openstack import exceptions as os_exceptions

from corral import secrets
from corral.cloud.sdk_logs import keep_bodies_out_of_logs
from corral.init.errors import InitError
from corral.init.prompt import Choice, Prompter

T = TypeVar("T")

API_TIMEOUT_S = 60.0
NO_CLOUD_YET = "defaults"
"""The entry openstacksdk makes up when it found neither a clouds.yaml nor OS_* variables."""


@dataclass(frozen=True)
class Resource:
    """Something a pool names: config takes its name (or id); `detail` tells candidates apart in a menu."""

    id: str
    name: str
    detail: str = ""
    external: bool = False

    def choice(self) -> Choice:
        return Choice(self.name, self.detail)


@dataclass(frozen=True)
class CloudInventory:
    """The cloud as init found it. `cloud_name` is what goes into the config (None: the OS_* variables)."""

    cloud_name: str | None
    label: str
    images: list[Resource]
    flavors: list[Resource]
    networks: list[Resource]
    security_groups: list[Resource]
    keypairs: list[Resource]
    zones: list[Resource]


def pick_cloud(requested: str | None, prompter: Prompter) -> str | None:
    """The clouds.yaml entry to use (None: the OS_* variables), chosen the way openstacksdk would."""
    try:
        config = openstack.config.OpenStackConfig()
    except os_exceptions.ConfigException as exc:
        raise InitError(f"cannot read the OpenStack configuration: {exc}") from None
    env_key = config.envvar_key
    names = [name for name in config.get_cloud_names() if name not in (env_key, NO_CLOUD_YET)]
    where = config.config_filename or "no clouds.yaml found"
    if requested is not None:
        if requested not in names:
            have = ", ".join(names) or "none"
            raise InitError(f"--cloud {requested!r}: no such entry in clouds.yaml ({where}); it has: {have}")
        return requested
    default = config.default_cloud
    if default == env_key:
        return None
    if default and default != NO_CLOUD_YET:
        return str(default)
    if not names:
        raise InitError(
            "no OpenStack credentials: write a clouds.yaml (the project's 'API access' page offers one) and pass "
            "--cloud NAME, or set the OS_* variables (an openrc file)"
        )
    return prompter.choose("cloud", "--cloud", [Choice(name, f"in {where}") for name in names])


def connect(cloud_name: str | None, region: str | None) -> openstack.connection.Connection:
    try:
        connection = openstack.connect(cloud=cloud_name, region_name=region, api_timeout=API_TIMEOUT_S)
    except (os_exceptions.SDKException, ks_exceptions.ClientException) as exc:
        raise InitError(f"cannot use cloud {cloud_name or 'from the OS_* variables'}: {_reason(exc)}") from None
    keep_bodies_out_of_logs(connection)
    return connection


def _reason(exc: Exception) -> str:
    """What went wrong, in openstacksdk's words, without a credential that might ride along."""
    if isinstance(exc, os_exceptions.HttpException):
        text = f"{exc.status_code}: {(exc.details or exc.message or '').strip()}"
    elif isinstance(exc, ks_exceptions.HttpError):
        text = f"{exc.http_status}: {(exc.message or '').strip()}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return secrets.redact(text)[:500]


def _listing(what: str, cloud: str, call: Callable[[], Iterable[T]]) -> list[T]:
    """`call()`, listed whole; openstacksdk authenticates on first use (of a proxy, even), so any of that
    failing is reported as this listing's failure."""
    try:
        return list(call())
    except (os_exceptions.SDKException, ks_exceptions.ClientException) as exc:
        raise InitError(f"cannot list the {what} of cloud {cloud}: {_reason(exc)}") from None


def _image(image: Any) -> Resource:
    size = f"{image.size / 2**30:.1f} GiB" if image.size else "size unknown"
    return Resource(id=str(image.id), name=str(image.name or image.id), detail=size)


def _flavor(flavor: Any) -> Resource:
    cpus = f"{flavor.vcpus} vCPU" + ("s" if flavor.vcpus != 1 else "")
    return Resource(
        id=str(flavor.id), name=str(flavor.name), detail=f"{cpus}, {flavor.ram} MiB RAM, {flavor.disk} GB disk"
    )


def _network(network: Any) -> Resource:
    external = bool(network.is_router_external)
    detail = "external" if external else f"{len(network.subnet_ids or [])} subnet(s)"
    return Resource(id=str(network.id), name=str(network.name or network.id), detail=detail, external=external)


def _security_group(group: Any) -> Resource:
    return Resource(id=str(group.id), name=str(group.name), detail=str(group.description or ""))


def _keypair(keypair: Any) -> Resource:
    return Resource(id=str(keypair.name), name=str(keypair.name), detail=str(keypair.type or ""))


def discover(cloud_name: str | None, region: str | None) -> CloudInventory:
    """Everything a pool can name, listed once; only active images and available zones are candidates."""
    connection = connect(cloud_name, region)
    label = cloud_name or "from the OS_* variables"
    try:
        images = [
            _image(image)
            for image in _listing("images", label, lambda: connection.image.images())
            if image.status == "active"
        ]
        flavors = [_flavor(flavor) for flavor in _listing("flavors", label, lambda: connection.compute.flavors())]
        networks = [_network(network) for network in _listing("networks", label, lambda: connection.network.networks())]
        groups = [
            _security_group(g) for g in _listing("security groups", label, lambda: connection.network.security_groups())
        ]
        keypairs = [
            _keypair(keypair) for keypair in _listing("key pairs", label, lambda: connection.compute.keypairs())
        ]
        zones = [
            Resource(id=str(zone.name), name=str(zone.name))
            for zone in _listing("availability zones", label, lambda: connection.compute.availability_zones())
            if (zone.state or {}).get("available", True)
        ]
    finally:
        connection.close()
    return CloudInventory(
        cloud_name=cloud_name,
        label=label,
        images=sorted(images, key=lambda r: r.name),
        flavors=flavors,
        networks=sorted(networks, key=lambda r: r.name),
        security_groups=sorted(groups, key=lambda r: r.name),
        keypairs=sorted(keypairs, key=lambda r: r.name),
        zones=sorted(zones, key=lambda r: r.name),
    )
