"""A server made with every pool option the cloud supports, observed option by option in Nova and Cinder.

The pool's declaration is only worth something if each option reaches the server: a security group that
is silently dropped or a volume that is never attached would show up first as a broken CI job.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from corral.cloud.openstack import OpenStackProvider, ownership_tag
from corral.cloud.provider import CloudServer, ServerSpec
from corral.config import VolumeConfig
from tests.live.support import Figures, LiveCloud

USER_DATA = "#cloud-config\nruncmd:\n  - echo corral-live\n"


@dataclass(frozen=True)
class Made:
    spec: ServerSpec
    created: CloudServer
    server: Any
    """As Nova shows it once ACTIVE."""


@pytest.fixture(scope="module")
def full(live: LiveCloud, provider: OpenStackProvider, request: pytest.FixtureRequest) -> Iterator[Made]:
    """One server with every option; deleted at the end of the module to keep room under the quota."""
    volumes: dict[str, Any] = {}
    if live.has_volumes:
        volumes = {
            "boot_volume_gb": 1,
            "boot_volume_type": live.volume_type,
            "volumes": (VolumeConfig(name="scratch", size_gb=1, type=live.volume_type),),
        }
    spec = live.spec(
        "full",
        security_groups=(live.security_group,),
        key_name=live.key_name,
        availability_zone=live.availability_zone,
        config_drive=True,
        metadata={"team": "ci"},
        user_data=USER_DATA,
        **volumes,
    )
    started = time.monotonic()
    created = provider.create_server(spec)
    server = live.wait_status(created.id, "ACTIVE", "ERROR")
    figures: Figures = request.getfixturevalue("figures")
    label = "boot volume + 1 extra volume" if live.has_volumes else "image boot, all non-volume options"
    figures.record(f"seconds from create request to ACTIVE ({label})", time.monotonic() - started)
    assert server.status == "ACTIVE", f"the server went to {server.status}: {server.fault}"
    yield Made(spec, created, server)
    live.observer.compute.delete_server(created.id, ignore_missing=True)
    live.wait_gone({created.id})


def test_create_answers_with_the_new_servers_identity(full: Made) -> None:
    assert full.created.id == full.server.id
    assert (full.created.pool, full.created.runner_id) == ("live", "full")
    assert full.created.status in ("BUILD", "ACTIVE")


def test_flavor_network_and_security_group_reach_the_server(live: LiveCloud, full: Made) -> None:
    server = full.server
    assert server.flavor["original_name"] == live.flavor
    assert list(server.addresses) == [live.network_name], "the server should have a port on the pool's network only"
    assert [group["name"] for group in server.security_groups] == [live.security_group_name]


def test_key_pair_zone_and_config_drive_reach_the_server(live: LiveCloud, full: Made) -> None:
    server = full.server
    assert server.key_name == live.key_name
    assert server.availability_zone == live.availability_zone
    assert str(server.has_config_drive).lower() == "true"


def test_metadata_and_ownership_tag_reach_the_server(live: LiveCloud, provider: OpenStackProvider, full: Made) -> None:
    assert full.server.metadata == full.spec.metadata
    assert full.server.metadata["team"] == "ci", "the pool's own metadata should travel with corral's"
    if provider.supports_tags:
        assert full.server.tags == [ownership_tag(live.installation)]


def test_user_data_reaches_the_server_intact(full: Made) -> None:
    shown = full.server.user_data
    if shown is None:
        pytest.skip("this account may not read user data back (needs the admin view of the server)")
    assert base64.b64decode(shown).decode() == USER_DATA


def _attached_volumes(live: LiveCloud, made: Made) -> tuple[list[Any], dict[str, Any]]:
    """Nova's attachments of the server, and Cinder's view of each attached volume by id."""
    attachments = list(live.observer.compute.volume_attachments(made.server))
    in_cinder = {volume.id: volume for volume in live.observer.block_storage.volumes()}
    return attachments, {a.volume_id: in_cinder[a.volume_id] for a in attachments if a.volume_id in in_cinder}


def test_boot_volume_is_made_from_the_image_and_attached(live: LiveCloud, full: Made) -> None:
    if not live.has_volumes:
        pytest.skip("the cloud has no block-storage service")
    image = live.observer.image.find_image(live.image, ignore_missing=False)
    _, volumes = _attached_volumes(live, full)
    boot = [volume for volume in volumes.values() if volume.is_bootable]
    assert len(boot) == 1, f"expected one bootable volume among {list(volumes)}"
    volume = boot[0]
    assert volume.status == "in-use"
    assert volume.size == 1
    assert volume.volume_type == live.volume_type
    assert volume.volume_image_metadata["image_id"] == image.id
    assert [a["server_id"] for a in volume.attachments] == [full.server.id]


def test_extra_volume_is_blank_tagged_attached_and_listed_in_cinder(live: LiveCloud, full: Made) -> None:
    if not live.has_volumes:
        pytest.skip("the cloud has no block-storage service")
    attachments, volumes = _attached_volumes(live, full)
    assert len(attachments) == 2, "the boot volume and the one extra volume"
    assert set(volumes) == {a.volume_id for a in attachments}, "every attached volume should be listed in Cinder"
    assert all(a.delete_on_termination for a in attachments), "both must go with the server"
    extra = [a for a in attachments if not volumes[a.volume_id].is_bootable]
    assert [a.tag for a in extra] == ["scratch"], "the device tag lets the guest find the volume by name"
    volume = volumes[extra[0].volume_id]
    assert volume.status == "in-use"
    assert volume.size == 1
    assert volume.volume_type == live.volume_type
    assert not volume.volume_image_metadata, "an extra volume starts blank"


def test_owned_server_is_listed_with_its_pool_and_runner(provider: OpenStackProvider, full: Made) -> None:
    listed = {server.id: server for server in provider.list_servers()}
    assert full.server.id in listed
    server = listed[full.server.id]
    assert (server.name, server.pool, server.runner_id) == (full.spec.name, "live", "full")
    assert server.status == "ACTIVE"
    assert not server.is_error and not server.is_stopped
    assert server.created_at is not None


def test_extra_volumes_without_a_boot_volume_boot_the_image_from_its_local_disk(
    live: LiveCloud, provider: OpenStackProvider, discard: list[str]
) -> None:
    """Nova refuses mappings with no boot device: corral maps the image's local disk at boot index 0."""
    if not live.has_volumes:
        pytest.skip("the cloud has no block-storage service")
    spec = live.spec("extra-only", volumes=(VolumeConfig(name="scratch", size_gb=1, type=live.volume_type),))
    created = provider.create_server(spec)
    discard.append(created.id)
    server = live.wait_status(created.id, "ACTIVE", "ERROR")
    assert server.status == "ACTIVE", f"the server went to {server.status}: {server.fault}"
    assert server.image.id == live.observer.image.find_image(live.image, ignore_missing=False).id
    attachments, volumes = _attached_volumes(live, Made(spec, created, server))
    assert [a.tag for a in attachments] == ["scratch"]
    assert attachments[0].delete_on_termination
    volume = volumes[attachments[0].volume_id]
    assert (volume.size, volume.volume_type, volume.is_bootable) == (1, live.volume_type, False)


