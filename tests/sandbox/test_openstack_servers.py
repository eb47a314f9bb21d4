"""Nova servers through openstacksdk's cloud layer and proxy layer, as corral drives them."""

from __future__ import annotations

import base64

import httpx
import openstack
import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.openstack_support import compute_headers, image_id, network_id, wait_for_status, wait_gone
from tests.waiting import wait_until

Conn = openstack.connection.Connection


def boot(conn: Conn, name: str, **extra: object) -> openstack.compute.v2.server.Server:
    flavor = conn.get_flavor("m1.small")
    assert flavor is not None
    return conn.compute.create_server(
        name=name,
        image_id=image_id(conn, "ubuntu-24.04-runner"),
        flavor_id=flavor.id,
        networks=[{"uuid": network_id(conn, "private")}],
        **extra,
    )


def test_cloud_layer_create_wait_and_delete(sandbox: Sandbox, os_conn: Conn) -> None:
    server = os_conn.create_server(
        "runner-a",
        image="ubuntu-24.04-runner",
        flavor="m1.small",
        network="private",
        userdata="#!/bin/sh\necho hi",
        meta={"corral:pool": "small"},
        key_name=None,
        wait=True,
        timeout=30,
    )
    assert server.status == "ACTIVE"
    assert server.metadata == {"corral:pool": "small"}
    assert server.private_v4.startswith("10.0.")
    ports = list(os_conn.network.ports(device_id=server.id))
    assert [port.fixed_ips[0]["ip_address"] for port in ports] == [server.private_v4]
    assert os_conn.delete_server(server.id, wait=True, timeout=30) is True
    assert os_conn.get_server(server.id) is None
    assert list(os_conn.network.ports(device_id=server.id)) == []
    cloud = sandbox.call(sandbox.world.cloud.snapshot)
    assert (cloud["servers_created"], cloud["servers_deleted"], cloud["ports"]) == (1, 1, 0)


def test_proxy_layer_create_with_tags_metadata_and_user_data(sandbox: Sandbox, os_conn: Conn) -> None:
    user_data = base64.b64encode(b"#cloud-config\n{}").decode()
    created = boot(
        os_conn,
        "runner-b",
        tags=["corral", "pool-small"],
        metadata={"corral:runner": "7"},
        user_data=user_data,
        security_groups=[{"name": "runners"}],
        config_drive=True,
    )
    assert created.admin_password
    server = os_conn.compute.wait_for_server(created, wait=15, interval=0.05)
    assert server.status == "ACTIVE" and server.vm_state == "active" and server.power_state == 1
    assert server.tags == ["corral", "pool-small"]
    assert server.metadata == {"corral:runner": "7"}
    assert server.security_groups == [{"name": "runners"}]
    assert server.has_config_drive == "True"
    assert server.launched_at is not None


def test_boot_reaches_the_world_with_decoded_user_data(sandbox: Sandbox, os_conn: Conn) -> None:
    boot(os_conn, "runner-c", user_data=base64.b64encode(b"no jit config here").decode())
    wait_until(lambda: sandbox.world.stats.counters["servers_without_runner"] == 1, what="server_active called")


def test_boot_failure_goes_to_error_with_a_fault(sandbox: Sandbox, os_conn: Conn) -> None:
    sandbox.world.faults.configure({"world": {"boot_failure_rate": 1.0}})
    server = boot(os_conn, "doomed")
    wait_for_status(os_conn, server.id, "ERROR")
    failed = os_conn.compute.get_server(server.id)
    assert failed.fault["code"] == 500
    assert failed.fault["message"] == "No valid host was found. "
    assert failed.addresses == {}
    assert list(os_conn.network.ports(device_id=server.id)) == []
    with pytest.raises(openstack.exceptions.SDKException, match="No valid host"):
        os_conn.create_server("doomed-too", image="cirros", flavor="m1.tiny", network="private", wait=True, timeout=15)
    assert sandbox.call(sandbox.world.cloud.snapshot)["servers_errored"] == 2


def test_power_off_shows_shutoff(sandbox: Sandbox, os_conn: Conn) -> None:
    server = os_conn.compute.wait_for_server(boot(os_conn, "finisher"), wait=15, interval=0.05)
    sandbox.call(lambda: sandbox.world.cloud.power_off(server.id))
    stopped = os_conn.compute.get_server(server.id)
    assert (stopped.status, stopped.vm_state, stopped.power_state, stopped.task_state) == (
        "SHUTOFF",
        "stopped",
        4,
        None,
    )
    os_conn.compute.start_server(server)
    wait_for_status(os_conn, server.id, "ACTIVE")


