"""What corral learns when the cloud says no: a refusal it must not retry, an out-of-quota it must wait out,
or a server that Nova accepted and then put in ERROR with a fault a person can read."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from openstack import exceptions as os_exceptions

from corral.cloud.openstack import OpenStackProvider
from corral.cloud.provider import CloudQuotaExceeded, CloudRequestRejected, CloudServer
from corral.config import VolumeConfig
from tests.live.support import ApiCounter, LiveCloud, exhausted_quota, poll


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
