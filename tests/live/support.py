"""What the live tests share: settings from the environment, an observer connection, request counting,
polling, cleanup bookkeeping and the figures printed at the end of the session.

The tests drive corral's `OpenStackProvider`; openstacksdk is used directly only to arrange (a foreign
server, a low quota, an oversized flavor) and to observe what reached the cloud, through a separate
connection, so the provider's own request counts stay exact.
"""

from __future__ import annotations

import os
import re
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

import openstack.connection
import pytest
from openstack import exceptions as os_exceptions

from corral.cloud.openstack import DEFAULT_TIMEOUT_S, OpenStackProvider, connect
from corral.cloud.provider import META_INSTALLATION, META_POOL, META_RUNNER, ServerSpec
from corral.config import CloudConfig
from corral_sandbox.local import pool_spec

T = TypeVar("T")

ID_SEGMENT = re.compile(r"/[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
SETTLE_TIMEOUT_S = 2 * DEFAULT_TIMEOUT_S
"""A settle is a look (a listing per cloud) and the creates and deletes it starts, each call bounded by the
provider's own timeout; a bound of one call's timeout (60 s) failed a test on a loaded machine whose
ministack stalled one call. The polls around it hold the test's deadline."""
RUN_MARKER = "corral-live-run"
"""Metadata on every server a live run creates outside corral's ownership (the "foreign" ones), so the
session finalizer can find and delete those too without ever touching servers of other runs."""


def live_skip_reason() -> str | None:
    """Why the live suite cannot run here, or None when it can."""
    if os.environ.get("USE_LIVE_OPENSTACK", "").lower() != "true":
        return "live OpenStack tests are off: run `bash scripts/live.sh`, or set USE_LIVE_OPENSTACK=true"
    if not (os.environ.get("OS_CLOUD") or os.environ.get("OS_AUTH_URL")):
        return "USE_LIVE_OPENSTACK=true but no credentials: set OS_CLOUD (with clouds.yaml) or the OS_* variables"
    missing = [name for name in ("CORRAL_LIVE_IMAGE", "CORRAL_LIVE_FLAVOR", "CORRAL_LIVE_NETWORK") if not env(name)]
    if missing:
        return f"USE_LIVE_OPENSTACK=true but {', '.join(missing)} not set: name an image, flavor and network to use"
    return None


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def cloud_config() -> CloudConfig:
    return CloudConfig(name=os.environ.get("OS_CLOUD") or None, region=os.environ.get("OS_REGION_NAME") or None)


def in_project(find: Callable[..., Any], name_or_id: str, project: str | None) -> Any:
    """The resource `name_or_id` names for the tested project, found with `find` (openstacksdk's
    `find_network`, `find_security_group`).

    A pool given a name several resources share is refused by design ("use the id"), and an admin account
    sees every project's: ministack's admin sees project two's `private` network and `default` group next to
    its own. So the suite resolves the names it is given once, here, taking the project's own where the name
    is ambiguous, and hands corral the ids, as such a user would write them in corral.yaml.
    """
    try:
        return find(name_or_id, ignore_missing=False)
    except os_exceptions.DuplicateResource:
        if project is None:
            raise
        return find(name_or_id, ignore_missing=False, project_id=project)


def poll(probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.1) -> T:
    """The first truthy `probe()`, polled at `interval` (gentle on a real API); fails naming `what`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    status: int

    @property
    def path(self) -> str:
        return urlsplit(self.url).path

    @property
    def route(self) -> str:
        """The path with ids replaced, for reports: `DELETE /v2.1/servers/{id}`."""
        return f"{self.method} {ID_SEGMENT.sub('/{id}', self.path)}"


@dataclass
class ApiCounter:
    """Every HTTP request a connection makes, seen by a `requests` response hook on its keystoneauth
    session: below openstacksdk, so pagination, retries and re-authentication are all counted."""

    requests: list[Request] = field(default_factory=list)

    @classmethod
    def attach(cls, connection: openstack.connection.Connection) -> ApiCounter:
        counter = cls()
        connection.session.session.hooks["response"].append(counter._hook)
        return counter

    def _hook(self, response: Any, *args: Any, **kwargs: Any) -> None:
        self.requests.append(Request(response.request.method, response.url, response.status_code))

    @contextmanager
    def counting(self) -> Iterator[list[Request]]:
        """The requests made inside the block."""
        start = len(self.requests)
        made: list[Request] = []
        try:
            yield made
        finally:
            made.extend(self.requests[start:])

    def describe(self, requests: list[Request]) -> str:
        return ", ".join(f"{r.route} -> {r.status}" for r in requests) or "(none)"


@dataclass
class Figures:
    """Measurements collected during the session and printed in the terminal summary."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def record(self, name: str, value: float) -> None:
        self.samples.setdefault(name, []).append(value)

    def note(self, name: str, text: str) -> None:
        self.notes[name] = text

    def lines(self) -> list[str]:
        out = []
        for name, values in self.samples.items():
            if len(values) == 1:
                out.append(f"{name}: {values[0]:.2f}")
            else:
                out.append(
                    f"{name}: median {statistics.median(values):.2f}, min {min(values):.2f}, "
                    f"max {max(values):.2f} (n={len(values)})"
                )
        out.extend(f"{name}: {text}" for name, text in self.notes.items())
        return out


@dataclass
class LiveCloud:
    """The cloud under test, the names the pool uses, and this run's identity for cleanup."""

    observer: openstack.connection.Connection
    run: str
    image: str
    flavor: str
    network: str
    """The pool's network by id: CORRAL_LIVE_NETWORK as the tested project sees it (`in_project`)."""
    network_name: str
    """Its name, which Nova keys the server's addresses by."""
    security_group: str
    """The pool's security group by id (CORRAL_LIVE_SECURITY_GROUP, likewise)."""
    security_group_name: str
    """Its name, which Nova lists on the server."""
    availability_zone: str
    volume_type: str | None
    has_volumes: bool
    timeout: float
    key_name: str = ""
    created_flavors: list[str] = field(default_factory=list)
    created_images: list[str] = field(default_factory=list)

    @property
    def installation(self) -> str:
        return f"live-{self.run}"

    @property
    def other_installation(self) -> str:
        return f"live-{self.run}-other"

    def new_provider(
        self, installation: str | None = None, *, compute_endpoint: str | None = None, timeout_s: float | None = None
    ) -> OpenStackProvider:
        """A provider on a connection of its own, made the way corral makes it (`connect`), optionally
        reaching Nova through another address (a fault-injecting proxy)."""
        config = cloud_config()
        if compute_endpoint is None:
            connection = connect(config)
        else:
            connection = openstack.connect(
                cloud=config.name, region_name=config.region, compute_endpoint_override=compute_endpoint
            )
        if timeout_s is None:
            return OpenStackProvider(connection, installation or self.installation)
        return OpenStackProvider(connection, installation or self.installation, timeout_s=timeout_s)

    def owned(self, installation: str) -> list[Any]:
        """The servers of a corral `installation` (by its metadata), with their details."""
        return [
            server
            for server in self.observer.compute.servers(details=True)
            if (server.metadata or {}).get(META_INSTALLATION) == installation
        ]

    def warm_pool(self, **overrides: Any) -> dict[str, Any]:
        """A pool of this cloud's image, flavor and network keeping two warm runners (no guest boots here,
        so `bootstrap_timeout` replaces them) out of three at most."""
        return pool_spec(
            ["live"],
            image=self.image,
            flavor=self.flavor,
            networks=[self.network],
            min_idle=2,
            max_runners=3,
            **overrides,
        )

    def after_last_upload(self) -> None:
        """Wait until the second after this run's last image upload: Glance keeps `created_at` to the second,
        and which of two uploads is the newest is only defined when their seconds differ."""
        previous = [self.observer.image.get_image(image_id).created_at for image_id in self.created_images]
        if previous:
            after = datetime.fromisoformat(max(previous).replace("Z", "+00:00")) + timedelta(seconds=1)
            poll(lambda: datetime.now(UTC) >= after or None, timeout=5, what="the next second on Glance's clock")

    def spec(self, runner: str, *, installation: str | None = None, **options: Any) -> ServerSpec:
        """A minimal pool's server for `runner`, with corral's ownership metadata; options override."""
        metadata = {
            META_INSTALLATION: installation or self.installation,
            META_POOL: "live",
            META_RUNNER: runner,
            **options.pop("metadata", {}),
        }
        fields: dict[str, Any] = {
            "name": f"corral-live-{self.run}-{runner}",
            "image": self.image,
            "flavor": self.flavor,
            "networks": (self.network,),
            "metadata": metadata,
        }
        fields.update(options)
        return ServerSpec(**fields)

    # -- observation ------------------------------------------------------------------------------

    def server(self, server_id: str) -> Any:
        """The server as Nova shows it now, or None once it is gone."""
        try:
            return self.observer.compute.get_server(server_id)
        except os_exceptions.NotFoundException:
            return None

    def wait_status(self, server_id: str, *statuses: str) -> Any:
        def probe() -> Any:
            server = self.server(server_id)
            return server if server is not None and server.status in statuses else None

        return poll(probe, timeout=self.timeout, what=f"server {server_id} to reach {'/'.join(statuses)}")

    def listed_ids(self) -> set[str]:
        """Ids of every server in the project listing (the listing, not a show: see ministack's pitfalls)."""
        return {server.id for server in self.observer.compute.servers(details=False)}

    def wait_gone(self, server_ids: set[str]) -> None:
        poll(
            lambda: not (server_ids & self.listed_ids()),
            timeout=self.timeout,
            what=f"servers {sorted(server_ids)} to leave the listing",
            interval=0.2,
        )

    def volume_ids(self) -> set[str]:
        return {volume.id for volume in self.observer.block_storage.volumes()}

    # -- arranging --------------------------------------------------------------------------------

    def create_foreign(self, name: str, metadata: dict[str, str], tags: list[str] | None = None) -> Any:
        """A server corral did not create (no ownership metadata of ours), marked for this run's cleanup."""
        attrs: dict[str, Any] = {
            "name": f"corral-live-{self.run}-{name}",
            "flavor_id": self.observer.compute.find_flavor(self.flavor, ignore_missing=False).id,
            "image_id": self.observer.image.find_image(self.image, ignore_missing=False).id,
            "networks": [{"uuid": self.observer.network.find_network(self.network, ignore_missing=False).id}],
            "metadata": {RUN_MARKER: self.run, **metadata},
        }
        if tags:
            attrs["tags"] = tags
        return self.observer.compute.create_server(**attrs)

    def ours(self, server: Any) -> bool:
        """Whether a server was made by this run, by metadata (the same rule corral follows)."""
        metadata = server.metadata or {}
        installation = str(metadata.get(META_INSTALLATION, ""))
        return metadata.get(RUN_MARKER) == self.run or installation.startswith(self.installation)

    def cleanup(self) -> list[str]:
        """Delete every server, key pair, flavor and image this run made; what could not be removed."""
        left: list[str] = []
        mine = {server.id for server in self.observer.compute.servers(details=True) if self.ours(server)}
        for server_id in mine:
            self.observer.compute.delete_server(server_id, ignore_missing=True)
        try:
            self.wait_gone(mine)
        except AssertionError as exc:
            left.append(str(exc))
        if self.key_name:
            self.observer.compute.delete_keypair(self.key_name, ignore_missing=True)
        for flavor_id in self.created_flavors:
            self.observer.compute.delete_flavor(flavor_id, ignore_missing=True)
        for image_id in self.created_images:
            self.observer.image.delete_image(image_id, ignore_missing=True)
        return left


@contextmanager
def exhausted_quota(live: LiveCloud, service: str, resource: str) -> Iterator[None]:
    """Leave the project no room for one more `resource` for the block, then put the old limit back.

    `service` "compute": Nova's quota set, forced to 0 (Nova accepts a limit below usage when forced).
    `service` "network": Neutron's quota, set to the current usage (Neutron refuses less than that).
    Skips the test on an account that may not change quotas.
    """
    project = live.observer.current_project_id
    assert project is not None, "the live account should be scoped to a project"
    compute, network = live.observer.compute, live.observer.network

    def write(limit: int) -> None:
        values: dict[str, Any] = {resource: limit}
        if service == "compute":
            compute.update_quota_set(project, force=True, **values)
        else:
            network.update_quota(project, **values)

    if service == "compute":
        original = getattr(compute.get_quota_set(project), resource)
        exhausted = 0
    else:
        original = getattr(network.get_quota(project), resource)
        exhausted = int(getattr(network.get_quota(project, details=True), resource)["used"])
    try:
        write(exhausted)
    except os_exceptions.ForbiddenException:
        pytest.skip(f"changing {service} quotas needs an admin account")
    try:
        yield
    finally:
        write(original)


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]