def test_instance_quota_is_novas_403(sandbox: Sandbox, os_conn: Conn) -> None:
    sandbox.call(lambda: sandbox.world.cloud.set_quota(instances=1))
    boot(os_conn, "first")
    with pytest.raises(openstack.exceptions.ForbiddenException) as caught:
        boot(os_conn, "second")
    assert caught.value.details == "Quota exceeded for instances: Requested 1, but already used 1 of 1 instances"
    limits = os_conn.compute.get_limits().absolute
    assert (limits.instances, limits.instances_used) == (1, 1)


def test_core_and_ram_quota_names_both(sandbox: Sandbox, os_conn: Conn) -> None:
    sandbox.call(lambda: sandbox.world.cloud.set_quota(cores=1, ram=4096))
    boot(os_conn, "fits")
    with pytest.raises(openstack.exceptions.ForbiddenException) as caught:
        boot(os_conn, "too-big")
    assert caught.value.details == ("Quota exceeded for cores: Requested 1, but already used 1 of 1 cores")
    assert sandbox.call(sandbox.world.cloud.quota_view)["cores"] == {"limit": 1, "in_use": 1}


def test_creates_that_race_past_the_quota_are_accepted_and_the_surplus_goes_to_error(
    sandbox: Sandbox, os_conn: Conn, control: httpx.Client
) -> None:
    """Nova counts a server once its conductor has scheduled it: creates accepted before then race past the
    API's quota check (202), and the conductor's recheck puts the surplus in ERROR with a 413 fault. Seen on
    ministack's Nova 34: 6 quick creates against a quota of 3 instances and 3 cores, each server 1 core, gave 3
    servers that boot and 3 in ERROR, each fault as below; all 6 counted in the usage until deleted."""
    cores = int(os_conn.get_flavor("m1.small").vcpus)  # type: ignore[union-attr]
    sandbox.call(lambda: sandbox.world.cloud.set_quota(instances=3, cores=3 * cores))
    control.put("/timings", json={"schedule_delay": 3600}).raise_for_status()  # scheduled below, not by then
    servers = [boot(os_conn, f"race-{index}") for index in range(4)]
    assert os_conn.compute.get_limits().absolute.instances_used == 0, "none scheduled, none counted yet"
    sandbox.call(sandbox.world.cloud.schedule_pending)
    for server in servers[:3]:
        wait_for_status(os_conn, server.id, "ACTIVE")
    late = os_conn.compute.get_server(servers[3].id)
    assert late.status == "ERROR"
    assert late.fault["code"] == 413
    assert late.fault["message"] == (
        f"Quota exceeded for cores, instances: Requested {cores}, 1, but already used {3 * cores}, 3 of "
        f"{3 * cores}, 3 cores, instances"
    )
    assert os_conn.compute.get_limits().absolute.instances_used == 4, "the server in ERROR counts until deleted"
    os_conn.compute.delete_server(late.id)
    wait_gone(os_conn, late.id)
    assert os_conn.compute.get_limits().absolute.instances_used == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"user_data": "not base64!!"}, "'not base64!!' is not a 'base64'"),
        ({"user_data": base64.b64encode(b"a" * 70000).decode()}, "is too long"),
        ({"metadata": {"k": "v" * 256}}, "Invalid input for field/attribute k."),
        ({"metadata": {"bad/key": "v"}}, "does not match any of the regexes"),
        ({"tags": ["a/b"]}, "'a/b' does not match '^[^,/]*$'"),
        ({"key_name": "missing"}, "Invalid key_name provided."),
        ({"availability_zone": "elsewhere"}, "The requested availability zone is not available"),
        ({"security_groups": [{"name": "nope"}]}, "Unable to find security_group with name or id 'nope'"),
    ],
)
def test_invalid_create_requests_are_novas_400(os_conn: Conn, extra: dict[str, object], message: str) -> None:
    with pytest.raises(openstack.exceptions.BadRequestException) as caught:
        boot(os_conn, "invalid", **extra)
    assert message in str(caught.value.details)


def test_too_many_metadata_items_is_403(os_conn: Conn) -> None:
    with pytest.raises(openstack.exceptions.ForbiddenException, match="Maximum number of metadata items"):
        boot(os_conn, "meta", metadata={str(i): "v" for i in range(129)})


