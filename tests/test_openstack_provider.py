"""corral's OpenStack provider against the sandbox: what each pool's volume options make of a server, and
how Nova's refusals reach the engine.

The sandbox validates block device mappings as Nova does (tests/sandbox/test_block_devices.py), and the
live differential suite checks the two agree, so a request the sandbox accepts here is one a real Nova
accepts too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openstack.connection
import pytest
from keystoneauth1.access.service_catalog import ServiceCatalog

from corral.cloud.openstack import OpenStackProvider, ownership_tag
from corral.cloud.provider import (
    META_INSTALLATION,
    META_POOL,
    META_RUNNER,
    CloudError,
    CloudRequestRejected,
    CloudTransientError,
    ServerSpec,
)
from corral.config import VolumeConfig
from corral.metrics import REGISTRY
from corral_sandbox.local import sandbox_connection
from corral_sandbox.server import Sandbox
from tests.environment_reads import environment_reads
from tests.waiting import wait_until


@pytest.fixture
def provider(sandbox: Sandbox) -> Iterator[OpenStackProvider]:
    provider = OpenStackProvider(sandbox_connection(sandbox.info), "test")
    yield provider
    provider.close()


def spec(runner: str, **options: Any) -> ServerSpec:
    metadata = {META_INSTALLATION: "test", META_POOL: "volumes", META_RUNNER: runner}
    fields: dict[str, Any] = {
        "name": f"corral-test-{runner}",
        "image": "cirros",
        "flavor": "m1.tiny",
        "networks": ("private",),
        "metadata": metadata,
    }
    return ServerSpec(**{**fields, **options})


def active(os_conn: openstack.connection.Connection, server_id: str) -> Any:
    wait_until(lambda: os_conn.compute.get_server(server_id).status != "BUILD", what="server leaves BUILD")
    server = os_conn.compute.get_server(server_id)
    assert server.status == "ACTIVE", server.fault
    return server


def attached(os_conn: openstack.connection.Connection, server: Any) -> list[Any]:
    """The server's volumes as Cinder shows them, root disk first."""
    volumes = [os_conn.block_storage.get_volume(v["id"]) for v in server.attached_volumes]
    return sorted(volumes, key=lambda volume: volume.attachments[0]["device"])


def test_extra_volumes_without_boot_volume_boot_the_image_from_a_local_disk(
    provider: OpenStackProvider, os_conn: openstack.connection.Connection
) -> None:
    """Nova refuses mappings with no boot device ("Boot sequence ... is not valid"): the image's own local
    root disk has to be mapped at boot index 0 next to the pool's blank volumes."""
    volumes = (VolumeConfig(name="docker", size_gb=2), VolumeConfig(name="cache", size_gb=1, type="ssd"))
    created = provider.create_server(spec("extra-only", volumes=volumes))
    server = active(os_conn, created.id)
    assert server.image.id == os_conn.image.find_image("cirros", ignore_missing=False).id, "still the server's image"
    disks = attached(os_conn, server)
    assert [(v.size, v.volume_type, v.is_bootable) for v in disks] == [(2, "__DEFAULT__", False), (1, "ssd", False)]
    assert [v.attachments[0]["device"] for v in disks] == ["/dev/vdb", "/dev/vdc"], "vda is the image's disk"
    assert all(v["delete_on_termination"] for v in server.attached_volumes)


def test_boot_volume_with_extra_volumes_boots_from_the_volume(
    provider: OpenStackProvider, os_conn: openstack.connection.Connection
) -> None:
    created = provider.create_server(
        spec("boot-and-extra", boot_volume_gb=3, boot_volume_type="ssd", volumes=(VolumeConfig(name="x", size_gb=1),))
    )
    server = active(os_conn, created.id)
    disks = attached(os_conn, server)
    assert [(v.size, v.volume_type, v.is_bootable) for v in disks] == [(3, "ssd", True), (1, "__DEFAULT__", False)]
    assert [v.attachments[0]["device"] for v in disks] == ["/dev/vda", "/dev/vdb"]


