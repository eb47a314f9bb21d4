"""What corral learns when the cloud says no: a refusal it must not retry, an out-of-quota it must wait out,
or a server that Nova accepted and then put in ERROR with a fault a person can read (or, when creates raced
past the quota, with a quota fault corral reads as the quota)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from openstack import exceptions as os_exceptions

from corral.cloud.openstack import OpenStackProvider, connect
from corral.cloud.provider import CloudQuotaExceeded, CloudRequestRejected, CloudServer, ServerSpec
from corral.config import CloudConfig, VolumeConfig
from corral.model import Reason, RunnerState
from corral.policy import RunnerFacts, Verdict, judge_runner
from tests.live.support import ApiCounter, LiveCloud, env, exhausted_quota, poll


@pytest.mark.parametrize("option", ["image", "flavor", "network"])
def test_unknown_name_is_rejected_before_nova_is_asked(
    live: LiveCloud, provider: OpenStackProvider, api: ApiCounter, option: str
) -> None:
    missing = f"corral-live-missing-{uuid.uuid4().hex[:6]}"
    option_value: dict[str, Any] = {"networks": (missing,)} if option == "network" else {option: missing}
    spec = live.spec(f"unknown-{option}", **option_value)
    with api.counting() as made, pytest.raises(CloudRequestRejected) as refused:
        provider.create_server(spec)
    assert f"{option} {missing!r} does not exist" in str(refused.value)
    assert not [r for r in made if r.method == "POST"], f"no server create should be sent: {api.describe(made)}"


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        ("security_groups", "security_group"),
        ("key_name", "key_name"),
        ("availability_zone", "availability zone"),
    ],
)
def test_nova_refusal_is_rejected_with_novas_reason_and_makes_no_server(
    live: LiveCloud, provider: OpenStackProvider, option: str, reason: str
) -> None:
    missing = f"corral-live-missing-{uuid.uuid4().hex[:6]}"
    value: dict[str, Any] = {option: (missing,) if option == "security_groups" else missing}
    spec = live.spec(f"refused-{option.replace('_', '-')}", **value)
    with pytest.raises(CloudRequestRejected) as refused:
        provider.create_server(spec)
    assert "HTTP 400" in str(refused.value)
    assert reason in str(refused.value), "the refusal should carry Nova's reason"
    assert spec.metadata["corral-runner"] not in {server.runner_id for server in provider.list_servers()}


def test_block_device_refusal_is_rejected_with_novas_message(live: LiveCloud, provider: OpenStackProvider) -> None:
    """A pool whose every create Nova refuses (here: an extra volume of a type Cinder lacks) must reach the
    engine as a rejection with Nova's words, not as a transient error to retry for ever."""
    if not live.has_volumes:
        pytest.skip("the cloud has no block-storage service")
    missing = f"corral-live-missing-{uuid.uuid4().hex[:6]}"
    spec = live.spec("refused-volume-type", volumes=(VolumeConfig(name="scratch", size_gb=1, type=missing),))
    with pytest.raises(CloudRequestRejected) as refused:
        provider.create_server(spec)
    assert f"HTTP 400: Volume type {missing} could not be found." in str(refused.value)
    assert spec.metadata["corral-runner"] not in {server.runner_id for server in provider.list_servers()}


def test_flavor_too_big_for_any_host_ends_as_an_error_server_with_its_fault(
    live: LiveCloud, provider: OpenStackProvider, discard: list[str]
) -> None:
    name = f"corral-live-{live.run}-huge"
    try:
        flavor = live.observer.compute.create_flavor(name=name, ram=64, vcpus=1, disk=10_000_000)
    except os_exceptions.ForbiddenException:
        pytest.skip("creating a flavor needs an admin account")
    live.created_flavors.append(flavor.id)
    spec = live.spec("huge", flavor=name)
    try:
        created = provider.create_server(spec)
    except CloudRequestRejected as refused:  # a cloud may refuse up front; ministack's Nova schedules first
        assert name in str(refused) or "flavor" in str(refused).lower()
        return
    discard.append(created.id)

    def errored() -> CloudServer | None:
        return next((s for s in provider.list_servers() if s.id == created.id and s.status != "BUILD"), None)

    server = poll(errored, timeout=live.timeout, what="the oversized server to leave BUILD", interval=0.25)
    assert server.is_error, f"expected ERROR, got {server}"
    assert server.fault and "no valid host" in server.fault.lower(), server.fault
    assert server.runner_id == "huge", "an ERROR server still belongs to its runner, so corral can delete it"