def test_list_filters(os_conn: Conn) -> None:
    a = boot(os_conn, "pool-a-1", tags=["corral", "pool-a"])
    b = boot(os_conn, "pool-b-1", tags=["corral", "pool-b"])
    boot(os_conn, "other")
    for server in (a, b):
        os_conn.compute.wait_for_server(server, wait=15, interval=0.05)
    assert {s.name for s in os_conn.compute.servers(name="^pool-")} == {"pool-a-1", "pool-b-1"}
    assert [s.name for s in os_conn.compute.servers(details=True, tags="corral,pool-b")] == ["pool-b-1"]
    assert {s.name for s in os_conn.compute.servers(any_tags="pool-a,pool-b")} == {"pool-a-1", "pool-b-1"}
    assert {s.name for s in os_conn.compute.servers(not_tags="corral")} == {"other"}
    assert len(list(os_conn.compute.servers(status="ACTIVE", all_projects=True))) >= 2
    assert [s.name for s in os_conn.search_servers("pool-a-1")] == ["pool-a-1"]
    assert {s.name for s in os_conn.list_servers()} == {"pool-a-1", "pool-b-1", "other"}
    future = "2999-01-01T00:00:00Z"
    assert list(os_conn.compute.servers(changes_since=future)) == []


def test_bad_list_parameters(sandbox: Sandbox, os_conn: Conn) -> None:
    url = f"{sandbox.info.openstack_url}/compute/v2.1/servers/detail"
    cases = {
        "status=BOGUS": "Invalid status value",
        "marker=nope": "marker [nope] not found",
        "limit=-1": "'-1' does not match '^[0-9]*$'",
        "changes-since=garbage": "'garbage' is not a 'date-time'",
        "foo=bar": "'foo' does not match any of the regexes: '^_'",
    }
    for query, message in cases.items():
        response = httpx.get(f"{url}?{query}", headers=compute_headers(os_conn, "2.100"))
        assert response.status_code == 400, query
        assert message in response.json()["badRequest"]["message"]
    old = httpx.get(f"{url}?foo=bar", headers=compute_headers(os_conn, "2.74"))
    assert old.status_code == 200


def test_pagination_follows_servers_links(sandbox: Sandbox, os_conn: Conn) -> None:
    created = [boot(os_conn, f"paged-{i}").id for i in range(5)]
    response = httpx.get(
        f"{sandbox.info.openstack_url}/compute/v2.1/servers/detail?limit=2", headers=compute_headers(os_conn)
    )
    page = response.json()
    assert [s["id"] for s in page["servers"]] == created[::-1][:2]
    assert page["servers_links"][0]["rel"] == "next"
    assert f"marker={created[3]}" in page["servers_links"][0]["href"]
    listed = [s.id for s in os_conn.compute.servers(details=True, limit=2)]
    assert listed == created[::-1]


def test_metadata_operations(os_conn: Conn) -> None:
    server = boot(os_conn, "meta", metadata={"a": "1"})
    os_conn.compute.set_server_metadata(server, b="2")
    assert os_conn.compute.get_server_metadata(server).metadata == {"a": "1", "b": "2"}
    os_conn.compute.delete_server_metadata(server, ["a"])
    assert os_conn.compute.get_server(server.id).metadata == {"b": "2"}
    os_conn.set_server_metadata(server.id, {"c": "3"})
    os_conn.delete_server_metadata(server.id, ["b"])
    assert os_conn.compute.get_server(server.id).metadata == {"c": "3"}
    with pytest.raises(openstack.exceptions.NotFoundException, match="Metadata item was not found"):
        os_conn.compute.delete_server_metadata(server, ["zz"])


def test_tag_operations(sandbox: Sandbox, os_conn: Conn) -> None:
    server = boot(os_conn, "tagged", tags=["one"])
    server.add_tag(os_conn.compute, "two")
    assert os_conn.compute.get_server(server.id).tags == ["one", "two"]
    assert server.check_tag(os_conn.compute, "two") is not None
    server.remove_tag(os_conn.compute, "one")
    server.set_tags(os_conn.compute, ["x", "y"])
    assert os_conn.compute.get_server(server.id).tags == ["x", "y"]
    server.remove_all_tags(os_conn.compute)
    assert os_conn.compute.get_server(server.id).tags == []
    url = f"{sandbox.info.openstack_url}/compute/v2.1/servers/{server.id}/tags"
    assert httpx.get(url, headers=compute_headers(os_conn, "2.25")).status_code == 404
    missing = httpx.get(f"{url}/nope", headers=compute_headers(os_conn, "2.26"))
    assert missing.json()["itemNotFound"]["message"] == f"Server {server.id} has no tag 'nope'"