def test_create_request_is_the_request_create_server_sends(
    sandbox: Sandbox, provider: OpenStackProvider, os_conn: openstack.connection.Connection
) -> None:
    """What `tests.seeding` puts in place without corral must be what corral makes: the same request, sent
    as it is, gives the same server as `create_server` (its name, runner and timestamps aside)."""
    options: dict[str, Any] = {"volumes": (VolumeConfig(name="docker", size_gb=1),), "user_data": "#!/bin/sh\n"}
    made = active(os_conn, provider.create_server(spec("made", **options)).id)
    body, microversion = provider.create_request(spec("sent", **options))
    response = os_conn.compute.post("/servers", json=body, microversion=microversion)
    sent = active(os_conn, response.json()["server"]["id"])

    def server(seen: Any) -> dict[str, Any]:
        view = sandbox.call(lambda: sandbox.world.cloud.server(seen.id))
        fields = ("flavor_id", "image_id", "security_groups", "user_data", "config_drive", "tags")
        metadata = {key: value for key, value in view.metadata.items() if key != META_RUNNER}
        return {"metadata": metadata, "volumes": len(view.attachments), **{f: getattr(view, f) for f in fields}}

    assert server(sent) == server(made)
    assert server(made)["tags"] == [ownership_tag("test")], "sent at a microversion with tags on create (2.52)"


def test_novas_refusal_is_a_rejection_carrying_novas_message(
    provider: OpenStackProvider, os_conn: openstack.connection.Connection
) -> None:
    """A permanent 400 must not read as transient: the engine would retry a pool that can never start."""
    volumes = (VolumeConfig(name="docker", size_gb=1, type="no-such-type"),)
    with pytest.raises(CloudRequestRejected) as refused:
        provider.create_server(spec("bad-type", volumes=volumes))
    assert "HTTP 400: Volume type no-such-type could not be found." in str(refused.value)
    assert list(os_conn.compute.servers()) == [], "a refused create makes no server"


def test_novas_refusal_stays_a_rejection_when_rechecking_the_names_fails(
    sandbox: Sandbox, provider: OpenStackProvider
) -> None:
    """A refused create made with cached ids looks the names up again (an image may have been rebuilt):
    if Glance is down just then, the refusal is still Nova's, not a transient error to retry for ever."""
    provider.create_server(spec("warm-cache"))
    volumes = (VolumeConfig(name="docker", size_gb=1, type="no-such-type"),)
    glance_down = {"endpoints": [{"match": "openstack GET /image/*", "error_rate": 1.0, "status": 500}]}
    sandbox.call(lambda: sandbox.world.faults.configure(glance_down))
    try:
        with pytest.raises(CloudRequestRejected) as refused:
            provider.create_server(spec("bad-type", volumes=volumes))
    finally:
        sandbox.call(lambda: sandbox.world.faults.configure({"endpoints": []}))
    assert "HTTP 400: Volume type no-such-type could not be found." in str(refused.value)


def test_a_keystone_failure_on_first_use_is_a_cloud_error(sandbox: Sandbox, control: httpx.Client) -> None:
    """Found by bench/chaos.py: the compute proxy authenticates on first use, outside any call corral wraps,
    so a Keystone 503 at start-up escaped as keystoneauth's own exception instead of a cloud error."""
    refused = {"match": "openstack POST /identity/v3/auth/tokens", "error_rate": 1.0, "status": 503, "count": 1}
    control.put("/faults", json={"endpoints": [refused]}).raise_for_status()
    fresh = OpenStackProvider(sandbox_connection(sandbox.info), "corral")
    try:
        with pytest.raises(CloudError):
            fresh.list_servers()
        assert fresh.list_servers() == [], "and once Keystone answers again, the provider works"
    finally:
        fresh.close()


def test_a_name_two_networks_share_is_a_problem_of_the_pool_not_a_failed_check(
    sandbox: Sandbox, provider: OpenStackProvider
) -> None:
    """An admin sees every project's networks, so a name the pool's project holds once may match two: that
    is a definite answer (use the id), not a check to try again."""
    assert provider.check_pool(spec("check")) == []
    sandbox.call(lambda: sandbox.world.cloud.add_network("private", "10.99.0.0/24"))
    (problem,) = provider.check_pool(spec("check"))
    assert (
        "More than one Network exists with the name 'private'" in problem and "use a unique name or the id" in problem
    )