def test_exhausted_instance_quota_is_quota_exceeded(live: LiveCloud, provider: OpenStackProvider) -> None:
    spec = live.spec("over-instances")
    with exhausted_quota(live, "compute", "instances"), pytest.raises(CloudQuotaExceeded) as exhausted:
        provider.create_server(spec)
    assert "instances" in str(exhausted.value)
    assert spec.metadata["corral-runner"] not in {server.runner_id for server in provider.list_servers()}


def test_exhausted_port_quota_is_quota_exceeded(live: LiveCloud, provider: OpenStackProvider) -> None:
    """Nova checks Neutron's port quota itself and words it "Maximum number of ports exceeded", no "quota"."""
    with exhausted_quota(live, "network", "ports"), pytest.raises(CloudQuotaExceeded) as exhausted:
        provider.create_server(live.spec("over-ports"))
    assert "ports" in str(exhausted.value)


def test_check_pool_names_every_unknown_resource(live: LiveCloud, provider: OpenStackProvider) -> None:
    missing = f"corral-live-missing-{uuid.uuid4().hex[:6]}"
    volume_type: dict[str, Any] = {"boot_volume_gb": 1, "boot_volume_type": missing} if live.has_volumes else {}
    spec = live.spec(
        "check",
        image=missing,
        flavor=missing,
        networks=(live.network, missing),
        security_groups=(live.security_group, missing),
        key_name=missing,
        availability_zone=missing,
        **volume_type,
    )
    problems = provider.check_pool(spec)
    kinds = ["image", "flavor", "network", "security group", "key pair", "availability zone"]
    kinds += ["volume type"] if live.has_volumes else []
    for kind in kinds:
        assert any(f"{kind} {missing!r}" in problem for problem in problems), f"{kind} not reported: {problems}"
    assert len(problems) == len(kinds), f"only the unknown names are problems: {problems}"


def test_check_pool_accepts_a_pool_the_cloud_can_serve(live: LiveCloud, provider: OpenStackProvider) -> None:
    volumes: dict[str, Any] = {"boot_volume_gb": 1, "boot_volume_type": live.volume_type} if live.has_volumes else {}
    spec = live.spec(
        "check",
        security_groups=(live.security_group,),
        key_name=live.key_name,
        availability_zone=live.availability_zone,
        **volumes,
    )
    assert provider.check_pool(spec) == []


def test_image_rebuilt_under_the_same_name_costs_no_failed_create(
    live: LiveCloud, provider: OpenStackProvider, discard: list[str]
) -> None:
    """The usual rotation: upload the rebuilt image under the same name, then delete the old one. The
    provider's name cache still holds the old id when Nova refuses it; the create must still succeed."""
    name = f"corral-live-{live.run}-rotating"

    def upload() -> str:
        live.after_last_upload()  # else both uploads may share a second, and "newest" is a coin toss
        image = live.observer.image.create_image(
            name=name, data=b"\0" * 4096, disk_format="raw", container_format="bare", allow_duplicates=True
        )
        live.created_images.append(image.id)
        poll(lambda: live.observer.image.get_image(image.id).status == "active", timeout=60, what="image upload")
        return str(image.id)

    upload()
    first = provider.create_server(live.spec("rotate-1", image=name))
    discard.append(first.id)
    old = live.wait_status(first.id, "ACTIVE", "ERROR").image.id
    new = upload()
    fresh = live.new_provider()
    try:
        assert fresh.check_pool(live.spec("check", image=name)) == [], "two images share the name: no problem"
        overlap = fresh.create_server(live.spec("rotate-overlap", image=name))
        discard.append(overlap.id)
        assert live.wait_status(overlap.id, "ACTIVE", "ERROR").image.id == new, "the newest image should win"
    finally:
        fresh.close()
    live.observer.image.delete_image(old)
    second = provider.create_server(live.spec("rotate-2", image=name))
    discard.append(second.id)
    assert live.wait_status(second.id, "ACTIVE", "ERROR").image.id == new


QUOTA_CLOUD = "ministack-two"
"""A clouds.yaml entry for a project of its own with a quota of 3 instances (`CORRAL_LIVE_QUOTA_CLOUD`)."""
QUOTA_INSTANCES = 3
QUOTA_NETWORK = "private"
"""That project's own network (`CORRAL_LIVE_QUOTA_NETWORK`): the main project's may not be usable there."""


@pytest.fixture
def quota_provider(live: LiveCloud) -> Iterator[OpenStackProvider]:
    """A provider in the small-quota project; every server it made there is deleted when the test ends (the
    session's cleanup sees only the main project)."""
    name = env("CORRAL_LIVE_QUOTA_CLOUD", QUOTA_CLOUD)
    try:
        connection = connect(CloudConfig(name=name))
    except os_exceptions.ConfigException:
        pytest.skip(f"no clouds.yaml entry {name!r} (a project with a quota of {QUOTA_INSTANCES} instances)")
    provider = OpenStackProvider(connection, f"{live.installation}-race")
    try:
        yield provider
    finally:
        delete_as_admin(live, provider, {server.id for server in provider.list_servers()})
        provider.close()


