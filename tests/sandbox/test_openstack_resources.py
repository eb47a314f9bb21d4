"""Flavors, keypairs, zones, limits (Nova), images (Glance), networks (Neutron) and volumes (Cinder)."""

from __future__ import annotations

import httpx
import openstack
import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.openstack_support import image_id, network_id, project_id, token
from tests.waiting import wait_until

Conn = openstack.connection.Connection
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDZ5eWd1aTZ3d2x6bHZ6bHZ6bHZ6bHZ6bHZ6bHZ6bHZ6 corral@test"


def test_flavors(os_conn: Conn) -> None:
    names = [flavor.name for flavor in os_conn.compute.flavors(details=True)]
    assert names == ["m1.tiny", "m1.small", "m1.medium", "m1.large", "m1.xlarge"]
    small = os_conn.get_flavor("m1.small")
    assert small is not None
    assert (small.vcpus, small.ram, small.disk) == (1, 2048, 20)
    assert os_conn.compute.get_flavor("3").name == "m1.medium"
    assert os_conn.get_flavor("m1.huge") is None
    with pytest.raises(openstack.exceptions.NotFoundException, match=r"Flavor nope could not be found\."):
        os_conn.compute.get_flavor("nope")


def test_keypairs(os_conn: Conn) -> None:
    imported = os_conn.compute.create_keypair(name="imported", public_key=KEY)
    assert imported.fingerprint == "e7:4b:fe:d8:09:08:44:be:ec:83:35:73:3c:f9:72:ea"
    assert [kp.name for kp in os_conn.list_keypairs()] == ["imported"]
    assert os_conn.compute.get_keypair("imported").public_key == KEY
    with pytest.raises(openstack.exceptions.ConflictException, match=r"Key pair 'imported' already exists\."):
        os_conn.compute.create_keypair(name="imported", public_key=KEY)
    with pytest.raises(openstack.exceptions.BadRequestException, match="failed to generate fingerprint"):
        os_conn.compute.create_keypair(name="broken", public_key="garbage")
    os_conn.delete_keypair("imported")
    assert os_conn.get_keypair("imported") is None