def glance_attempts(control: httpx.Client) -> int:
    """Requests to Glance's image API the sandbox answered with an injected error."""
    injected = control.get("/stats").json()["injected_errors"]["openstack"]
    return sum(count for endpoint, count in injected.items() if endpoint.startswith("GET /image/v2/"))


@pytest.mark.parametrize(
    ("retries", "retry_time_s", "pauses"),
    [(2, 10.0, [0.2, 1.0]), (5, 10.0, [0.2, 1.0, 5.0]), (5, 3.0, [0.2, 1.0])],
    ids=["by-count", "pauses-grow", "by-time"],
)
def test_a_glance_outage_costs_a_lookup_only_its_bounded_retries(
    sandbox: Sandbox, control: httpx.Client, retries: int, retry_time_s: float, pauses: list[float]
) -> None:
    """openstacksdk retried every Glance call 5 times on a 503 (pauses doubling from 0.5 s) inside each of
    corral's attempts: one outage held a worker thread about 48 s. Only corral's retries are made now, as
    many as `retries` allows and none starting later than `retry_time_s` after the first attempt (the
    third retry's 5 s pause would end at 6.2 s). Slept on a clock of the test's own: no time passes."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    fresh = OpenStackProvider(
        sandbox_connection(sandbox.info),
        "test",
        retries=retries,
        retry_time_s=retry_time_s,
        sleep=sleep,
        clock=lambda: now[0],
    )
    glance_down = {"match": "openstack GET /image/v2/*", "error_rate": 1.0, "status": 503}
    control.put("/faults", json={"endpoints": [glance_down]}).raise_for_status()
    try:
        with pytest.raises(CloudTransientError, match=r"find image 'cirros': HTTP 503"):
            fresh.image_id(spec("glance-down"))
        assert slept == pauses
        assert glance_attempts(control) == 1 + len(pauses), "one request per attempt, none retried underneath"
    finally:
        fresh.close()


def listed(kind: str) -> tuple[float, float]:
    """(listings, servers listed) of this kind so far, from corral's metrics."""
    return (
        REGISTRY.get_sample_value("corral_cloud_server_listings_total", {"kind": kind}) or 0.0,
        REGISTRY.get_sample_value("corral_cloud_servers_listed_total", {"kind": kind}) or 0.0,
    )


def test_a_look_after_the_first_asks_nova_only_what_changed_and_sees_a_server_deleted_behind_its_back(
    provider: OpenStackProvider, os_conn: openstack.connection.Connection
) -> None:
    """The first listing is full (filtered by the ownership tag); the next ask Nova's `changes-since`, which
    reports a server an operator deleted as `DELETED` (its metadata and tags gone, so only its id says it was
    corral's): it leaves the listing at once, not at the next full one ten minutes on."""
    servers = [provider.create_server(spec(f"changes-{n}")) for n in range(3)]
    for server in servers:
        active(os_conn, server.id)
    full, changes = listed("full"), listed("changes")
    assert sorted(server.id for server in provider.list_servers()) == sorted(server.id for server in servers)
    assert listed("full") == (full[0] + 1, full[1] + 3)
    os_conn.compute.delete_server(servers[0].id)
    wait_until(lambda: os_conn.compute.find_server(servers[0].id) is None, what="Nova deleted the server")
    remaining = provider.list_servers()
    assert sorted(server.id for server in remaining) == sorted(server.id for server in servers[1:])
    assert listed("full") == (full[0] + 1, full[1] + 3), "no second full listing"
    assert listed("changes")[0] == changes[0] + 1
    # The deleted one as `DELETED`, and those of the two others whose `updated` falls within the overlap's ten
    # seconds before the newest (both, unless creating them took the machine that long): never the full three
    # plus the deleted one (the exact figures are tests/unit/test_server_listing.py's).
    assert 1 <= listed("changes")[1] - changes[1] <= 3
    assert [server.status for server in remaining] == ["ACTIVE", "ACTIVE"]