INVALID_NAME = (
    "An invalid 'name' value was provided. The name must be: printable characters. "
    "Can not start or end with whitespace."
)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Invalid input for field/attribute name. Value: . '' should be non-empty"),
        (" x", INVALID_NAME),
        ("x ", INVALID_NAME),
        ("x" * 256, "is too long"),
    ],
)
def test_invalid_names_are_refused_on_create_and_rename_as_nova_does(
    sandbox: Sandbox, os_conn: Conn, name: str, message: str
) -> None:
    """Nova's `name` schema (jsonschema 4.21+ wording) guards both create and rename; a rename that
    Nova refuses must not change the server (found by tests/live/test_differential.py)."""
    with pytest.raises(openstack.exceptions.BadRequestException) as caught:
        boot(os_conn, name)
    assert message in str(caught.value.details)
    server = boot(os_conn, "named")
    url = f"{sandbox.info.openstack_url}/compute/v2.1/servers/{server.id}"
    response = httpx.put(url, json={"server": {"name": name}}, headers=compute_headers(os_conn))
    assert response.status_code == 400
    assert message in response.json()["badRequest"]["message"]
    assert os_conn.compute.get_server(server.id).name == "named"


@pytest.mark.parametrize(
    ("tag", "problem"),
    [("bad,tag", "'bad,tag' does not match '^[^,/]*$'"), ("t" * 61, f"'{'t' * 61}' is too long")],
)
def test_a_single_invalid_tag_is_refused_in_novas_words(
    sandbox: Sandbox, os_conn: Conn, tag: str, problem: str
) -> None:
    """`PUT /servers/{id}/tags/{tag}` words its 400 unlike the schema's (found by the differential)."""
    server = boot(os_conn, "tagged")
    url = f"{sandbox.info.openstack_url}/compute/v2.1/servers/{server.id}/tags"
    response = httpx.put(f"{url}/{tag}", headers=compute_headers(os_conn, "2.26"))
    assert response.status_code == 400
    assert response.json()["badRequest"]["message"] == (
        f"Tag '{tag}' is invalid. It must be a non empty string without characters '/' and ','. "
        f"Validation error message: {problem}"
    )
    empty = httpx.put(url, json={"tags": [""]}, headers=compute_headers(os_conn, "2.26"))
    assert (
        empty.json()["badRequest"]["message"] == "Invalid input for field/attribute 0. Value: . '' should be non-empty"
    )
    assert os_conn.compute.get_server(server.id).tags == []


def test_malformed_network_uuid_fails_novas_networks_schema(os_conn: Conn) -> None:
    """From 2.37 `networks` is a oneOf, so a malformed uuid is a schema 400 naming the whole list, not a
    network that could not be found (found by tests/live/test_differential.py)."""
    with pytest.raises(openstack.exceptions.BadRequestException) as caught:
        os_conn.compute.create_server(
            name="bad-net", image_id=image_id(os_conn, "cirros"), flavor_id="1", networks=[{"uuid": "not-a-uuid"}]
        )
    assert str(caught.value.details) == (
        "Invalid input for field/attribute networks. Value: [{'uuid': 'not-a-uuid'}]. "
        "[{'uuid': 'not-a-uuid'}] is not valid under any of the given schemas"
    )
    assert list(os_conn.compute.servers()) == []


def test_tags_on_create_need_2_52(sandbox: Sandbox, os_conn: Conn) -> None:
    body = {
        "server": {
            "name": "x",
            "imageRef": image_id(os_conn, "cirros"),
            "flavorRef": "1",
            "networks": "none",
            "tags": ["a"],
        }
    }
    response = httpx.post(
        f"{sandbox.info.openstack_url}/compute/v2.1/servers", json=body, headers=compute_headers(os_conn, "2.51")
    )
    assert response.status_code == 400
    assert "Additional properties are not allowed ('tags' was unexpected)" in response.json()["badRequest"]["message"]


def test_missing_server_is_item_not_found(sandbox: Sandbox, os_conn: Conn) -> None:
    missing = "00000000-0000-0000-0000-000000000000"
    response = httpx.get(
        f"{sandbox.info.openstack_url}/compute/v2.1/servers/{missing}", headers=compute_headers(os_conn)
    )
    assert response.json() == {"itemNotFound": {"code": 404, "message": f"Instance {missing} could not be found."}}
    assert os_conn.compute.find_server(missing) is None
    with pytest.raises(openstack.exceptions.NotFoundException):
        os_conn.compute.delete_server(missing, ignore_missing=False)