RACE_ATTEMPTS = 5


def race(provider: OpenStackProvider, specs: list[ServerSpec], timeout: float) -> tuple[list[CloudServer], int]:
    """The specs' creates sent at once; the servers Nova accepted once out of BUILD, and how many it refused."""
    start = threading.Barrier(len(specs))

    def create(spec: ServerSpec) -> CloudServer | CloudQuotaExceeded:
        start.wait()
        try:
            return provider.create_server(spec)
        except CloudQuotaExceeded as refused:  # the quota check caught it: no race for this one
            return refused

    with ThreadPoolExecutor(len(specs)) as threads:
        answers = list(threads.map(create, specs))
    accepted = {server.id for server in answers if isinstance(server, CloudServer)}

    def settled() -> list[CloudServer] | None:
        servers = [server for server in provider.list_servers() if server.id in accepted]
        return servers if len(servers) == len(accepted) and all(s.status != "BUILD" for s in servers) else None

    servers = poll(settled, timeout=timeout, what="the accepted servers to leave BUILD", interval=0.5)
    return servers, len(specs) - len(accepted)


def delete_as_admin(live: LiveCloud, provider: OpenStackProvider, server_ids: set[str]) -> None:
    """Delete these servers of the small-quota project and wait until they are gone. As the admin: ministack's
    Neutron refuses the project's own user the delete of a server's port ("rule:delete_port is disallowed by
    policy"), which leaves the server in ERROR, holding the quota."""
    for server_id in server_ids:
        live.observer.compute.delete_server(server_id)
    poll(
        lambda: not server_ids & {server.id for server in provider.list_servers()},
        timeout=live.timeout,
        what="the race's servers gone",
        interval=0.25,
    )


def test_creates_that_race_past_the_quota_end_in_error_servers_corral_reads_as_quota(
    live: LiveCloud, quota_provider: OpenStackProvider
) -> None:
    """Nova counts a server once its conductor has scheduled it: creates sent together race past its quota
    check (202), and its recheck puts the surplus in ERROR with a quota fault ("Quota exceeded for cores,
    instances: ..."). corral reads such a server as the quota (its runner fails `cloud_quota`: the pool waits
    and spills over), not as a failed boot (which would count against the pool's image and its cloud)."""
    assert list(quota_provider.connection.compute.servers()) == [], "the small-quota project must start empty"
    network = env("CORRAL_LIVE_QUOTA_NETWORK", QUOTA_NETWORK)
    specs = [
        live.spec(f"race-{index}", installation=quota_provider.installation, networks=(network,)) for index in range(4)
    ]
    quota_provider.check_pool(specs[0])  # names resolved and cached first, so the four creates are only POSTs
    # Whether a create slips past Nova's first check is the race's to decide, not corral's: when none did (one
    # run in a few, as ministack's API served the four POSTs one after another), the accepted servers are
    # deleted and the race run again. What is asserted is how corral reads the servers that did slip past.
    refused_up_front: list[int] = []
    errors: list[CloudServer] = []
    for _ in range(RACE_ATTEMPTS):
        servers, refused = race(quota_provider, specs, live.timeout)
        active = [server for server in servers if server.status == "ACTIVE"]
        errors = [server for server in servers if server.status == "ERROR"]
        assert len(active) <= QUOTA_INSTANCES
        # A run again right after a delete may meet Placement still holding the deleted servers' room ("No
        # valid host was found"): the cloud's capacity, not the race. A run with no quota fault is run again;
        # in a run with one, a server beside it may still fail on capacity (CI saw both in one run), and only
        # the quota-faulted ones are what this test asserts on.
        errors = [server for server in errors if server.fault and server.fault.startswith("Quota exceeded for ")]
        if errors:
            break
        refused_up_front.append(refused)
        delete_as_admin(live, quota_provider, {server.id for server in servers})
    # Nova's rechecks run side by side: each may see the others counted, so more than the surplus can fail.
    assert errors, f"no create raced past the quota in {RACE_ATTEMPTS} runs (refused up front: {refused_up_front})"
    for server in errors:
        verdict = judge_runner(
            RunnerFacts(
                state=RunnerState.BOOTING,
                in_flight=False,
                observed_age_s=1.0,
                bootstrap_timeout_s=600.0,
                server_status=server.status,
                server_fault=server.fault,
            )
        )
        assert verdict == Verdict(
            RunnerState.FAILED, Reason.CLOUD_QUOTA, f"quota exceeded: server in ERROR: {server.fault}"
        )