def test_the_quota_headroom_and_a_servers_cost_are_read_as_nova_and_cinder_count_them(
    live: LiveCloud, provider: OpenStackProvider, full: Made
) -> None:
    """What quota-aware planning reads: Nova's (and Cinder's) limits and Neutron's port quota less usage, and
    a pool server's cost."""
    headroom = provider.headroom(volumes=live.has_volumes)
    absolute = live.observer.compute.get("/limits").json()["limits"]["absolute"]
    if absolute["maxTotalInstances"] != -1:
        assert headroom.instances == max(0, absolute["maxTotalInstances"] - absolute["totalInstancesUsed"])
        assert absolute["totalInstancesUsed"] >= 1, "the server made for this module counts"
    if absolute["maxTotalCores"] != -1:
        assert headroom.cores == max(0, absolute["maxTotalCores"] - absolute["totalCoresUsed"])
    project = live.observer.current_project_id
    assert project is not None
    ports = live.observer.network.get_quota(project, details=True).ports
    if ports["limit"] != -1:
        assert headroom.ports == max(0, ports["limit"] - ports["used"] - ports.get("reserved", 0))
    flavor = live.observer.compute.find_flavor(live.flavor, ignore_missing=False)
    cost = provider.server_cost(full.spec)
    assert (cost.instances, cost.cores, cost.ram_mb) == (1, flavor.vcpus, flavor.ram)
    assert cost.ports == max(len(full.spec.networks), 1), "one port per network"
    if live.has_volumes:
        assert (cost.volumes, cost.gigabytes) == (2, 2), "a 1 GB boot volume and a 1 GB extra one"
        assert headroom.volumes is None or headroom.volumes >= 0