def test_delete_is_observed_after_the_delete_delay(sandbox: Sandbox, os_conn: Conn) -> None:
    sandbox.world.timings.delete_delay = 0.3
    server = boot(os_conn, "slow-delete")
    os_conn.compute.delete_server(server)
    assert os_conn.compute.get_server(server.id).task_state == "deleting"
    os_conn.compute.wait_for_delete(server, wait=10, interval=0.05)
    wait_gone(os_conn, server.id)


def test_changes_since_lists_a_deleted_server_as_deleted_without_its_metadata_and_tags(os_conn: Conn) -> None:
    """As a real Nova does (tests/live/test_changes_since.py): a server deleted since the time asked comes back as
    `DELETED`, its metadata `{}` and tags `[]`, so a tag filter hides it; listings without `changes-since` never
    show it."""
    doomed = boot(os_conn, "doomed", tags=["corral"], metadata={"corral-installation": "x"})
    kept = boot(os_conn, "kept", tags=["corral"])
    for server in (doomed, kept):
        os_conn.compute.wait_for_server(server, wait=15, interval=0.05)
    since = os_conn.compute.get_server(kept.id).updated_at
    os_conn.compute.delete_server(doomed)
    wait_gone(os_conn, doomed.id)

    def listed(**params: str) -> dict[str, tuple[str, dict[str, str], list[str]]]:
        response = os_conn.compute.get("/servers/detail", params=params, microversion="2.52")
        return {s["id"]: (s["status"], s["metadata"], s["tags"]) for s in response.json()["servers"]}

    changed = listed(**{"changes-since": since})
    assert changed[doomed.id] == ("DELETED", {}, [])
    assert changed[kept.id][0] == "ACTIVE"
    assert doomed.id not in listed()
    assert doomed.id not in listed(**{"changes-since": since, "tags": "corral"})
    assert doomed.id not in listed(**{"changes-since": "2999-01-01T00:00:00Z"})


def test_boot_from_volume_volumes_go_with_the_server(sandbox: Sandbox, os_conn: Conn) -> None:
    server = os_conn.create_server(
        "bfv",
        image="cirros",
        flavor="m1.tiny",
        network="private",
        boot_from_volume=True,
        volume_size=5,
        terminate_volume=True,
        wait=True,
        timeout=30,
    )
    assert server.image == {} or not server.image.id
    (volume,) = os_conn.block_storage.volumes(details=True)
    assert (volume.status, volume.size, volume.is_bootable) == ("in-use", 5, True)
    assert volume.attachments[0]["server_id"] == server.id
    assert os_conn.delete_server(server.id, wait=True, timeout=30)
    wait_until(lambda: list(os_conn.block_storage.volumes()) == [], what="volume deleted with server")


def test_blank_volumes_deleted_only_when_flagged(sandbox: Sandbox, os_conn: Conn) -> None:
    keep = os_conn.block_storage.create_volume(size=1, name="keep")
    os_conn.block_storage.wait_for_status(keep, "available", wait=10, interval=0.05)
    mappings = [
        {
            "boot_index": 0,
            "uuid": image_id(os_conn, "cirros"),
            "source_type": "image",
            "destination_type": "local",
            "delete_on_termination": True,
        },
        {
            "boot_index": -1,
            "source_type": "blank",
            "destination_type": "volume",
            "volume_size": 2,
            "delete_on_termination": True,
        },
        {"boot_index": -1, "source_type": "volume", "uuid": keep.id, "destination_type": "volume"},
    ]
    server = boot(os_conn, "scratch", block_device_mapping=mappings)
    wait_for_status(os_conn, server.id, "ACTIVE")
    attached = os_conn.compute.get_server(server.id).attached_volumes
    assert len(attached) == 2
    names = {v.name for v in os_conn.block_storage.volumes()}
    assert names == {"keep", f"{server.id}-blank-vol"}
    os_conn.compute.delete_server(server)
    os_conn.compute.wait_for_delete(server, wait=10, interval=0.05)
    wait_until(lambda: [v.name for v in os_conn.block_storage.volumes()] == ["keep"], what="blank gone")
    assert os_conn.block_storage.get_volume(keep.id).status == "available"