def test_keypair_generation_before_2_92(sandbox: Sandbox, os_conn: Conn) -> None:
    url = f"{sandbox.info.openstack_url}/compute/v2.1/os-keypairs"
    headers = {"X-Auth-Token": token(os_conn), "OpenStack-API-Version": "compute 2.10"}
    generated = httpx.post(url, headers=headers, json={"keypair": {"name": "gen"}})
    assert generated.status_code == 201
    assert generated.json()["keypair"]["private_key"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    headers["OpenStack-API-Version"] = "compute 2.92"
    refused = httpx.post(url, headers=headers, json={"keypair": {"name": "gen2"}})
    assert refused.status_code == 400
    assert "'public_key' is a required property" in refused.json()["badRequest"]["message"]


def test_availability_zones_and_limits(os_conn: Conn) -> None:
    assert [zone.name for zone in os_conn.compute.availability_zones()] == ["nova"]
    limits = os_conn.compute.get_limits().absolute
    assert (limits.instances, limits.total_cores, limits.total_ram) == (-1, -1, -1)


def test_quota_sets_reflect_usage(sandbox: Sandbox, os_conn: Conn) -> None:
    sandbox.call(lambda: sandbox.world.cloud.set_quota(instances=5, cores=10, ram=10240))
    os_conn.compute.create_server(name="q", image_id=image_id(os_conn, "cirros"), flavor_id="2", networks="none")
    quota = os_conn.compute.get_quota_set(project_id(os_conn), usage=True)
    assert (quota.instances, quota.cores, quota.ram) == (5, 10, 10240)
    assert quota.usage["instances"] == 1 and quota.usage["ram"] == 2048


def test_images(os_conn: Conn) -> None:
    runner = os_conn.get_image("ubuntu-24.04-runner")
    assert runner is not None
    assert runner.status == "active" and runner.min_disk == 10
    assert os_conn.image.get_image(runner.id).os_distro == "ubuntu"
    assert [i.name for i in os_conn.image.images(tag="runner")] == ["ubuntu-24.04-runner"]
    assert [i.name for i in os_conn.image.images(name="cirros", status="active", visibility="public")] == ["cirros"]
    assert list(os_conn.image.images(visibility="private")) == []
    assert {i.name for i in os_conn.image.images(limit=1)} == {"cirros", "ubuntu-24.04-runner"}
    assert os_conn.get_image("no-such-image") is None


def test_glance_not_found_is_an_html_page(sandbox: Sandbox, os_conn: Conn) -> None:
    response = httpx.get(f"{sandbox.info.openstack_url}/image/v2/images/nope", headers={"X-Auth-Token": token(os_conn)})
    assert response.status_code == 404
    assert "No image found with ID nope" in response.text
    with pytest.raises(openstack.exceptions.NotFoundException):
        os_conn.image.get_image("nope")


def test_networks_subnets_and_security_groups(os_conn: Conn) -> None:
    network = os_conn.get_network("private")
    assert network is not None
    (subnet,) = os_conn.network.subnets(network_id=network.id)
    assert subnet.cidr == "10.0.0.0/16" and network.subnet_ids == [subnet.id]
    assert os_conn.network.get_subnet(subnet.id).gateway_ip == "10.0.0.1"
    assert list(os_conn.network.networks(is_router_external=True)) == []
    assert {sg.name for sg in os_conn.network.security_groups()} == {"default", "runners"}
    runners = os_conn.get_security_group("runners")
    assert runners is not None
    assert any(rule["port_range_min"] == 22 for rule in runners.security_group_rules)
    with pytest.raises(openstack.exceptions.NotFoundException, match="could not be found"):
        os_conn.network.get_network("00000000-0000-0000-0000-000000000000")


def test_neutron_rejects_unknown_filters(sandbox: Sandbox, os_conn: Conn) -> None:
    response = httpx.get(
        f"{sandbox.info.openstack_url}/network/v2.0/ports?bogus=1", headers={"X-Auth-Token": token(os_conn)}
    )
    assert response.json() == {
        "NeutronError": {
            "type": "HTTPBadRequest",
            "message": "['bogus'] is invalid attribute for filtering",
            "detail": "",
        }
    }


def test_server_on_a_precreated_port_keeps_the_port(os_conn: Conn) -> None:
    port = os_conn.network.create_port(network_id=network_id(os_conn, "private"), name="fixed")
    server = os_conn.compute.create_server(
        name="on-port", image_id=image_id(os_conn, "cirros"), flavor_id="1", networks=[{"port": port.id}]
    )
    assert os_conn.network.get_port(port.id).device_id == server.id
    with pytest.raises(openstack.exceptions.ConflictException, match="still in use"):
        os_conn.compute.create_server(
            name="again", image_id=image_id(os_conn, "cirros"), flavor_id="1", networks=[{"port": port.id}]
        )
    os_conn.compute.delete_server(server)
    os_conn.compute.wait_for_delete(server, wait=10, interval=0.05)
    assert os_conn.network.get_port(port.id).device_id == ""
    os_conn.network.delete_port(port)
    assert os_conn.network.find_port(port.id) is None


def test_volume_lifecycle(os_conn: Conn) -> None:
    volume = os_conn.block_storage.create_volume(size=3, name="data", volume_type="ssd")
    assert volume.status == "creating"
    volume = os_conn.block_storage.wait_for_status(volume, "available", wait=10, interval=0.05)
    assert (volume.size, volume.volume_type) == (3, "ssd")
    assert [v.name for v in os_conn.block_storage.volumes(name="data")] == ["data"]
    assert [v.id for v in os_conn.search_volumes("data")] == [volume.id]
    os_conn.block_storage.delete_volume(volume.id)
    os_conn.block_storage.wait_for_delete(volume, wait=10, interval=0.05)
    assert list(os_conn.block_storage.volumes()) == []


def test_cloud_layer_volume_and_types(os_conn: Conn) -> None:
    volume = os_conn.create_volume(size=1, name="cloud-vol", wait=True, timeout=10)
    assert volume.status == "available"
    assert {t.name for t in os_conn.block_storage.types()} == {"__DEFAULT__", "ssd"}
    assert os_conn.delete_volume("cloud-vol", wait=True, timeout=10)


def test_volume_quota_is_cinders_413(sandbox: Sandbox, os_conn: Conn) -> None:
    sandbox.call(lambda: sandbox.world.cloud.set_quota(volumes=1))
    os_conn.block_storage.create_volume(size=1)
    with pytest.raises(openstack.exceptions.HttpException) as caught:
        os_conn.block_storage.create_volume(size=1)
    assert caught.value.status_code == 413
    assert "VolumeLimitExceeded: Maximum number of volumes allowed (1) exceeded for quota 'volumes'." in str(
        caught.value
    )
    limits = os_conn.block_storage.get_limits().absolute
    assert (limits.max_total_volumes, limits.total_volumes_used) == (1, 1)


def test_attached_volume_cannot_be_deleted(os_conn: Conn) -> None:
    volume = os_conn.block_storage.create_volume(size=1, name="attached")
    os_conn.block_storage.wait_for_status(volume, "available", wait=10, interval=0.05)
    mapping = [
        {"boot_index": 0, "uuid": image_id(os_conn, "cirros"), "source_type": "image", "destination_type": "local"},
        {"boot_index": -1, "uuid": volume.id, "source_type": "volume", "destination_type": "volume"},
    ]
    server = os_conn.compute.create_server(
        name="holder",
        image_id=image_id(os_conn, "cirros"),
        flavor_id="1",
        networks="none",
        block_device_mapping=mapping,
    )
    wait_until(lambda: os_conn.block_storage.get_volume(volume.id).status == "in-use", what="in-use")
    with pytest.raises(openstack.exceptions.BadRequestException, match="Invalid volume"):
        os_conn.block_storage.delete_volume(volume.id)
    assert os_conn.compute.get_server(server.id).attached_volumes[0]["id"] == volume.id