def test_a_cloud_that_refuses_changes_since_gets_full_listings_from_then_on(
    provider: OpenStackProvider, control: httpx.Client, os_conn: openstack.connection.Connection
) -> None:
    created = provider.create_server(spec("refused-changes"))
    active(os_conn, created.id)
    assert [server.id for server in provider.list_servers()] == [created.id]
    full = listed("full")
    # Nova (a proxy before it) answers the next listing, the `changes-since` one, with 400.
    refusal = {"match": "openstack GET /compute/v2.1/servers/detail", "error_rate": 1.0, "status": 400, "count": 1}
    control.put("/faults", json={"endpoints": [refusal]}).raise_for_status()
    try:
        assert [server.id for server in provider.list_servers()] == [created.id]
        assert listed("full")[0] == full[0] + 1, "the refused look listed in full at once"
        assert [server.id for server in provider.list_servers()] == [created.id]
    finally:
        control.put("/faults", json={"endpoints": []}).raise_for_status()
    assert listed("full")[0] == full[0] + 2, "and every look after it"


def test_a_server_deleted_before_it_was_scheduled_leaves_the_listing_though_nova_never_reports_it(
    provider: OpenStackProvider, sandbox: Sandbox, control: httpx.Client, os_conn: openstack.connection.Connection
) -> None:
    """Deleted while still a build request, a server leaves no row for `changes-since` to report `DELETED`
    (ministack does the same): the look after corral's delete asks Nova after it, and its 404 takes it out."""
    kept = provider.create_server(spec("scheduled"))
    active(os_conn, kept.id)
    assert [server.id for server in provider.list_servers()] == [kept.id]
    control.put("/timings", json={"schedule_delay": 30.0}).raise_for_status()
    try:
        doomed = provider.create_server(spec("never-scheduled"))
        provider.delete_server(doomed.id)
        wait_until(lambda: os_conn.compute.find_server(doomed.id) is None, what="Nova deleted the build request")
        full = listed("full")
        assert [server.id for server in provider.list_servers()] == [kept.id]
        assert listed("full") == full, "found out without a full listing"
    finally:
        control.put("/timings", json={"schedule_delay": 0.0}).raise_for_status()


def test_the_hot_calls_read_the_proxy_environment_once_per_address_not_once_a_request(
    provider: OpenStackProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests walks the environment for proxies on every request a plain session sends (an eighth of a
    create's or delete's CPU, `corral/cloud/environment_once.py`). The provider's session does it once per
    address: counted, so a provider whose session reads it per request again fails here."""
    reads = environment_reads(monkeypatch)

    def one_of_each(n: int) -> None:
        server = provider.create_server(spec(f"{n:010d}"))
        provider.list_servers()
        provider.delete_server(server.id)

    one_of_each(0)
    assert reads, "the first calls read the environment for their addresses"
    reads.clear()
    for n in range(1, 6):
        one_of_each(n)
    assert reads == [], "5 more creates, listings and deletes read it no more"


def test_the_hot_calls_read_the_service_catalog_once_not_once_a_request(
    provider: OpenStackProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keystoneauth works an endpoint out of the catalog on every request made without one (a fifth of a raw
    request's CPU, `corral/cloud/raw_service.py`). Creates, deletes, listings and quota readings ask for the
    endpoint once per service, whatever their number: counted, so a call sent the old way fails here."""
    lookups: list[str] = []
    original = ServiceCatalog.get_endpoints_data

    def counted(catalog: ServiceCatalog, *args: Any, **kwargs: Any) -> Any:
        lookups.append(str(kwargs.get("service_type") or (args[0] if args else "")))
        return original(catalog, *args, **kwargs)

    monkeypatch.setattr(ServiceCatalog, "get_endpoints_data", counted)

    def one_of_each(n: int) -> None:
        server = provider.create_server(spec(f"{n:010d}"))
        provider.list_servers()
        provider.headroom(volumes=True)
        provider.delete_server(server.id)

    one_of_each(0)  # the first calls look each endpoint up, and the names up (image, flavor, network; then kept)
    assert {"compute", "image"} <= set(lookups)
    lookups.clear()
    for n in range(1, 6):
        one_of_each(n)
    assert lookups == [], "5 more creates, listings, quota readings and deletes looked nothing up"