def test_volume_quota_fails_the_build(sandbox: Sandbox, os_conn: Conn) -> None:
    sandbox.call(lambda: sandbox.world.cloud.set_quota(gigabytes=1))
    mapping = [
        {
            "boot_index": 0,
            "uuid": image_id(os_conn, "cirros"),
            "source_type": "image",
            "destination_type": "volume",
            "volume_size": 5,
            "delete_on_termination": True,
        }
    ]
    server = os_conn.compute.create_server(
        name="big", image_id="", flavor_id="1", networks="none", block_device_mapping=mapping
    )
    wait_for_status(os_conn, server.id, "ERROR")
    assert "VolumeSizeExceedsAvailableQuota" in os_conn.compute.get_server(server.id).fault["message"]


def test_server_on_a_second_network_gets_a_port_and_its_groups_on_each(sandbox: Sandbox, os_conn: Conn) -> None:
    second = sandbox.call(lambda: sandbox.world.cloud.add_network("builds", "198.51.100.0/24"))
    server = os_conn.compute.create_server(
        name="two-nics",
        image_id=image_id(os_conn, "cirros"),
        flavor_id="1",
        networks=[{"uuid": network_id(os_conn, "private")}, {"uuid": second.id}],
    )
    wait_for_status(os_conn, server.id, "ACTIVE")
    ports = {port.network_id: port for port in os_conn.network.ports(device_id=server.id)}
    assert set(ports) == {network_id(os_conn, "private"), second.id}
    assert ports[second.id].fixed_ips[0]["ip_address"] == "198.51.100.2"
    shown = os_conn.compute.get_server(server.id)
    assert sorted(shown.addresses) == ["builds", "private"]
    assert shown.security_groups == [{"name": "default"}, {"name": "default"}], "Nova lists groups per port"


def test_server_group_hint_and_membership(os_conn: Conn) -> None:
    group = os_conn.compute.create_server_group(name="spread", policy="soft-anti-affinity")
    server = boot(os_conn, "grouped", scheduler_hints={"group": group.id})
    assert os_conn.compute.get_server_group(group.id).member_ids == [server.id]
    assert os_conn.compute.get_server(server.id).server_groups == [group.id]
    os_conn.compute.delete_server(server)
    os_conn.compute.wait_for_delete(server, wait=10, interval=0.05)
    wait_until(lambda: os_conn.compute.get_server_group(group.id).member_ids == [], what="member removed")


def test_reset_forgets_runtime_resources(sandbox: Sandbox, os_conn: Conn) -> None:
    boot(os_conn, "ephemeral")
    os_conn.compute.create_keypair(name="kp", public_key=KEY)
    sandbox.call(lambda: sandbox.world.cloud.set_quota(instances=3))
    sandbox.call(sandbox.world.reset)
    assert list(os_conn.compute.servers()) == []
    assert list(os_conn.compute.keypairs()) == []
    assert sandbox.call(sandbox.world.cloud.quota_view)["instances"]["limit"] == -1
    assert {n.name for n in os_conn.network.networks()} == {"private"}


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDZ5eWd1aTZ3d2x6bHZ6bHZ6bHZ6bHZ6bHZ6bHZ6bHZ6 corral@test"


def test_port_quota_is_novas_403_before_anything_is_made_and_neutrons_409(sandbox: Sandbox, os_conn: Conn) -> None:
    """Nova asks Neutron's quota before accepting a boot whose networks need new ports; Neutron itself
    refuses a port beyond it with 409 OverQuota. The details say how many are in use."""
    boot(os_conn, "first")
    in_use = len(list(os_conn.network.ports()))
    sandbox.call(lambda: sandbox.world.cloud.set_quota(ports=in_use))
    servers_before = len(list(os_conn.compute.servers()))
    with pytest.raises(openstack.exceptions.ForbiddenException) as caught:
        boot(os_conn, "second")
    assert caught.value.details == "Maximum number of ports exceeded"
    assert len(list(os_conn.compute.servers())) == servers_before, "nothing was made"
    network = next(iter(os_conn.network.networks()))
    with pytest.raises(openstack.exceptions.ConflictException) as refused:
        os_conn.network.create_port(network_id=network.id)
    assert "Quota exceeded for resources: ['port']" in str(refused.value)
    project = os_conn.current_project_id
    assert project is not None
    assert os_conn.network.get_quota(project, details=True).ports == {"limit": in_use, "used": in_use, "reserved": 0}
    assert os_conn.network.get_quota(project).ports == in_use
